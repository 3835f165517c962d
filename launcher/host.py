"""The one module that reads the host: environment variables, users and the filesystem.

It gathers HostFacts once; the compiler is a pure function of the policy and these facts.
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
from dataclasses import dataclass
from typing import Callable

from launcher import cafiles
from launcher.errors import PolicyError, Problem
from launcher.gitdirs import GitFacts
from launcher.model import Access, Policy, WorkspaceMode
from launcher.paths import CREDENTIAL_PATHS, RUNTIME_HOST_PATHS


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
    proxy_image: str
    # A launch's own: a unique container name and the launcher's pid (for `sandbox gc`). Files for
    # another tool (compile, devcontainer) have neither, so the same inputs give the same bytes.
    nonce: str = ""                        # "": the name comes from the policy and the workspace
    owner_pid: int = 0                     # 0: no owner-pid label
    ca_files: tuple[cafiles.CaFile, ...] = ()   # each secrets[].ca_file (given), read and checked
    config_placeholder: str = ""           # the file a missing protected config file is bound from
    ca_certs: tuple[cafiles.CaFile, ...] = ()   # each ca_certificates entry, read and checked
    ca_store: tuple[str, str] = ("", "")   # trustfiles.store_files: the extras alone, the system CAs plus them
    # Writable bind workspaces only: what git on the host reads for it (gitscan.py), and every
    # host-executed surface's fingerprint (scan.py).
    git: GitFacts = GitFacts()
    surfaces: tuple[tuple[str, str], ...] | None = None   # None: not scanned (read-only workspace)


def _kind(mode: int) -> str:
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
    paths = set(RUNTIME_HOST_PATHS)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        paths.update({f"{runtime_dir}/docker.sock", f"{runtime_dir}/podman", f"{runtime_dir}/containerd"})
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        paths.add(docker_host[len("unix://"):])
    return tuple(sorted({os.path.realpath(p) for p in paths}))


def _shared(anchor: PathFact, placeholders: tuple[str, ...]) -> PathFact:
    """An empty placeholder another sandbox of this workspace made is still a missing path: this
    sandbox mounts its own read-only tmpfs there rather than binding a directory that goes away."""
    if anchor.kind in ("dir", "file") and anchor.real in placeholders:
        try:
            if not (os.listdir(anchor.real) if anchor.kind == "dir" else os.path.getsize(anchor.real)):
                return PathFact(given=anchor.given, real=anchor.real, kind="missing")
        except OSError:
            pass
    return anchor


def gather(policy: Policy, workspace: str, probe_volume: str, proxy_image: str = "",
           placeholders: tuple[str, ...] = (), config_placeholder: str = "",
           ca_store: tuple[str, str] = ("", ""), git_placeholder: str = "", launched: bool = True) -> HostFacts:
    home = os.path.realpath(os.path.expanduser("~"))
    ws = path_fact(workspace, os.getcwd(), scan=True)
    surfaces, git = None, GitFacts()
    # Not a workspace the compiler refuses anyway (/, a parent of $HOME, a kernel filesystem).
    refused = ws.real == "/" or (home + "/").startswith(ws.real + "/") or ws.real.split("/")[1] in ("proc", "sys", "dev")
    bound = policy.workspace.mode is WorkspaceMode.BIND   # a copy: the agent never reaches the tree itself
    if ws.kind == "dir" and policy.workspace.access is Access.READ_WRITE and bound and not refused:
        from launcher import gitscan, scan

        surfaces = scan.snapshot(ws.real)
        git = gitscan.discover(ws.real, surfaces, writable_git=policy.workspace.git is Access.READ_WRITE,
                               owner=ws.owner, placeholder=git_placeholder)
        surfaces.update(scan.extras(ws.real, git.fingerprint, surfaces))   # what the include graph names
    inside = tuple(p for p in git.protect if p not in policy.workspace.protected)
    return HostFacts(
        home=home,
        env=tuple((name, os.environ[name]) for name in policy.env.pass_names if name in os.environ),
        workspace=ws,
        protected=tuple(_shared(protected_anchor(ws.real, rel), placeholders)
                        for rel in policy.workspace.protected + inside) if bound else (),
        mounts=tuple(path_fact(m.source, os.getcwd(), scan=True) for m in policy.mounts),
        runtime_sockets=runtime_socket_paths(),
        credential_paths=tuple(os.path.realpath(os.path.join(home, p)) for p in CREDENTIAL_PATHS),
        probe_volume=probe_volume,
        config_placeholder=config_placeholder, ca_store=ca_store,
        ca_certs=tuple(ca_file(given) for given in policy.ca_certificates),
        proxy_image=proxy_image,
        nonce=os.urandom(3).hex() if launched else "",
        owner_pid=os.getpid() if launched else 0,
        ca_files=tuple(ca_file(given) for given in dict.fromkeys(s.ca_file for s in policy.secrets if s.ca_file)),
        git=git,
        surfaces=None if surfaces is None else tuple(sorted(surfaces.items())),
    )


def read_secret(name: str, env: str, file: str) -> str:
    """The value of an injected secret (for the proxy only), from a host variable or a file."""
    where = f"secrets ({name})"
    if env:
        value = os.environ.get(env, "")
        if not value:
            raise PolicyError([Problem(file="host environment", path=where, expected=f"${env} set and not empty",
                                       found="nothing", hint=f"export {env}=… before running sandbox")])
        return value
    path = os.path.expanduser(file)
    data = _read_regular(path, required=True, follow=True, limit=64 * 1024)
    return data.decode("utf-8", errors="replace").removesuffix("\n")


def codex_refresh_url() -> str:
    """Where a Codex ChatGPT login is refreshed: $SANDBOX_CODEX_REFRESH_URL (a test's stand-in) or Codex's own."""
    return os.environ.get("SANDBOX_CODEX_REFRESH_URL", "") or "https://auth.openai.com/oauth/token"


def ca_file(given: str) -> cafiles.CaFile:
    """A CA file the policy names (public data), read and checked here, once: its certificates or why not."""
    fact = path_fact(given, os.getcwd())
    data = _read_regular(fact.real, required=True, follow=True, limit=cafiles.READ_LIMIT) if fact.kind == "file" else b""
    return cafiles.checked(fact.given, fact.real, fact.kind, data)


def is_interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("CI", "").lower() not in ("1", "true")


def colour_allowed() -> bool:
    """no-color.org: any non-empty NO_COLOR turns colour off; a dumb terminal has no escapes."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true")


