"""The typed policy model: frozen, keyword-only dataclasses built only from validated data."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from launcher.policy.allowlist import AllowRule
from launcher.policy.surfaces import GIT_CONTROL, PROTECTED


class Access(enum.Enum):
    READ_ONLY = "read-only"
    READ_WRITE = "read-write"


class WorkspaceMode(enum.Enum):
    BIND = "bind"     # the host directory itself
    COPY = "copy"     # a copy in volumes; the host tree changes only on `sandbox apply`


class HomeMode(enum.Enum):
    TMPFS = "tmpfs"     # gone with the sandbox
    VOLUME = "volume"   # a named volume per workspace, trust key and agent profile: kept for the next run


class Runtime(enum.Enum):
    """The OCI runtime under the sandbox: runc (the host kernel, behind namespaces, seccomp and
    capabilities) or gVisor (runsc: a user-space kernel between the agent and the host kernel)."""

    RUNC = "runc"
    GVISOR = "gvisor"


class NetworkMode(enum.Enum):
    NONE = "none"
    PROXY = "proxy"


# Always protected inside a writable workspace, also when they do not exist yet: each one can make
# code run on the host later (git, CI, IDE tasks, agent config) or change this policy. The git
# directory is added per `workspace.git` (see WorkspacePolicy.protected).
BUILTIN_PROTECTED = PROTECTED


@dataclass(frozen=True, kw_only=True)
class WorkspacePolicy:
    target: str
    access: Access
    protect: tuple[str, ...]  # built-in paths first, then the policy's own additions
    git: Access = Access.READ_ONLY   # read-write: only the git files that run code stay read-only
    mode: WorkspaceMode = WorkspaceMode.BIND
    exclude: tuple[str, ...] = ()    # copy mode: patterns left out of the copy

    @property
    def protected(self) -> tuple[str, ...]:
        """Every workspace-relative path kept read-only: the git directory (or, with `git:
        read-write`, the parts of it that run code), then `protect`."""
        return ((".git",) if self.git is Access.READ_ONLY else GIT_CONTROL) + self.protect


@dataclass(frozen=True, kw_only=True)
class MountPolicy:
    source: str
    target: str
    access: Access


@dataclass(frozen=True, kw_only=True)
class TmpfsPolicy:
    target: str
    size_bytes: int
    mode: int = 0o700     # of its root, owned by the agent's uid:gid


@dataclass(frozen=True, kw_only=True)
class HomePolicy:
    """The agent's writable $HOME: the only writable place outside the workspace and the tmpfs."""

    mode: HomeMode = HomeMode.TMPFS
    target: str = "/home/agent"
    size_bytes: int = 512 * 1024 ** 2   # tmpfs mode only


@dataclass(frozen=True, kw_only=True)
class NetworkPolicy:
    mode: NetworkMode
    allow: tuple[AllowRule, ...]   # proxy mode only; empty in none mode
    allow_ip_literals: bool
    model: bool = True             # --agent with a key may reach that agent's model API (proxy-injected)


@dataclass(frozen=True, kw_only=True)
class EnvPolicy:
    pass_names: tuple[str, ...]
    set_values: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class Limits:
    pids: int
    memory_bytes: int
    cpus: float
    timeout_seconds: int     # a `run`
    session_seconds: int     # an `up` session, attached or not
    idle_seconds: int        # an `up` session with no terminal input or output


@dataclass(frozen=True, kw_only=True)
class KeyBinding:
    """A key handed to the agent as a placeholder (secrets[].bind): the proxy swaps it for the real
    value only in HTTPS requests it intercepts to `host` on `port`, under `paths`; anywhere else the
    placeholder is refused (launcher/policy/keybind.py)."""

    host: str                          # an exact name with http: rules in network.allow
    port: int = 443
    paths: tuple[str, ...] = ("/",)    # plain path prefixes, compared after normalisation
    variable: str = ""                 # the agent's variable holding the placeholder

    def __str__(self) -> str:
        port = "" if self.port == 443 else f":{self.port}"
        return f"{self.variable} -> {self.host}{port} {' '.join(self.paths)}"


@dataclass(frozen=True, kw_only=True)
class SecretPolicy:
    """A credential the proxy adds to requests for one upstream; the sandbox never holds it."""

    name: str
    env: str          # host environment variable holding the value, or ""
    file: str         # host file holding the value, or ""
    upstream: str     # scheme://host[:port] the proxy forwards the endpoint to
    header: str       # "Name: template" with {value} where the secret goes
    ca_file: str = ""  # https only: host PEM file of the CA(s) the proxy trusts for the upstream, or "" (system CAs)
    model: bool = False  # the agent's model API, added by --agent with a key: network.model governs it
    # Set by --agent for a subscription login (launcher/agents/logins.py), not in policy files:
    login: str = ""   # how the value is read at launch: "" as it is; "codex-chatgpt" a Codex auth.json (refreshed on the host)
    path: str = ""    # only requests whose path starts with this reach the upstream ("" any)
    # A key bound to its destination instead of an endpoint (then upstream is ""). repr=False: the
    # repr of a secret without one is what it always was (digests: trustlevel.effective_digest adds it).
    bind: KeyBinding | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class BuildPolicy:
    """A repository's Dockerfile that extends the agent image (paths relative to the workspace)."""

    dockerfile: str = ""   # "": no build
    context: str = "."
    devcontainer: str = ""   # instead of dockerfile: a devcontainer.json (its build.dockerfile or image)
    source: str = field(default="", compare=False, repr=False)   # the policy file that named it (for errors)


@dataclass(frozen=True, kw_only=True)
class Policy:
    name: str
    description: str
    source: str       # file it was read from
    digest: str       # sha256 of that file's bytes
    image: str
    workspace: WorkspacePolicy
    mounts: tuple[MountPolicy, ...]
    tmpfs: tuple[TmpfsPolicy, ...]
    network: NetworkPolicy
    env: EnvPolicy
    limits: Limits
    user: tuple[int, int] | None  # None: "auto", decided from the workspace owner
    capabilities: tuple[str, ...]
    command: tuple[str, ...]
    secrets: tuple[SecretPolicy, ...] = ()   # proxy mode only
    ca_certificates: tuple[str, ...] = ()    # host PEM files the sandbox's tools trust too
    home: HomePolicy = HomePolicy()
    runtime: Runtime = Runtime.RUNC
    packages: tuple[str, ...] = ()           # Debian packages built on top of the image (launcher/extend.py)
    build: BuildPolicy = BuildPolicy()       # a repository Dockerfile FROM our agent image, before the packages
