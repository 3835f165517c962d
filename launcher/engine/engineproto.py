"""What the launcher needs from a container engine, and what it gets back.

`Engine` is the one seam: `launcher.engine.engine.Engine` implements it over the Docker Engine API, and
`launcher.engine.enginefake.FakeEngine` is the same class over an in-memory transport (as httpx ships
MockTransport), for unit tests. The engine's inspect and list answers are parsed here, once, into
frozen values (`ContainerInfo`, `ContainerSummary`, `VolumeInfo`, `NetworkInfo`): no caller reads
Docker's JSON. Values the plan is compared with keep "not reported" (None) apart from empty."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

if TYPE_CHECKING:
    from launcher.engine.dialects import EngineDialect
    from launcher.plan.plan import ContainerSpec

Output = Iterator[tuple[bytes | None, bytes | None]]


class Attached(Protocol):
    """Output (engineapi.Attachment) that may also write to the container's stdin."""

    writable: bool

    def __iter__(self) -> Output: ...
    def __next__(self) -> tuple[bytes | None, bytes | None]: ...
    def write(self, data: bytes) -> None: ...


def _tuple(value) -> tuple:
    return tuple(value or ())


@dataclass(frozen=True, kw_only=True)
class MountInfo:
    """One of `docker inspect`'s Mounts (owned tmpfs are HostSettings.tmpfs instead)."""
    kind: str | None          # bind, volume, tmpfs
    target: str | None
    writable: bool
    source: str = ""          # a volume's name, a bind's host path, "" for a tmpfs

    @classmethod
    def of(cls, doc: dict) -> "MountInfo":
        kind = doc.get("Type")
        return cls(kind=kind, target=doc.get("Destination"), writable=bool(doc.get("RW")),
                   source=(doc.get("Name") if kind == "volume" else doc.get("Source")) or "")


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    """The HostConfig the engine reports for a created container, as far as the plan sets it."""
    privileged: bool | None = None
    runtime: str | None = None
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    read_only_root: bool | None = None
    security_opt: tuple[str, ...] = ()
    network_mode: str | None = None
    pid_mode: str = ""
    uts_mode: str = ""
    userns_mode: str = ""
    ipc_mode: str = ""
    devices: tuple[str, ...] = ()            # host:inside
    group_add: tuple[str, ...] = ()
    dns: tuple[str, ...] = ()
    extra_hosts: tuple[str, ...] = ()
    sysctls: dict = field(default_factory=dict)
    port_bindings: dict = field(default_factory=dict)
    publish_all: bool = False
    binds: tuple[str, ...] = ()
    pids_limit: int | None = None
    memory: int | None = None
    nano_cpus: int | None = None
    log_type: str | None = None
    log_options: dict = field(default_factory=dict)
    tmpfs: dict = field(default_factory=dict)   # target -> mount options
    ulimits: dict = field(default_factory=dict)  # rlimit's short name (nofile) -> (soft, hard)

    @classmethod
    def of(cls, host: dict) -> "HostSettings":
        log = host.get("LogConfig") or {}
        return cls(
            privileged=host.get("Privileged"), runtime=host.get("Runtime"), cap_drop=_tuple(host.get("CapDrop")),
            cap_add=_tuple(host.get("CapAdd")), read_only_root=host.get("ReadonlyRootfs"),
            security_opt=_tuple(host.get("SecurityOpt")), network_mode=host.get("NetworkMode"),
            pid_mode=host.get("PidMode") or "", uts_mode=host.get("UTSMode") or "",
            userns_mode=host.get("UsernsMode") or "", ipc_mode=host.get("IpcMode") or "",
            devices=tuple(f"{d['PathOnHost']}:{d['PathInContainer']}" for d in host.get("Devices") or []),
            group_add=_tuple(host.get("GroupAdd")), dns=_tuple(host.get("Dns")),
            extra_hosts=_tuple(host.get("ExtraHosts")), sysctls=dict(host.get("Sysctls") or {}),
            port_bindings=dict(host.get("PortBindings") or {}), publish_all=bool(host.get("PublishAllPorts")),
            binds=_tuple(host.get("Binds")), pids_limit=host.get("PidsLimit"), memory=host.get("Memory"),
            nano_cpus=host.get("NanoCpus"), log_type=log.get("Type"), log_options=dict(log.get("Config") or {}),
            tmpfs=dict(host.get("Tmpfs") or {}),
            # podman names them as its OCI spec does (RLIMIT_NOFILE), Docker as asked (nofile)
            ulimits={u["Name"].lower().removeprefix("rlimit_"): (u.get("Soft"), u.get("Hard"))
                     for u in host.get("Ulimits") or []})


@dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    """`docker inspect` of one container."""
    id: str
    name: str = ""
    image_id: str = ""                 # the image's ID (sha256:…) the container was made from
    running: bool = False
    status: str = ""                   # created, running, exited, …
    exit_code: int = 0
    labels: dict = field(default_factory=dict)
    user: str | None = None
    image: str | None = None           # the reference it was created with
    entrypoint: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    env: tuple[str, ...] = ()          # NAME=value, the image's included
    mounts: tuple[MountInfo, ...] = ()
    networks: dict = field(default_factory=dict)   # network name -> its IPv4 address there
    log_path: str = ""
    host: HostSettings = field(default_factory=HostSettings)
    # podman only, from its libpod inspect: what its compat inspect does not say (HostConfig.Runtime
    # is "oci" for every runtime there; LogConfig.Config is empty, the size limit is libpod's Size)
    podman_runtime: str | None = None
    podman_log_size: str | None = None
    # the capability sets the container's process gets (containers.conf's defaults and the plan's
    # adds and drops applied; podman 4.3 says null for none): None without a libpod inspect
    podman_bounding_caps: tuple[str, ...] | None = None
    podman_effective_caps: tuple[str, ...] | None = None

    @classmethod
    def of(cls, doc: dict, libpod: dict | None = None) -> "ContainerInfo":
        state, config = doc.get("State") or {}, doc.get("Config") or {}
        networks = (doc.get("NetworkSettings") or {}).get("Networks") or {}
        return cls(
            id=doc.get("Id", ""), name=(doc.get("Name") or "").lstrip("/"), image_id=doc.get("Image", ""),
            running=bool(state.get("Running")), status=state.get("Status", ""), exit_code=int(state.get("ExitCode") or 0),
            labels=dict(config.get("Labels") or {}), user=config.get("User"), image=config.get("Image"),
            entrypoint=_tuple(config.get("Entrypoint")), command=_tuple(config.get("Cmd")), env=_tuple(config.get("Env")),
            mounts=tuple(MountInfo.of(m) for m in doc.get("Mounts") or []),
            networks={name: (n or {}).get("IPAddress", "") for name, n in networks.items()},
            log_path=doc.get("LogPath") or "", host=HostSettings.of(doc.get("HostConfig") or {}),
            **({"podman_runtime": libpod.get("OCIRuntime"),
                "podman_log_size": ((libpod.get("HostConfig") or {}).get("LogConfig") or {}).get("Size"),
                "podman_bounding_caps": _tuple(libpod.get("BoundingCaps")),
                "podman_effective_caps": _tuple(libpod.get("EffectiveCaps"))} if libpod else {}))


@dataclass(frozen=True, kw_only=True)
class ContainerSummary:
    """One container of `docker ps -a`."""
    id: str
    name: str
    state: str = "?"                   # created, running, exited, …
    labels: dict = field(default_factory=dict)
    created: int = 0

    @classmethod
    def of(cls, doc: dict) -> "ContainerSummary":
        names = doc.get("Names") or [""]
        return cls(id=doc.get("Id", ""), name=names[0].lstrip("/"), state=doc.get("State", "?"),
                   labels=dict(doc.get("Labels") or {}), created=doc.get("Created", 0))


@dataclass(frozen=True, kw_only=True)
class VolumeInfo:
    """`docker volume inspect` of one volume."""
    name: str
    labels: dict = field(default_factory=dict)
    mountpoint: str = ""
    options: dict = field(default_factory=dict)
    created: str = ""                  # CreatedAt, as the engine writes it

    @classmethod
    def of(cls, doc: dict) -> "VolumeInfo":
        return cls(name=doc.get("Name", ""), labels=dict(doc.get("Labels") or {}), mountpoint=doc.get("Mountpoint") or "",
                   options=dict(doc.get("Options") or {}), created=doc.get("CreatedAt") or "")


