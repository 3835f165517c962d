"""What differs between container engines, one dialect module per engine: today how each one's
inspect reports what the plan asked for (verify.compare_inspect compares through a dialect and
names no engine). A new engine adds its dialect here, its fake and its tests (docs/engines.md).

May import: the plan and the engine protocol (launcher.plan, launcher.engineproto)."""

from __future__ import annotations

from launcher.dialects.docker import DOCKER, Dialect
from launcher.dialects.podman import PODMAN

DIALECTS = {d.name: d for d in (DOCKER, PODMAN)}


def for_engine(podman: bool) -> Dialect:
    """The dialect of an engine that is podman or (else) Docker."""
    return PODMAN if podman else DOCKER


__all__ = ["DIALECTS", "DOCKER", "PODMAN", "Dialect", "for_engine"]
