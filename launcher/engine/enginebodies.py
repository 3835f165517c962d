"""What a launch asks the engine to make, as the bodies of its API requests: Docker's container,
network and proxy create requests (podman's own: launcher/engine/dialects/podman.py). Pure;
engine.py sends them through engineapi."""

from __future__ import annotations

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
        "Hostname": spec.hostname, "Tty": False, "OpenStdin": spec.stdin, "StdinOnce": spec.stdin, "AttachStdin": spec.stdin,
        "AttachStdout": True, "AttachStderr": True, "NetworkDisabled": False,
        "HostConfig": {k: v for k, v in host.items() if v is not None},
    }
    return {k: v for k, v in body.items() if v is not None}


def ulimits(limits: tuple[tuple[str, int, int], ...]) -> list[dict]:
    """HostConfig.Ulimits for (name, soft, hard) rlimits."""
    return [{"Name": name, "Soft": soft, "Hard": hard} for name, soft, hard in limits]


def network_body(spec: NetworkSpec, subnet: str = "") -> dict:
    """Docker's network create request (on `subnet`, else on its own choice)."""
    return {"Name": spec.name, "Driver": "bridge", "Options": dict(spec.options), "Labels": dict(spec.labels),
            "CheckDuplicate": True, **({"Internal": True} if spec.internal else {}),
            **({"IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]}} if subnet else {})}


def proxy_body(spec: ProxySpec, env: dict[str, str], address: str, scratch: str) -> dict:
    """The egress proxy's create request: unprivileged, read-only root, no capabilities, on the
    internal network (the egress one is joined after). `address`: its fixed one there, given on
    podman (ProxySpec.hosts_entry), where Squid, which listens at its alias's address, learns it from
    a hosts entry; elsewhere the network's DNS answers the alias. `scratch`: the options of its
    scratch tmpfs in the engine's words (its dialect's scratch_options)."""
    endpoint = {"IPAMConfig": {"IPv4Address": address}} if address else {"Aliases": [spec.alias]}
    return {
        "Image": spec.image, "User": spec.user, "Labels": dict(spec.labels), "Env": [f"{k}={v}" for k, v in env.items()],
        "HostConfig": {
            "ReadonlyRootfs": True, "CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"],
            "NetworkMode": spec.internal_network,
            "Tmpfs": {p: scratch for p in spec.scratch_dirs},
            "PidsLimit": spec.pids_limit, "Memory": spec.memory_bytes, "MemorySwap": spec.memory_bytes,
            "LogConfig": log_config(spec.log_options), **({"ExtraHosts": [f"{spec.alias}:{address}"]} if address else {}),
            **({"Ulimits": ulimits(spec.ulimits)} if spec.ulimits else {})},
        "NetworkingConfig": {"EndpointsConfig": {spec.internal_network: endpoint}},
    }
