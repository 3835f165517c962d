"""The compiled LaunchPlan: what to create, and what the probe must observe inside it."""

from __future__ import annotations

import enum
import hashlib
import ipaddress
from dataclasses import asdict, dataclass, field, replace

from launcher.host.imagebuild import ImageBuild
from launcher.policy.inject import CA_VAR
from launcher.policy.model import KeyBinding

# The egress proxy: its name on the sandbox's network and its port; the name the probe expects it to refuse.
PROXY_ALIAS = "sandbox-proxy"
PROXY_PORT = 3128
# A name that no allow-list may contain (.invalid is reserved): the probe expects a 403 for it.
PROBE_DENIED_HOST = "denied.sandbox-probe.invalid"


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    name: str
    internal: bool
    options: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    shared: bool = False   # SHARED_EGRESS: made if missing, kept (plan/networks.py)


@dataclass(frozen=True, kw_only=True)
class SecretEndpoint:
    """One injected secret as the proxy serves it. Where the value comes from, never the value."""

    name: str
    var: str                  # the proxy's variable carrying the value at launch (SANDBOX_SECRET_<i>)
    from_env: str             # host variable, or ""
    from_file: str            # host file, or ""
    port: int                 # the proxy's plain-HTTP endpoint port for the sandbox
    scheme: str               # towards the upstream: https (TLS, system CAs or ca_pem) or http
    host: str
    upstream_port: int
    header: str               # header name
    template: str             # header value with {value}
    ca_file: str = ""         # host file the CA bundle was read from, or "" (the proxy's system CAs)
    ca_pem: str = ""          # its certificates (public data): the only CAs the proxy trusts for this upstream
    login: str = ""           # SecretPolicy.login: how the value is read at launch ("" as it is)
    path: str = ""            # only paths under this reach the upstream ("" any)
    extra: tuple[tuple[str, str], ...] = ()   # a login's further headers: (name, proxy variable)
    # A key bound to its destination (secrets[].bind): no endpoint (port 0); the sandbox holds
    # `placeholder` in bind.variable, the proxy swaps it in `header` for requests to host:upstream_port.
    bind: KeyBinding | None = None
    placeholder: str = ""


@dataclass(frozen=True, kw_only=True)
class EgressRule:
    """One allow rule as the proxy enforces it (the run report and the attestation record carry them):
    a tunnel checks host and port only; an intercepted host's requests are judged by method and path."""

    host: str                              # as written: a name, or *.suffix
    ports: tuple[int, ...]
    private: bool = False
    methods: tuple[str, ...] | None = None   # None: any (a tunnel: nothing is decrypted)
    paths: tuple[str, ...] | None = None
    mode: str = "enforce"                  # audit: let through, "would refuse" logged
    enforcer: str = "proxy (tunnel)"       # or "proxy (intercepted)"


@dataclass(frozen=True, kw_only=True)
class ProxySpec:
    name: str
    image: str
    config: str
    internal_network: str
    egress_network: str
    alias: str
    port: int
    labels: tuple[tuple[str, str], ...]
    user: str = "13:13"          # Debian's proxy user; never root
    pids_limit: int = 128
    memory_bytes: int = 256 * 1024 ** 2   # compiler.PROXY_MEMORY, KEYS_PROXY_MEMORY with bound keys
    # The root filesystem is read-only; Squid writes only to these small tmpfs directories.
    scratch_dirs: tuple[str, ...] = ("/run/squid", "/var/spool/squid", "/var/log/squid")
    scratch_options: str = "uid=13,gid=13,mode=0700,size=16m"
    secrets: tuple[SecretEndpoint, ...] = ()
    # An engine whose internal network has no DNS server (a dialect's proxy_by_hosts_entry: its
    # resolver would forward queries to the host's): the proxy gets a fixed address on it and the
    # sandbox an /etc/hosts entry for `alias` (pinned_proxy, at launch, once the subnet is known).
    hosts_entry: bool = False
    # Its output is the egress audit: bounded (about a million requests), never unbounded.
    log_options: tuple[tuple[str, str], ...] = (("max-size", "50m"), ("max-file", "4"))
    ulimits: tuple[tuple[str, int, int], ...] = ()   # as ContainerSpec.ulimits (an engine dialect's ulimits)
    # Rules per request (network.allow[].http; empty: none): the rule helper's file, the hosts the
    # proxy's CA may sign for, the rules' CA bundles (SANDBOX_CA_<i> after the secrets'), and the host
    # files the sandbox trusts the proxy's CA from (filled at start: launcher/egress/bump.py).
    http_rules: str = ""
    bump_names: tuple[str, ...] = ()
    rules: tuple[EgressRule, ...] = ()   # every allow rule, as enforced (what the report and the record say)
    rule_ca_pems: tuple[str, ...] = ()
    ca_files: tuple[str, str] = ("", "")
    # Keys bound to their destination: the helper's file (images/proxy/sandbox-keys), "" none.
    keys: str = ""


