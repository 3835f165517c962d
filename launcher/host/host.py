"""The one module that reads the environment: the variables the launcher honours, the terminal,
the policy layers' and the trust store's places. The other host facts by subject: hostpaths.py
(paths resolved and stat'ed), hostfiles.py (reading a file safely), cafiles.py (CA files),
hostgit.py (git), hostfacts.py (HostFacts, gathered once for the pure compiler).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable

from launcher.errors import PolicyError, Problem
from launcher.host.hostfiles import LayerFile, read_regular
from launcher.host.paths import RUNTIME_HOST_PATHS


def passed_env(names) -> tuple[tuple[str, str], ...]:
    """env.pass: these host variables' values, for those that are set."""
    return tuple((name, os.environ[name]) for name in names if name in os.environ)


def runtime_socket_paths() -> tuple[str, ...]:
    paths = set(RUNTIME_HOST_PATHS)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        paths.update({f"{runtime_dir}/docker.sock", f"{runtime_dir}/podman", f"{runtime_dir}/containerd"})
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        paths.add(docker_host[len("unix://"):])
    return tuple(sorted({os.path.realpath(p) for p in paths}))


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
    data = read_regular(path, required=True, follow=True, limit=64 * 1024)
    return data.decode("utf-8", errors="replace").removesuffix("\n")


def codex_refresh_url() -> str:
    """Where a Codex ChatGPT login is refreshed: $SANDBOX_CODEX_REFRESH_URL (a test's stand-in) or Codex's own."""
    return os.environ.get("SANDBOX_CODEX_REFRESH_URL", "") or "https://auth.openai.com/oauth/token"


def is_interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("CI", "").lower() not in ("1", "true")


def colour_allowed() -> bool:
    """no-color.org: any non-empty NO_COLOR turns colour off; a dumb terminal has no escapes."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"


def pager() -> tuple[str, dict[str, str]]:
    """$PAGER (default `less -FRX`, none on a dumb terminal) and the environment to start it in:
    as git does, less and lv without options of the user's own get LESS=FRX and LV=-c."""
    command = os.environ.get("PAGER", "less -FRX" if os.environ.get("TERM") != "dumb" else "")
    return command, {"LESS": "FRX", "LV": "-c"} | dict(os.environ)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true")


def engine_socket(default: str) -> str | None:
    """DOCKER_HOST's unix socket (`default` when unset); None for tcp://, ssh:// and TLS (the SDK's)."""
    address = "" if os.environ.get("DOCKER_TLS_VERIFY") else engine_address(default)[0]
    return address[len("unix://"):] if address.startswith("unix://") else None


def engine_address(default: str) -> tuple[str, bool]:
    """Where `sandbox` connects (DOCKER_HOST, else the unix socket `default`), and whether DOCKER_HOST said so."""
    named = os.environ.get("DOCKER_HOST", "")
    return named or f"unix://{default}", bool(named)


@dataclass(frozen=True, kw_only=True)
class EngineAddress:
    address: str       # unix:///var/run/docker.sock, tcp://…
    source: str        # why it is listed
    used: bool         # the one `sandbox` connects to


def engine_addresses(default: str) -> tuple[EngineAddress, ...]:
    """Where engines may answer on this host: the one `sandbox` uses (DOCKER_HOST, else `default`),
    the docker CLI's current context, and the usual sockets that exist (Docker's, rootful and
    rootless podman's, rootless Docker's); each address once."""
    address, named = engine_address(default)
    found = [EngineAddress(address=address, used=True,
                           source="DOCKER_HOST" if named else "the default socket, DOCKER_HOST unset")]
    context = _docker_context()
    if context:
        found.append(EngineAddress(address=context[1], used=False, source=f"docker context {context[0]}"))
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "") or f"/run/user/{os.getuid()}"
    for path, source in ((default, "Docker's socket"), ("/run/podman/podman.sock", "podman's system socket"),
                         (f"{runtime_dir}/podman/podman.sock", "podman's user socket"),
                         (f"{runtime_dir}/docker.sock", "Docker's user socket (rootless)")):
        if os.path.exists(path):
            found.append(EngineAddress(address=f"unix://{path}", used=False, source=source))
    seen, out = set(), []
    for item in found:
        key = os.path.realpath(item.address[len("unix://"):]) if item.address.startswith("unix://") else item.address
        if key not in seen:
            seen.add(key)
            out.append(item)
    return tuple(out)


