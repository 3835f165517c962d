"""The engine's side of each engine's dialect: how its API is asked for what the plan says (the
request bodies where its create API differs from Docker's). The plan's side is launcher.plan.dialects."""

from __future__ import annotations

from launcher.engine.dialects import podman

__all__ = ["podman"]
