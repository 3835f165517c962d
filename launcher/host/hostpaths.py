"""Path facts: a host path resolved (~, .., every symlink) and stat'ed, the sockets below a
directory, the anchor a protected path is mounted read-only at. Read from the filesystem, never
from the environment (launcher/host/host.py's alone)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from launcher.errors import PolicyError, Problem


@dataclass(frozen=True, kw_only=True)
class PathFact:
    given: str
    real: str
    kind: str            # dir, file, socket, missing, other
    owner: tuple[int, int] = (0, 0)
    sockets: tuple[str, ...] = ()   # socket files found inside a directory (bounded scan)


def kind_of(mode: int) -> str:
    return ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else
            "socket" if stat.S_ISSOCK(mode) else "other")


SCAN_LIMIT = 20_000  # entries; beyond that the probe's sockets.mounts check still walks every mount


def find_sockets(root: str, limit: int = SCAN_LIMIT) -> tuple[str, ...]:
    """Socket files below a directory (symlinks not followed), up to `limit` entries looked at."""
    found, stack, seen = [], [root], 0
    while stack and seen < limit and len(found) < 5:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                        found.append(entry.path)
        except OSError:
            continue
    return tuple(found)


def path_fact(given: str, base: str | None = None, scan: bool = False) -> PathFact:
    """Resolve ~, .. and every symlink, then stat the result (and look for sockets inside)."""
    expanded = os.path.expanduser(given)
    if base and not os.path.isabs(expanded):
        expanded = os.path.join(base, expanded)
    real = os.path.realpath(expanded)
    try:
        st = os.stat(real)
    except OSError:
        return PathFact(given=given, real=real, kind="missing")
    kind = kind_of(st.st_mode)
    sockets = find_sockets(real) if scan and kind == "dir" else ()
    return PathFact(given=given, real=real, kind=kind, owner=(st.st_uid, st.st_gid), sockets=sockets)


def protected_anchor(workspace: str, rel: str) -> PathFact:
    """The part of a protected path that must be mounted read-only to protect it.

    Walks the components without following symlinks and stops at the first one that is missing
    or not a directory: that one (given = its workspace-relative path) is the anchor. A symlink
    anywhere on the way is reported as kind 'symlink'.
    """
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        sub = "/".join(parts[:depth])
        path = os.path.join(workspace, sub)
        try:
            st = os.lstat(path)
        except OSError:
            return PathFact(given=sub, real=path, kind="missing")
        if stat.S_ISLNK(st.st_mode):
            return PathFact(given=sub, real=path, kind="symlink")
        if not stat.S_ISDIR(st.st_mode) or depth == len(parts):
            return PathFact(given=sub, real=path, kind=kind_of(st.st_mode))
    raise AssertionError("unreachable")


def shared_anchor(anchor: PathFact, placeholders: tuple[str, ...]) -> PathFact:
    """An empty placeholder another sandbox of this workspace made is still a missing path: this
    sandbox mounts its own read-only tmpfs there rather than binding a directory that goes away."""
    if anchor.kind in ("dir", "file") and anchor.real in placeholders:
        try:
            if not (os.listdir(anchor.real) if anchor.kind == "dir" else os.path.getsize(anchor.real)):
                return PathFact(given=anchor.given, real=anchor.real, kind="missing")
        except OSError:
            pass
    return anchor

def bind_source_intact(path: str) -> bool:
    """Just before start: the compiled real path still exists, is no socket, and no component of
    it has been swapped for a symlink since it was resolved."""
    fact = path_fact(path)
    return fact.real == path and fact.kind in ("dir", "file")


def workspace_real(workspace: str) -> str:
    return os.path.realpath(os.path.join(os.getcwd(), os.path.expanduser(workspace)))


def existing_workspace(workspace: str) -> str:
    """The workspace's real path, or the PolicyError every command gives for one that is no directory."""
    real = workspace_real(workspace)
    if not os.path.isdir(real):
        kind = "missing" if not os.path.lexists(real) else "not a directory"
        raise PolicyError([Problem(file="command line", path="--workspace", expected="an existing directory",
                                   found=f"{real} ({kind})")])
    return real


def runtime_installed(path: str) -> bool:
    """Is the OCI runtime an engine lists at `path` installed? podman lists every runtime of
    containers.conf, installed or not; a bare name (Docker's "runc") is found on the engine's own
    PATH, which is not ours to read: taken as there."""
    return not os.path.isabs(path) or (os.path.isfile(path) and os.access(path, os.X_OK))
