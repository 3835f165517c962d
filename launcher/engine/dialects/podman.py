"""podman's way of being asked (4.3, recorded): its own container create (POST
/libpod/containers/create, a specgen body from the plan) and network create (no gateway or DNS on
an internal network), its libpod inspect beside the compatible one, the rlimits of a container no
plan describes, and what its archive and volume APIs do otherwise. Pure but for host_ulimits (the
host's own hard limits); engine.py sends them through engineapi."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.engine.dialects.docker import EngineDialect
from launcher.errors import EngineError
from launcher.host import hostfacts
from launcher.plan.dialects import PODMAN
from launcher.plan.dialects import podman as dialect
from launcher.plan.plan import ContainerSpec, MountKind, NetworkSpec


def _podman_owners(spec: ContainerSpec) -> None:
    """podman's `U` chowns an owned tmpfs to the container's user: refuse any other owner."""
    if strangers := [m.target for m in spec.mounts if m.owned_tmpfs and spec.user != f"{m.owner[0]}:{m.owner[1]}"]:
        raise EngineError(f"podman can make a tmpfs owned only by the container's user ({spec.user}), "
                          f"not the owner the plan gives {', '.join(strangers)}")


def host_ulimits() -> tuple[tuple[str, int, int], ...]:
    """podman's rlimits within this host's, as a plan's (compiler._ulimits), for a container no
    plan describes: a tool's, the probe volume's filler."""
    return dialect.ulimits(hostfacts.hard_rlimits())


# Docker's bridge options in netavark's words; inhibit_ipv4 has none: an internal network podman's
# own create makes has no gateway at all (nothing of the host on it), which podman_network_body asks.
PODMAN_NETWORK_OPTIONS = {"com.docker.network.driver.mtu": "mtu", "com.docker.network.bridge.inhibit_ipv4": None}


def podman_network_body(spec: NetworkSpec, subnet: str = "") -> dict:
    """podman's own network create (POST /libpod/networks/create). Its compat create gives an
    internal network a gateway address on the host's bridge and aardvark-dns, which forwards the
    network's queries to the host's resolvers (aardvark-dns 1.4; containers/aardvark-dns#447): a way
    out. Here an internal network has neither; the egress network keeps podman's DNS, as Docker's."""
    options = {}
    for key, value in spec.options:
        if key not in PODMAN_NETWORK_OPTIONS or (PODMAN_NETWORK_OPTIONS[key] is None and not spec.internal):
            raise EngineError(f"podman cannot take the network option {key!r} of {spec.name}")
        if PODMAN_NETWORK_OPTIONS[key]:
            options[PODMAN_NETWORK_OPTIONS[key]] = value
    return {"name": spec.name, "driver": "bridge", "internal": spec.internal, "dns_enabled": not spec.internal,
            "labels": dict(spec.labels), "options": options, "subnets": [{"subnet": subnet}] if subnet else []}


def podman_network_subnet(spec: NetworkSpec, made: dict, subnet: str) -> str:
    """The subnet of a network podman made (its create's answer); refused when an internal one has a
    gateway (an address of the host on it) or DNS (a resolver that forwards), or not one subnet."""
    subnets = made.get("subnets") or []
    if spec.internal and (made.get("dns_enabled") or any(s.get("gateway") for s in subnets) or len(subnets) != 1):
        raise EngineError(f"creating network {spec.name}: podman made it with a gateway or DNS "
                          f"(subnets {subnets}, dns_enabled {made.get('dns_enabled')}), not as asked")
    return subnets[0]["subnet"] if subnets else subnet


def _size_bytes(text: str) -> int:
    """A json-file max-size (10m) in bytes, as podman's compat create and its CLI read it (decimal)."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1:].lower() in units else int(text)


def _security(spec: ContainerSpec) -> dict:
    """SecurityOpt in specgen's words; anything else is refused (nothing the plan says is dropped)."""
    found: dict = {}
    for option in spec.security_opt:
        key, _, value = option.partition("=")
        if option == "no-new-privileges":
            found["no_new_privileges"] = True
        elif key == "seccomp" and (value.startswith("/") or value == "unconfined"):   # a file on the server
            found["seccomp_profile_path"] = value
        else:
            raise EngineError(f"podman's libpod create cannot take the security option {option!r} "
                              f"of {spec.name} (it takes no-new-privileges and seccomp=<file on the server>)")
    return found


def _specgen_mount(m) -> dict:
    if m.kind is MountKind.TMPFS:
        return {"destination": m.target, "type": "tmpfs", "source": "tmpfs",
                "options": dialect.tmpfs_options(m).split(",")}
    return {"destination": m.target, "type": "bind", "source": m.source, "options": ["ro" if m.read_only else "rw", "rprivate", "rbind"]}


def specgen_body(spec: ContainerSpec, ulimits: tuple[tuple[str, int, int], ...] = ()) -> dict:
    """podman's own create request (POST /libpod/containers/create, its SpecGenerator) for a
    plan's container: its compat create adds a writable tmpfs at /run, /tmp and /var/tmp to every
    read-only root (--read-only-tmpfs, which 4.3 cannot switch off), its libpod create adds none.
    The same settings as create_body; inspect (compat and libpod) reads them back. `ulimits`: for a
    spec that sets none (a tool's container), else podman's rootful defaults would apply."""
    _podman_owners(spec)
    options = dict(spec.log_options)
    limits = {"pids": {"limit": spec.pids_limit} if spec.pids_limit else None,
              "memory": {"limit": spec.memory_bytes, "swap": spec.memory_bytes} if spec.memory_bytes else None,
              "cpu": {"quota": spec.nano_cpus // 10_000, "period": 100_000} if spec.nano_cpus else None}
    network = spec.network_mode or "bridge"
    body = {
        "name": spec.name, "image": spec.image, "user": spec.user, "entrypoint": list(spec.entrypoint),
        "command": list(spec.command), "env": dict(spec.env), "work_dir": spec.working_dir or None,
        "labels": dict(spec.labels), "hostname": spec.hostname, "terminal": False, "stdin": spec.stdin,
        # no passwd/group entry bound in for a user the image lacks (Docker adds none)
        "systemd": "false", "manage_password": False, "read_only_filesystem": spec.read_only_root,
        "mounts": [_specgen_mount(m) for m in spec.mounts if m.kind is not MountKind.VOLUME] or None,
        "volumes": [{"Name": m.source, "Dest": m.target, "Options": ["ro" if m.read_only else "rw"]
                     + (["nocopy"] if m.no_copy else [])} for m in spec.mounts if m.kind is MountKind.VOLUME] or None,
        "cap_drop": list(spec.cap_drop), "cap_add": list(spec.cap_add) or None, **_security(spec),
        "resource_limits": {k: v for k, v in limits.items() if v} or None,
        "log_configuration": {"driver": "json-file", **({"size": _size_bytes(options["max-size"])}
                                                         if "max-size" in options else {})},
        "oci_runtime": spec.runtime,
        "netns": {"nsmode": "none" if network == "none" else "bridge"},
        "networks": None if network in ("none", "bridge", "default") else {network: {}},
        "dns_server": list(spec.dns) or None, "hostadd": list(spec.extra_hosts) or None,
        "sysctl": dict(spec.sysctls) or None,
        "devices": [{"path": d} for d in spec.devices] or None,
        "pidns": {"nsmode": spec.pid_mode} if spec.pid_mode else None,
        "groups": list(spec.group_add) or None,
        # its type is the rlimit's short name: podman adds RLIMIT_ itself
        "r_limits": [{"type": name, "soft": soft, "hard": hard} for name, soft, hard in spec.ulimits or ulimits] or None,
    }
    return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True)
class PodmanApi(EngineDialect):
    plan: dialect.Dialect = PODMAN
    overlap_error: str = "already used on the host or by another config"
    # its archive API unpacks into the volume the request's path is in, not the one each entry's
    # path is in (a tar at / of base/... and v/... lands in the container's own root)
    archive_spans_volumes: bool = False
    chowns_volume_at_attach: bool = True     # a read-only overlay refuses it (EROFS)
    native_inspect: str = "/libpod/containers/{}/json"   # the runtime, log size, capability sets

    rootful_fix: str = "optional: rootless podman (run it as an unprivileged user) adds a layer"
    userns_off: str = ("not reported by podman's API (containers.conf `userns`); off unless set there: uid 1000 inside "
                       "is uid 1000 on the host")
    userns_fix: str = 'userns = "auto" in containers.conf (or rootless podman) maps container ids away from host ids'

    def own_info(self, engine) -> dict | None:
        return engine.info(libpod=True)   # /libpod/info: rootless, id maps, the cgroup controllers it may use

    def judged(self, identity) -> tuple[str, ...]:
        components = identity.components
        return (identity.kind, *([r for r in ("runc", "crun") if r in components] or [identity.runtime]))

    def limits_words(self, rootless: bool, told: bool) -> tuple[str, str, str]:
        # its /info says every limit holds even where it ignores them (rootless on cgroup v1)
        if rootless:
            return (" (its /info claims them; /libpod/info's cgroupControllers say otherwise)",
                    "cgroup v2 with the controllers delegated to the user (systemd Delegate=memory pids cpu), or "
                    "rootful podman or Docker", " (the controllers /libpod/info lists)" if told else "")
        return (super().limits_words(rootless, told)[:2] + (" (the controllers /libpod/info lists)" if told else "",))

    def tool_ulimits(self) -> tuple[tuple[str, int, int], ...]:
        return host_ulimits()   # its rootful defaults exceed this host's hard limits

    def create_request(self, spec: ContainerSpec) -> tuple[str, dict | None, dict]:
        # its libpod create: the compat one adds a writable /run, /tmp and /var/tmp to a read-only root
        return "/libpod/containers/create", None, specgen_body(spec, host_ulimits())

    def network_request(self, spec: NetworkSpec, subnet: str) -> tuple[str, dict]:
        return "/libpod/networks/create", podman_network_body(spec, subnet)

    def network_made(self, spec: NetworkSpec, made: dict, subnet: str) -> str | None:
        return podman_network_subnet(spec, made, subnet)


PODMAN_API = PodmanApi()