@dataclass(frozen=True, kw_only=True)
class NetworkInfo:
    """One network of `docker network ls` (its containers only in `docker network inspect`'s)."""
    name: str
    id: str = ""
    labels: dict = field(default_factory=dict)
    subnets: tuple[str, ...] = ()
    driver: str = ""
    internal: bool = False
    options: dict = field(default_factory=dict)
    containers: tuple[str, ...] = ()   # ids of the containers on it

    @classmethod
    def of(cls, doc: dict) -> "NetworkInfo":
        configs = (doc.get("IPAM") or {}).get("Config") or []
        return cls(name=doc.get("Name", ""), id=doc.get("Id", ""), labels=dict(doc.get("Labels") or {}),
                   subnets=tuple(c["Subnet"] for c in configs if c.get("Subnet")), driver=doc.get("Driver") or "",
                   internal=bool(doc.get("Internal")), options=dict(doc.get("Options") or {}),
                   containers=tuple(doc.get("Containers") or ()))


class Engine(Protocol):
    """What the launcher asks of a container engine (each method's words are in launcher/engine/engine.py).
    Errors are launcher.errors' EngineError and NotFound, never the SDK's."""

    # the engine itself (version and info are its own documents, recorded as they are)
    @property
    def dialect(self) -> EngineDialect: ...   # what differs on this engine (launcher/engine/dialects/), by its kind
    def version(self) -> dict: ...
    def info(self, libpod: bool = False) -> dict: ...

    # images
    def image_exists(self, ref: str) -> bool: ...
    def image_labels(self, ref: str) -> dict | None: ...   # None: no such image
    def image_env(self, ref: str) -> list[str]: ...
    def image_digests(self, ref: str) -> dict: ...
    def pull(self, ref: str) -> None: ...
    def build(self, context: str, tag: str, labels: dict, on_line: Callable[[str], None],
              buildargs: dict[str, str] | None = None, dockerfile: str | None = None) -> None: ...
    def import_tar(self, path: str, ref: str) -> None: ...

    # volumes
    def volume_info(self, name: str) -> VolumeInfo | None: ...
    def volume_labels(self, name: str) -> dict | None: ...
    def create_volume(self, name: str, labels: dict, options: dict | None = None) -> VolumeInfo: ...
    def fill_volume(self, name: str, image: str, path: str, labels: dict) -> None: ...
    def list_volumes(self, *filters: str) -> list[VolumeInfo]: ...
    def remove_volume(self, name: str) -> None: ...

    # networks
    def create_network(self, spec, subnet: str = "") -> str | None: ...   # the subnet made; None: `subnet` overlaps
    def list_networks(self, *filters: str) -> list[NetworkInfo]: ...
    def network_info(self, name: str) -> NetworkInfo | None: ...   # `docker network inspect`; None: no such network
    def remove_network(self, name: str) -> None: ...

    # containers
    def create(self, spec: ContainerSpec) -> str: ...
    def create_proxy(self, spec, secrets: dict[str, str] | None = None,   # spec: the plan's ProxySpec
                     egress_ready: Callable[[], None] = lambda: None, address: str = "",
                     remake: Callable[[], object] | None = None) -> str: ...
    def inspect(self, ref: str) -> ContainerInfo: ...
    def list(self, *filters: str) -> list[ContainerSummary]: ...
    def start(self, ref: str) -> None: ...
    def signal(self, ref: str, name: str) -> None: ...
    def processes(self, ref: str) -> list[str]: ...
    def output(self, ref: str, stdin: bool = False) -> Attached: ...
    def wait(self, ref: str) -> int: ...
    def logs(self, ref: str, stdout: bool = True, stderr: bool = False) -> str: ...
    def run_attached(self, spec: ContainerSpec, timeout: float) -> AbstractContextManager: ...
    def pause(self, ref: str) -> None: ...
    def unpause(self, ref: str) -> None: ...
    def stop(self, ref: str, grace: int) -> None: ...
    def remove(self, ref: str) -> None: ...

    # files of a container (created is enough)
    def read_file(self, ref: str, path: str, limit: int) -> bytes | None: ...
    def put_archive(self, ref: str, path: str, chunks: Iterator[bytes]) -> None: ...
    def archive_head(self, ref: str, path: str, limit: int,
                     wanted: Callable[[dict], bool] = lambda _: True) -> bytes | None: ...
    def exists(self, ref: str, path: str) -> bool: ...

    # commands in a running container
    def exec_stream(self, ref: str, argv: list[str], user: str = "") -> tuple[str, Iterator]: ...
    def exec_socket(self, ref: str, argv: list[str], user: str) -> tuple[str, object]: ...
    def exec_tty(self, ref: str, argv: list[str], size: tuple[int, int] = (0, 0)) -> tuple[str, object]: ...
    def exec_resize(self, exec_id: str, rows: int, columns: int) -> None: ...
    def exec_running(self, exec_id: str) -> bool: ...
    def exec_exit_code(self, exec_id: str) -> int: ...