def _docker_context() -> tuple[str, str] | None:
    """(name, endpoint) of the docker CLI's current context when it is not "default" (DOCKER_CONTEXT,
    else config.json's currentContext), or None; the docker CLI follows it, `sandbox` does not."""
    import hashlib
    import json

    config_dir = os.environ.get("DOCKER_CONFIG", "") or os.path.expanduser("~/.docker")
    name = os.environ.get("DOCKER_CONTEXT", "")
    try:
        if not name:
            name = json.loads(read_regular(os.path.join(config_dir, "config.json"), required=False, follow=True)
                              or b"{}").get("currentContext", "")
        if not name or name == "default":
            return None
        meta = os.path.join(config_dir, "contexts", "meta", hashlib.sha256(name.encode()).hexdigest(), "meta.json")
        endpoint = json.loads(read_regular(meta, required=False, follow=True) or b"{}")["Endpoints"]["docker"]["Host"]
    except (PolicyError, ValueError, KeyError, TypeError, AttributeError):
        return (name, "?") if name and name != "default" else None
    return name, str(endpoint)


def timings_requested() -> bool:
    """SANDBOX_TIMINGS=1: `sandbox run` and `up` print how long each launch phase took."""
    return os.environ.get("SANDBOX_TIMINGS", "").lower() in ("1", "true")


def runtime_dir_env() -> str | None:
    """$XDG_RUNTIME_DIR: where the resident helper's socket is (launcher/resident.py)."""
    return os.environ.get("XDG_RUNTIME_DIR")


def replace_environment(env: dict[str, str]) -> None:
    """The resident helper's child takes its client's environment whole (launcher/cli/helper.py)."""
    os.environ.clear()
    os.environ.update(env)


def probe_volume_only() -> bool:
    """SANDBOX_PROBE_VOLUME=1: a sandbox mounts the shared probe volume even on an engine on this
    host (launcher/host/probedir.py), as on an engine elsewhere: the tests of that path, benchmarks."""
    return os.environ.get("SANDBOX_PROBE_VOLUME", "").lower() in ("1", "true")


def step_summary_path() -> str:
    return os.environ.get("GITHUB_STEP_SUMMARY", "")   # set by GitHub Actions: Markdown for the job page


