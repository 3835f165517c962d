"""What a launch asks the engine to make, as the bodies of its API requests: Docker's container,
network and proxy create requests, and podman's libpod equivalents (specgen, its networks). Pure
but for host_ulimits (the host's own hard limits); engine.py sends them through engineapi."""

from __future__ import annotations

from launcher.plan.dialects import podman as dialect
from launcher.errors import EngineError
from launcher.host import hostfacts
from launcher.plan.plan import ContainerSpec, MountKind, NetworkSpec, ProxySpec


def log_config(options: tuple[tuple[str, str], ...]) -> dict:
    return {"Type": "json-file", "Config": dict(options)}


def _mount(m) -> dict:
    mount = {"Target": m.target, "Source": m.source, "Type": m.kind.value, "ReadOnly": m.read_only}
    if m.kind is MountKind.TMPFS:
        mount.update(Source=None, **({"TmpfsOptions": {"SizeBytes": m.size_bytes}} if m.size_bytes else {}))
    elif m.kind is MountKind.VOLUME and m.no_copy:
        mount["VolumeOptions"] = {"NoCopy": True}
    return mount


def _device(text: str) -> dict:
    host, _, rest = text.partition(":")
    inside, _, permissions = rest.partition(":")
    return {"PathOnHost": host, "PathInContainer": inside or host, "CgroupPermissions": permissions or "rwm"}


def _podman_owners(spec: ContainerSpec) -> None:
    """podman's `U` chowns an owned tmpfs to the container's user: refuse any other owner."""
    if strangers := [m.target for m in spec.mounts if m.owned_tmpfs and spec.user != f"{m.owner[0]}:{m.owner[1]}"]:
        raise EngineError(f"podman can make a tmpfs owned only by the container's user ({spec.user}), "
                          f"not the owner the plan gives {', '.join(strangers)}")


def create_body(spec: ContainerSpec) -> dict:
    """The engine's container-create request for a plan's container (unset fields left out, as the
    SDK leaves them; tests/test_engineapi.py holds it to the SDK's own). Owned tmpfs go through
    HostConfig.Tmpfs (the Mount API cannot set an owner). podman's: specgen_body."""
    host = {
        "Mounts": [_mount(m) for m in spec.mounts if not m.owned_tmpfs],
        "NetworkMode": spec.network_mode or "default", "ReadonlyRootfs": spec.read_only_root,
        "CapDrop": list(spec.cap_drop), "SecurityOpt": list(spec.security_opt), "PidsLimit": spec.pids_limit,
        "Memory": spec.memory_bytes, "MemorySwap": spec.memory_bytes, "NanoCpus": spec.nano_cpus,
        "LogConfig": log_config(spec.log_options), "Runtime": spec.runtime,
        "Tmpfs": {m.target: m.tmpfs_options for m in spec.mounts if m.owned_tmpfs} or None,
        "CapAdd": list(spec.cap_add) or None, "Devices": [_device(d) for d in spec.devices] or None,
        "PidMode": spec.pid_mode or None, "Dns": list(spec.dns) or None, "Sysctls": dict(spec.sysctls) or None,
        "GroupAdd": [str(g) for g in spec.group_add] or None, "ExtraHosts": list(spec.extra_hosts) or None,
        "Ulimits": ulimits(spec.ulimits) or None,
    }
    body = {
        "Image": spec.image, "Cmd": list(spec.command), "Entrypoint": list(spec.entrypoint), "User": spec.user,
        "Env": [f"{k}={v}" for k, v in spec.env], "WorkingDir": spec.working_dir, "Labels": dict(spec.labels),
        "Hostname": spec.hostname, "Tty": False, "OpenStdin": False, "StdinOnce": False, "AttachStdin": False,
        "AttachStdout": True, "AttachStderr": True, "NetworkDisabled": False,
        "HostConfig": {k: v for k, v in host.items() if v is not None},
    }
    return {k: v for k, v in body.items() if v is not None}


def ulimits(limits: tuple[tuple[str, int, int], ...]) -> list[dict]:
    """HostConfig.Ulimits for (name, soft, hard) rlimits."""
    return [{"Name": name, "Soft": soft, "Hard": hard} for name, soft, hard in limits]


def host_ulimits() -> tuple[tuple[str, int, int], ...]:
    """podman's rlimits within this host's, as a plan's (compiler._ulimits), for a container no
    plan describes: a tool's, the probe volume's filler."""
    return dialect.ulimits(hostfacts.hard_rlimits())


def network_body(spec: NetworkSpec, subnet: str = "") -> dict:
    """Docker's network create request (on `subnet`, else on its own choice)."""
    return {"Name": spec.name, "Driver": "bridge", "Options": dict(spec.options), "Labels": dict(spec.labels),
            "CheckDuplicate": True, **({"Internal": True} if spec.internal else {}),
            **({"IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]}} if subnet else {})}


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


def proxy_body(spec: ProxySpec, env: dict[str, str], address: str, podman: bool) -> dict:
    """The egress proxy's create request: unprivileged, read-only root, no capabilities, on the
    internal network (the egress one is joined after). `address`: its fixed one there, given on
    podman (ProxySpec.hosts_entry), where Squid, which listens at its alias's address, learns it from
    a hosts entry; elsewhere the network's DNS answers the alias."""
    endpoint = {"IPAMConfig": {"IPv4Address": address}} if address else {"Aliases": [spec.alias]}
    return {
        "Image": spec.image, "User": spec.user, "Labels": dict(spec.labels), "Env": [f"{k}={v}" for k, v in env.items()],
        "HostConfig": {
            "ReadonlyRootfs": True, "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
            "NetworkMode": spec.internal_network,
            "Tmpfs": {p: dialect.scratch_options(spec) if podman else spec.scratch_options for p in spec.scratch_dirs},
            "PidsLimit": spec.pids_limit, "Memory": spec.memory_bytes, "MemorySwap": spec.memory_bytes,
            "LogConfig": log_config(spec.log_options), **({"ExtraHosts": [f"{spec.alias}:{address}"]} if address else {}),
            **({"Ulimits": ulimits(spec.ulimits)} if spec.ulimits else {})},
        "NetworkingConfig": {"EndpointsConfig": {spec.internal_network: endpoint}},
    }


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
        "labels": dict(spec.labels), "hostname": spec.hostname, "terminal": False, "stdin": False,
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
