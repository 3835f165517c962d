"""The engine's side of each engine's dialect: how its API is asked for what the plan says (its
create requests, network create, inspects, the rlimits of a container no plan describes) and what
it does otherwise that the launcher works around; `Engine.dialect` is the engine's, chosen once by
its kind (launcher.host.engineid). The plan's side is launcher.plan.dialects (each engine dialect
holds its own as `plan`). A new engine adds its dialect here and there, its fake and its tests
(docs/engines.md#adding-an-engine)."""

from __future__ import annotations

from launcher.engine.dialects.docker import DOCKER_API, EngineDialect
from launcher.engine.dialects.podman import PODMAN_API

DIALECTS = {d.name: d for d in (DOCKER_API, PODMAN_API)}


def of(kind: str) -> EngineDialect:
    """The dialect of an engine by its kind (engineid.DOCKER, engineid.PODMAN)."""
    return DIALECTS[kind]


__all__ = ["DIALECTS", "DOCKER_API", "PODMAN_API", "EngineDialect", "of"]
