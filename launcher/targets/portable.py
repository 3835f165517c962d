"""What a file another tool reads from a repository (compose.yaml, .devcontainer/) says instead of a
host path, so that the same policy writes the same bytes in any checkout on any machine: the
workspace as the tool names it (`.`, `..`, `${localWorkspaceFolder}`), the launcher's read-only files
by a name the file chooses, and the probe's `wsroot` (the workspace's host path, which
mounts.workspace compares with the bind's source) from the environment at start."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from launcher import labels as label
from launcher.plan.plan import LaunchPlan, MountKind

WSROOT_ENV = "SANDBOX_WSROOT"   # the workspace's host path, set by the tool that starts the container


@dataclass(frozen=True, kw_only=True)
class Places:
    workspace: str                  # the plan's workspace: the host real path the sources are under
    base: str                       # the workspace as the written file names it
    files: Mapping[str, str] = field(default_factory=dict)   # a launcher file's host path -> its name there

    def source(self, path: str, text: Callable[[str], str] = str) -> str:
        """A bind source as the file says it; `text` escapes what came from the host (not our names)."""
        if path in self.files:
            return self.files[path]
        if path == self.workspace:
            return self.base
        if path.startswith(self.workspace.rstrip("/") + "/"):
            return f"{self.base}/{text(posixpath.relpath(path, self.workspace))}"
        return text(path)   # a mount the policy names outside the workspace: its own host path


def workspace_of(plan: LaunchPlan) -> str:
    c = plan.container
    return next(m.source for m in c.mounts if m.kind is MountKind.BIND and m.target == c.working_dir)


def launcher_files(plan: LaunchPlan, state: Mapping[str, str]) -> dict[str, str]:
    """Host path -> text of the launcher's files (state directory) the plan binds from."""
    return {m.source: state[m.source] for m in plan.container.mounts if m.kind is MountKind.BIND and m.source in state}


def probe_start(plan: LaunchPlan) -> tuple[list[str], list[str]]:
    """(entrypoint, command) that start the same probe with the same arguments, `wsroot` taken from
    $SANDBOX_WSROOT: busybox's sh adds it and execs the probe (which refuses an empty or relative one)."""
    c = plan.container
    busybox, shell, script = c.entrypoint
    wrapper = f'exec "$0" {shell} {script} "wsroot=${WSROOT_ENV}" "$@"'
    cut = c.command.index("--")
    command = [a for a in c.command[:cut] if not a.startswith("wsroot=")] + list(c.command[cut:])
    return [busybox, shell, "-c", wrapper, busybox], command


def portable_labels(plan: LaunchPlan, workspace: str | None) -> dict[str, str]:
    """The container's labels with the placeholders relative to the workspace, and the workspace
    label `workspace` (a variable the tool fills), or none where the tool has none to give."""
    root = workspace_of(plan)
    out = {}
    for key, value in plan.container.labels:
        if key == label.PLACEHOLDERS:
            value = json.dumps([posixpath.relpath(p, root) for p in json.loads(value)])
        elif key == label.WORKSPACE:
            if workspace is None:
                continue
            value = workspace
        elif key == label.SESSION_CEILING:   # its source may name a policy file's host path; extend never reaches these
            value = value.split(" ", 1)[0]
        out[key] = value
    return out


def network_labels(labels: tuple[tuple[str, str], ...], workspace: str | None) -> dict[str, str]:
    return {k: (workspace if k == label.WORKSPACE else v) for k, v in labels
            if not (k == label.WORKSPACE and workspace is None)}


def without_host(plan: LaunchPlan) -> LaunchPlan:
    """The plan with the probe's wsroot left to the environment (for the renderers' other fields)."""
    entrypoint, command = probe_start(plan)
    return replace(plan, container=replace(plan.container, entrypoint=tuple(entrypoint), command=tuple(command)))