def engine_socket(default: str) -> str | None:
    """DOCKER_HOST's unix socket (`default` when unset); None for tcp://, ssh:// and TLS (the SDK's)."""
    address = "" if os.environ.get("DOCKER_TLS_VERIFY") else os.environ.get("DOCKER_HOST", "") or f"unix://{default}"
    return address[len("unix://"):] if address.startswith("unix://") else None


def timings_requested() -> bool:
    """SANDBOX_TIMINGS=1: `sandbox run` and `up` print how long each launch phase took."""
    return os.environ.get("SANDBOX_TIMINGS", "").lower() in ("1", "true")


def step_summary_path() -> str:
    return os.environ.get("GITHUB_STEP_SUMMARY", "")   # set by GitHub Actions: Markdown for the job page


def network_facts() -> tuple[str, str]:
    """SANDBOX_NETWORK_POOL (see subnets.py) and the host's IPv4 routes (/proc/net/route; "" if absent)."""
    return os.environ.get("SANDBOX_NETWORK_POOL", ""), (_read_regular("/proc/net/route", required=False, follow=True)
                                                         or b"").decode(errors="replace")


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


def bind_source_intact(path: str) -> bool:
    """Just before start: the compiled real path still exists, is no socket, and no component of
    it has been swapped for a symlink since it was resolved."""
    fact = path_fact(path)
    return fact.real == path and fact.kind in ("dir", "file")


# ---- policy layers and trust store (read here: the one module that reads the host)

ORG_POLICY = "/etc/sandbox/policy.yaml"
_LAYER_MAX_BYTES = 256 * 1024 + 1   # one byte more than the YAML loader accepts, so it reports the size


@dataclass(frozen=True, kw_only=True)
class LayerFile:
    path: str
    data: bytes


def _xdg_dir(variable: str, default: str) -> str:
    value = os.environ.get(variable, "")
    # The XDG spec says to ignore a relative value.
    return value if os.path.isabs(value) else os.path.join(os.path.expanduser("~"), default)


def _read_regular(path: str, *, required: bool, follow: bool, limit: int = _LAYER_MAX_BYTES) -> bytes | None:
    """The bytes of a regular file (never a FIFO or device: a repository could plant one to hang us)."""
    def refuse(found: str, hint: str = "") -> PolicyError:
        return PolicyError([Problem(file=path, path="", expected="a readable regular file", found=found, hint=hint)])

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if required:
            raise refuse("no such file", "fix the path, or unset the variable that names it") from None
        return None
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise refuse("a symbolic link", "a repository policy must be the file itself") from None
        raise refuse(exc.strerror or str(exc)) from None
    except ValueError:   # a NUL byte, which YAML can carry ("\0") and no path can
        raise refuse("a NUL byte in the path") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse(_kind(os.fstat(fd).st_mode))
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def org_policy_file() -> LayerFile | None:
    """$SANDBOX_ORG_POLICY (must exist when set) or /etc/sandbox/policy.yaml (when present)."""
    named = os.environ.get("SANDBOX_ORG_POLICY", "")
    path = named or ORG_POLICY
    data = _read_regular(path, required=bool(named), follow=True)
    return None if data is None else LayerFile(path=path, data=data)


def user_policy_file() -> LayerFile | None:
    path = os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config"), "sandbox", "policy.yaml")
    data = _read_regular(path, required=False, follow=True)
    return None if data is None else LayerFile(path=path, data=data)


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


def repo_policy_file(workspace: str) -> LayerFile | None:
    """`.sandbox.yaml` at the workspace root, never through a symlink."""
    path = os.path.join(workspace, ".sandbox.yaml")
    if os.path.isdir(path) and not os.path.islink(path):
        # The empty mount point Docker makes while a sandbox protects the missing file: no policy.
        return None
    data = _read_regular(path, required=False, follow=False)
    return None if data is None else LayerFile(path=path, data=data)


def state_dir() -> str:
    return os.path.join(_xdg_dir("XDG_STATE_HOME", os.path.join(".local", "state")), "sandbox")


def trust_store_path() -> str:
    return os.path.join(state_dir(), "trust.json")


def read_trust_store() -> tuple[str, str]:
    """(path, text); text is empty when nothing was approved yet."""
    path = trust_store_path()
    data = _read_regular(path, required=False, follow=True, limit=64 * 1024 * 1024)
    return path, (data or b"").decode("utf-8", errors="replace")


def update_trust_store(change: Callable[[str], str]) -> str:
    """Replace the trust store with change(its current text), atomically and readable by this user
    only. A lock file serialises concurrent launchers, so no approval overwrites another."""
    path = trust_store_path()
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    lock = os.open(f"{path}.lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = change(read_trust_store()[1])
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    finally:
        os.close(lock)   # releases the lock
    return path


def environment_with(**extra: str) -> dict[str, str]:
    """This process's environment plus `extra`, for a host program the launcher runs (git)."""
    return {**os.environ, **extra}
