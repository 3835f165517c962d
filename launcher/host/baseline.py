"""The workspace's surfaces as they were before a sandbox started, kept on the host (never where the
agent can write) so that `sandbox down` and `gc` can say what the agent changed."""

from __future__ import annotations

import os

from launcher.host import host, scan
from launcher.policy import surfaces


def changes(workspace: str, before: dict[str, str]) -> tuple[surfaces.Change, ...]:
    """What the agent changed, comparing `before` with the workspace as it is now."""
    # Whatever was fingerprinted before is fingerprinted again, also where only the include graph named it.
    extra = tuple(p for p, f in before.items() if f.startswith("git:"))
    included = tuple(p for p, f in before.items() if f.startswith("include:"))
    return surfaces.compare(before, scan.snapshot(workspace, extra=extra, included=included))


def _path(name: str) -> str:
    return host.state_json_path("baselines", name)


def save(name: str, workspace: str, before: dict[str, str]) -> None:
    host.write_state_json(_path(name), {"workspace": workspace, "surfaces": before})


def take(name: str) -> tuple[str, dict[str, str]] | None:
    """The saved (workspace, surfaces) of sandbox `name`, removed from the store; None if none."""
    saved = host.read_state_json(_path(name))
    if saved is None:
        return None
    host.drop_state(_path(name))
    return saved["workspace"], saved["surfaces"]


def names() -> tuple[str, ...]:
    try:
        return tuple(n[:-5] for n in os.listdir(os.path.dirname(_path("x"))) if n.endswith(".json"))
    except OSError:
        return ()
