"""The one module that reads the host: environment variables, users and the filesystem.

It gathers HostFacts once; the compiler is a pure function of the policy and these facts.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from launcher.model import Policy


@dataclass(frozen=True, kw_only=True)
class PathFact:
    given: str
    real: str
    kind: str            # dir, file, socket, missing, other
    owner: tuple[int, int] = (0, 0)
    sockets: tuple[str, ...] = ()   # socket files found inside a directory (bounded scan)


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    home: str
    env: tuple[tuple[str, str], ...]       # only the names the policy asks to pass
    workspace: PathFact
    protected: tuple[PathFact, ...]        # anchor of each policy.workspace.protect entry, in order
    mounts: tuple[PathFact, ...]           # one per policy.mounts entry, in order
    runtime_sockets: tuple[str, ...]       # real paths of known runtime sockets and dirs
    credential_paths: tuple[str, ...]      # real paths of credential locations
    probe_volume: str
    nonce: str                             # makes container names unique
    owner_pid: int                         # the launcher process, for `sandbox gc`


_RUNTIME_PATHS = (
    "/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/var/run/containerd",
    "/run/podman", "/var/run/podman", "/run/buildkit", "/run/crio", "/var/run/crio",
    "/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
)
_CREDENTIAL_PATHS = (
    ".ssh", ".aws", ".config/gcloud", ".azure", ".kube", ".docker", ".gnupg", ".netrc",
    ".git-credentials", ".npmrc", ".pypirc", ".config/gh", ".password-store", ".vault-token",
)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "other"


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
    kind = _kind(st.st_mode)
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
            return PathFact(given=sub, real=path, kind=_kind(st.st_mode))
    raise AssertionError("unreachable")


def runtime_socket_paths() -> tuple[str, ...]:
    paths = set(_RUNTIME_PATHS)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        paths.update({f"{runtime_dir}/docker.sock", f"{runtime_dir}/podman", f"{runtime_dir}/containerd"})
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        paths.add(docker_host[len("unix://"):])
    return tuple(sorted({os.path.realpath(p) for p in paths}))


def gather(policy: Policy, workspace: str, probe_volume: str) -> HostFacts:
    home = os.path.realpath(os.path.expanduser("~"))
    ws = path_fact(workspace, os.getcwd(), scan=True)
    return HostFacts(
        home=home,
        env=tuple((name, os.environ[name]) for name in policy.env.pass_names if name in os.environ),
        workspace=ws,
        protected=tuple(protected_anchor(ws.real, rel) for rel in policy.workspace.protect),
        mounts=tuple(path_fact(m.source, os.getcwd(), scan=True) for m in policy.mounts),
        runtime_sockets=runtime_socket_paths(),
        credential_paths=tuple(os.path.realpath(os.path.join(home, p)) for p in _CREDENTIAL_PATHS),
        probe_volume=probe_volume,
        nonce=os.urandom(3).hex(),
        owner_pid=os.getpid(),
    )


def is_interactive() -> bool:
    import sys

    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("CI", "").lower() not in ("1", "true")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true")


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_empty_dirs(paths: tuple[str, ...]) -> None:
    """Remove placeholder mount points Docker created, deepest first, only while empty."""
    for path in sorted(paths, key=len, reverse=True):
        try:
            os.rmdir(path)
        except OSError:
            pass


def bind_source_intact(path: str) -> bool:
    """Just before start: the compiled real path still exists, is no socket, and no component of
    it has been swapped for a symlink since it was resolved."""
    fact = path_fact(path)
    return fact.real == path and fact.kind in ("dir", "file")