def proxy_address(subnet: str) -> str:
    """The proxy's fixed address on an internal network (a hosts_entry plan): the subnet's second
    host; the sandbox takes any other (such an engine's create gives that network no gateway)."""
    return str(ipaddress.IPv4Network(subnet)[2])


def pinned_proxy(plan: "LaunchPlan", subnet: str) -> tuple["LaunchPlan", str]:
    """A hosts_entry plan with the proxy's address on the internal network of `subnet` pinned: the
    sandbox's /etc/hosts entry for the proxy's name (compared in the inspect like the rest), ahead of
    any the plan had, and the address for the proxy's create. Any other plan as it is, and no address."""
    if not (plan.proxy and plan.proxy.hosts_entry):
        return plan, ""
    address = proxy_address(subnet)
    container = replace(plan.container, extra_hosts=(f"{plan.proxy.alias}:{address}",) + plan.container.extra_hosts)
    return replace(plan, container=container), address


def proxy_env(spec: ProxySpec) -> dict[str, str]:
    """The proxy container's environment but the secrets' values: its configuration and the CA
    bundles, base64 (the start script writes them to its tmpfs)."""
    import base64

    env = {"SANDBOX_SQUID_CONF": base64.b64encode(spec.config.encode()).decode()}
    env.update({f"{CA_VAR}{i}": base64.b64encode(s.ca_pem.encode()).decode() for i, s in enumerate(spec.secrets) if s.ca_pem})
    env.update({f"{CA_VAR}{len(spec.secrets) + i}": base64.b64encode(pem.encode()).decode()
                for i, pem in enumerate(spec.rule_ca_pems)})
    if spec.keys:
        env["SANDBOX_KEYS"] = base64.b64encode(spec.keys.encode()).decode()
    if spec.http_rules:
        env["SANDBOX_HTTP_RULES"] = base64.b64encode(spec.http_rules.encode()).decode()
        env["SANDBOX_BUMP_NAMES"] = " ".join(spec.bump_names)
    return env


class MountKind(enum.Enum):
    BIND = "bind"
    TMPFS = "tmpfs"
    VOLUME = "volume"


