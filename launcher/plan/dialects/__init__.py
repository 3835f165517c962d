"""What differs between container engines, one dialect module per engine: what the plan needs
for each (the compiler asks through `of`: rlimits, the proxy's hosts entry, sysctls, marker
mounts) and how each one's inspect reports what the plan asked for (verify.compare_inspect
compares through a dialect). Neither names an engine. A new engine adds its dialect here, its fake
and its tests (docs/engines.md).

May import: the plan (launcher.plan.plan); the compiler reads the plan-side decisions."""

from __future__ import annotations

from launcher.plan.dialects.docker import DOCKER, Dialect
from launcher.plan.dialects.podman import PODMAN

DIALECTS = {d.name: d for d in (DOCKER, PODMAN)}


def of(kind: str) -> Dialect:
    """The dialect of an engine by its kind (engineid.DOCKER, engineid.PODMAN)."""
    return DIALECTS[kind]


__all__ = ["DIALECTS", "DOCKER", "PODMAN", "Dialect", "of"]