def network_facts() -> tuple[str, str]:
    """SANDBOX_NETWORK_POOL (see subnets.py) and the host's IPv4 routes (/proc/net/route; "" if absent)."""
    return os.environ.get("SANDBOX_NETWORK_POOL", ""), (read_regular("/proc/net/route", required=False, follow=True)
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


def process_argv(pid: int) -> list[str]:
    """A host process's argv ([] when it is gone, a zombie, or /proc is not there)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as data:
            return data.read(1 << 16).decode(errors="replace").split("\0")[:-1]
    except (OSError, ValueError):
        return []


# ---- policy layers and trust store (read here: the one module that reads the host)

ORG_POLICY = "/etc/sandbox/policy.yaml"
def _xdg_dir(variable: str, default: str) -> str:
    value = os.environ.get(variable, "")
    # The XDG spec says to ignore a relative value.
    return value if os.path.isabs(value) else os.path.join(os.path.expanduser("~"), default)


def org_policy_file() -> LayerFile | None:
    """$SANDBOX_ORG_POLICY (must exist when set) or /etc/sandbox/policy.yaml (when present)."""
    named = os.environ.get("SANDBOX_ORG_POLICY", "")
    path = named or ORG_POLICY
    data = read_regular(path, required=bool(named), follow=True)
    return None if data is None else LayerFile(path=path, data=data)


def user_policy_file() -> LayerFile | None:
    path = os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config"), "sandbox", "policy.yaml")
    data = read_regular(path, required=False, follow=True)
    return None if data is None else LayerFile(path=path, data=data)


def user_config_file() -> LayerFile | None:
    """$XDG_CONFIG_HOME/sandbox/config.yaml (default ~/.config): the user's defaults (settings.py)."""
    path = user_config_path()
    data = read_regular(path, required=False, follow=True)
    return None if data is None else LayerFile(path=path, data=data)


def user_config_path() -> str:
    return os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config"), "sandbox", "config.yaml")


def launcher_paths() -> tuple[str, ...]:
    """Real paths of what the launcher trusts on this host: its state (trust store, approvals,
    probe files), the user's layer and defaults, the org policy. No sandbox may mount them."""
    org = os.environ.get("SANDBOX_ORG_POLICY", "") or ORG_POLICY
    return tuple(os.path.realpath(p) for p in
                 (state_dir(), os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config"), "sandbox"), org))


def settings_environment(names) -> dict[str, str]:
    """The SANDBOX_* variables of settings.py that are set (the defaults' environment source)."""
    return {name: os.environ[name] for name in names if name in os.environ}


def home_dir() -> str:
    """The user's home ($HOME): `~` in the user's config file; ${HOME} in a committable compose file."""
    return os.path.expanduser("~")


def state_dir() -> str:
    return os.path.join(_xdg_dir("XDG_STATE_HOME", os.path.join(".local", "state")), "sandbox")


def state_json_path(kind: str, name: str) -> str:
    """$XDG_STATE_HOME/sandbox/KIND/NAME.json: what the launcher keeps per sandbox on the host."""
    return os.path.join(state_dir(), kind, f"{name}.json")


def write_state_json(path: str, value) -> None:
    """Keep `value` as JSON at `path` (a state_json_path), whole or not at all (a rename), in a
    folder and a file only this user can read."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temp = f"{path}.{os.getpid()}.tmp"
    with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        json.dump(value, out)
    os.replace(temp, path)


def read_state_json(path: str):
    """What write_state_json kept at `path`, or None: none, or not JSON."""
    try:
        with open(path) as data:
            return json.load(data)
    except (OSError, ValueError):
        return None


def drop_state(path: str) -> None:
    """Forget a state file (gone already is fine)."""
    try:
        os.unlink(path)
    except OSError:
        pass


@contextlib.contextmanager
def locked(path: str):
    """Hold an exclusive lock on the file `path` (made 0600 if missing; the kernel drops the lock
    if the launcher dies): one launcher at a time changes what it guards."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def trust_store_path() -> str:
    return os.path.join(state_dir(), "trust.json")


def read_trust_store() -> tuple[str, str]:
    """(path, text); text is empty when nothing was approved yet."""
    path = trust_store_path()
    data = read_regular(path, required=False, follow=True, limit=64 * 1024 * 1024)
    return path, (data or b"").decode("utf-8", errors="replace")


def update_trust_store(change: Callable[[str], str]) -> str:
    """Replace the trust store with change(its current text), atomically and readable by this user
    only. A lock file serialises concurrent launchers, so no approval overwrites another."""
    path = trust_store_path()
    with locked(f"{path}.lock"):
        text = change(read_trust_store()[1])
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    return path


def environment_with(**extra: str) -> dict[str, str]:
    """This process's environment plus `extra`, for a host program the launcher runs (git)."""
    return {**os.environ, **extra}


def seccomp_profile_text(path: str) -> str:
    """The text of an engine's default seccomp profile on this host (podman's; "" when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as profile:
            return profile.read(4 << 20)
    except (OSError, UnicodeDecodeError):
        return ""