@dataclass(frozen=True, kw_only=True)
class Mount:
    kind: MountKind
    target: str
    read_only: bool
    source: str = ""            # host real path (bind) or volume name; empty for tmpfs
    size_bytes: int | None = None
    # A writable tmpfs owned by the agent: its root's uid:gid and octal mode. Docker's Mount API
    # cannot set an owner, so these go through HostConfig.Tmpfs (`--tmpfs PATH:OPTIONS`) instead.
    owner: tuple[int, int] | None = None
    mode: int = 0o700
    no_copy: bool = False       # volume: never fill it with the image's files there (a home volume)

    @property
    def owned_tmpfs(self) -> bool:
        return self.kind is MountKind.TMPFS and self.owner is not None

    @property
    def tmpfs_options(self) -> str:
        """HostConfig.Tmpfs's option string of an owned tmpfs."""
        size = f",size={self.size_bytes}" if self.size_bytes else ""
        return f"{'ro' if self.read_only else 'rw'}{size},uid={self.owner[0]},gid={self.owner[1]},mode={self.mode:04o}"


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """Container create settings. Nothing here can express privileged mode or host namespaces."""

    name: str
    image: str
    user: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    working_dir: str
    mounts: tuple[Mount, ...]
    network_mode: str
    read_only_root: bool
    cap_drop: tuple[str, ...]
    cap_add: tuple[str, ...]
    security_opt: tuple[str, ...]
    pids_limit: int | None
    memory_bytes: int | None
    nano_cpus: int | None
    labels: tuple[tuple[str, str], ...]
    hostname: str
    dns: tuple[str, ...] = ()       # upstream servers of the engine's resolver (or resolv.conf's)
    # /etc/hosts entries NAME:ADDRESS (HostConfig.ExtraHosts): a hosts_entry proxy's name on its
    # internal network, which has no DNS server there (launcher.egress.proxy pins it at launch)
    extra_hosts: tuple[str, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()   # the sandbox's own network namespace's (HostConfig.Sysctls)
    ulimits: tuple[tuple[str, int, int], ...] = ()   # (name, soft, hard), HostConfig.Ulimits; () the engine's own
    runtime: str = "runc"           # the engine's name of the OCI runtime (HostConfig.Runtime), always explicit
    # The engine's copy of the output (json-file, rotated): the launcher streams it anyway, so a
    # small one bounds what an agent printing forever can leave on the host's disk.
    log_options: tuple[tuple[str, str], ...] = (("max-size", "10m"), ("max-file", "2"))
    # Open for the launcher's word (the probe's gate reads it; the agent gets /dev/null): a launch's
    # plan only, never files another tool starts (unwatched)
    stdin: bool = False
    # Always empty from the compiler; the tamper tests set them to prove the probe notices.
    devices: tuple[str, ...] = ()
    pid_mode: str = ""
    group_add: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ProbeExpectations:
    """What the probe must observe; rendered as key=value arguments (see images/probe/CONTRACT.md)."""

    uid: int
    gid: int
    capbnd: str
    nnp: int
    seccomp: int
    rofs: tuple[str, ...]
    writable: tuple[str, ...]
    mounts: tuple[str, ...]
    protected: tuple[str, ...]
    workspace: str
    wsroot: str
    net: str
    pids: str
    mem: str
    kernel: str = "host"    # host (runc) or gvisor: the kernel the probe must find itself on
    userns: str = "-"       # "remapped": no id inside is root outside (rootless or userns-remap engines)
    wsupper: str = "-"      # copy mode: the end of the overlay's upper path (wsroot: of its lower path)
    home: str = "-"         # the agent's home mount point
    homesrc: str = "-"      # "tmpfs", or the end of the home volume's path (/NAME/_data)
    proxy: str = "-"        # host:port of the egress proxy, proxy mode only
    denyhost: str = "-"     # a name the proxy must refuse with 403
    dnsname: str = "-"      # an allowed name that must NOT resolve inside the sandbox
    resolver: str = "-"     # proxy mode: the one nameserver resolv.conf may list (a loopback address)
    # A launch's own: seconds the probe waits, after its checks passed, for the launcher's word
    # ("go" on its stdin) before it starts the agent; "-" for files another tool runs (no launcher
    # watches).
    gate: str = "-"
    # Rules per request only (launcher/probehttp.py, images/probe/CONTRACT.md; "-" or () otherwise)
    bump: str = "-"
    bumphello: str = "-"
    bumpca: str = "-"
    refuse: tuple[str, ...] = ()
    tunnel: str = "-"
    tunnelhello: str = "-"
    # Keys bound to their destination: NAME=PLACEHOLDER pairs, the only secret-shaped names
    # env.secrets lets in, each with exactly that value (launcher/policy/keybind.py)
    keyvars: tuple[str, ...] = ()
    keyrefuse: str = ""   # HEADER@HOST:PORT/PATH: where the first key's placeholder must get 403 ("" none)
    keyhidden: str = ""   # METHOD@HOST:PORT/PATH: its placeholder in a header only the key ICAP service sees
    # The launcher's one lists, so that the probe never keeps a copy of its own:
    checks: tuple[str, ...] = ()          # launcher/plan/checks.py, for this mode, in report order
    secretnames: tuple[str, ...] = ()     # launcher/policy/secrets.py, as caseless globs
    secretvalues: tuple[str, ...] = ()
    runtimenames: tuple[str, ...] = ()
    runtimesockets: tuple[str, ...] = ()  # launcher/host/paths.py
    credpaths: tuple[str, ...] = ()
    # Checks that cannot observe what they prove here (launcher/plan/checks.py NOT_APPLICABLE: gVisor
    # hides it, a Pod has no such limit): the probe reports them n/a, the launcher accepts that
    # only for these, and the proof (if any) is outside: docker inspect, or the loss report.
    na: tuple[str, ...] = ()
    # The Pod modes only (net=pod|podproxy, the Kubernetes target): ADDRESS:PORT the Pod must not
    # reach; never an argument in Docker's modes, where the probe refuses it.
    forbidden: tuple[str, ...] = ()

    def to_args(self) -> tuple[str, ...]:
        args = []
        for key, value in asdict(self).items():
            if (key == "forbidden" and self.net in ("none", "proxy")) or (key in ("keyvars", "keyrefuse", "keyhidden") and not value):
                continue   # keyvars: only with keys bound to their destination (the probe takes it as optional)
            if isinstance(value, tuple):
                value = ",".join(escape_path(v) for v in value)
            elif key in ("workspace", "wsroot", "wsupper", "home", "homesrc"):
                value = escape_path(value)
            args.append(f"{key}={value}")
        return tuple(args)


@dataclass(frozen=True, kw_only=True)
class CopySpec:
    """Copy mode: the workspace the agent sees is an overlay of two volumes, the copy of the host
    tree (lower, never written after the copy) and the agent's changes (upper, with checkpoints
    beside it). The host tree is read once, to make the copy, and written only by `sandbox apply`."""

    name: str                       # the copy's name (the sandbox's): volumes NAME-base, -upper, -tree
    source: str                     # host real path of the workspace
    uid: int                        # owner of every file in the copy (the agent)
    gid: int
    exclude: tuple[str, ...]        # GNU tar --exclude patterns
    protected: tuple[str, ...]      # workspace-relative paths `sandbox apply` never carries back
    labels: tuple[tuple[str, str], ...]
    trust: str = ""                 # trustlevel.key of the policy: a copy is reused only under the same

    @property
    def base_volume(self) -> str:
        return f"{self.name}-base"

    @property
    def upper_volume(self) -> str:
        return f"{self.name}-upper"

    @property
    def tree_volume(self) -> str:
        return f"{self.name}-tree"


HOME_PROFILE = "default"     # until agent profiles name their own


def home_volume_name(workspace_real: str, trust: str, profile: str = HOME_PROFILE) -> str:
    """The home volume of one workspace, trust key (trustlevel.key) and agent profile: never shared
    across workspaces, nor between sandboxes of different reach."""
    return f"sandbox-home-{hashlib.sha256(workspace_real.encode()).hexdigest()[:16]}-{trust}-{profile}"


CACHE_PROFILE = "downloads"     # the download cache's "profile": a home-kind volume of its own
CACHE_DIR = "/var/cache/sandbox-downloads"   # where it is mounted (pip, npm, uv below it)


def cache_volume_name(workspace_real: str, trust: str) -> str:
    """The download cache of one workspace and trust key: kept like a home volume (listed, purged with
    them), never shared across workspaces nor between sandboxes of different reach."""
    return home_volume_name(workspace_real, trust, CACHE_PROFILE).replace("sandbox-home-", "sandbox-cache-", 1)


@dataclass(frozen=True, kw_only=True)
class HomeSpec:
    """home.mode volume: the volume the launcher creates (or reuses) and hands to the agent's
    uid:gid, mode 0700, before the sandbox starts."""

    volume: str
    workspace: str                  # host real path: the volume's label, checked on reuse
    profile: str
    trust: str                      # trustlevel.key of the policy: the volume's label, checked on reuse
    uid: int
    gid: int
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    """Everything to create, in order: networks, the proxy, then the sandbox container."""

    policy_name: str
    policy_digest: str
    container: ContainerSpec
    probe: ProbeExpectations
    agent_command: tuple[str, ...]
    timeout_seconds: int     # a run's limits.timeout; up and a dev container: limits.session
    idle_seconds: int = 0    # up and a dev container: limits.idle
    # Host paths Docker creates as mount points for protected paths that did not exist; the
    # launcher removes them (when still empty) together with the container.
    placeholders: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    networks: tuple[NetworkSpec, ...] = field(default=())   # created by the launcher, proxy mode only
    proxy: ProxySpec | None = None
    copy: CopySpec | None = None        # copy mode: made (or reused) before the container
    home: HomeSpec | None = None        # home.mode volume: made (or reused) before the container
    cache: HomeSpec | None = None       # read-only registries: the download cache volume, likewise
    image_build: ImageBuild | None = None   # packages: / build: the container's image, built before it


PROBE_DIR = "/.sandbox/probe"
PROBE_BUSYBOX = f"{PROBE_DIR}/busybox"
PROBE_SCRIPT = f"{PROBE_DIR}/probe.sh"
PROBE_END = "PROBE-END"
PROBE_ASK = "PROBE-ASK\tproxy"   # the probe asks for the launcher's word that its proxy is ready (a line on its stdin)
PROBE_GATE = 60          # seconds the probe waits for the launcher's word (it normally comes in ms)


def unwatched(plan: LaunchPlan) -> LaunchPlan:
    """The plan as files another tool starts (compose, a dev container, a Pod, `docker run`): no
    launcher is there to give the word, so the probe's own verdict starts the agent (gate=-)."""
    if plan.probe.gate == "-":
        return plan
    args = plan.container.command
    cut = args.index("--")
    command = tuple("gate=-" if a.startswith("gate=") else a for a in args[:cut]) + args[cut:]
    return replace(plan, probe=replace(plan.probe, gate="-"),
                   container=replace(plan.container, command=command, stdin=False))


def escape_path(path: str) -> str:
    """Escape like /proc/self/mountinfo does, plus the comma that separates list items."""
    out = []
    for char in path:
        if char in " \t\n\\,":
            out.append("\\%03o" % ord(char))
        else:
            out.append(char)
    return "".join(out)
