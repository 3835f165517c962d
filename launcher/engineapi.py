"""The Docker Engine API over HTTP, for engine.py only. Two transports with one interface: `Unix`
speaks HTTP/1.1 on the engine's unix socket with the standard library (a launch no longer imports
the SDK, whose `requests` and `urllib3` cost ~0.25 s per run); `Sdk` sends the same requests through
the docker SDK, for what `Unix` does not speak (tcp://, ssh://, TLS)."""

from __future__ import annotations

import json
import socket
from typing import Iterator
from urllib.parse import quote, urlencode

from launcher.errors import EngineError, NotFound
from launcher import hostfacts
from launcher.execsocket import ExecSocket
from launcher.plan import ContainerSpec, MountKind, NetworkSpec, ProxySpec, podman_ulimits

Body = bytes | Iterator[bytes] | None


class Answer:
    """One response: its status, headers and body (read whole, or as it comes)."""

    def __init__(self, status: int, headers: dict[str, str], stream: Iterator[bytes], *conns):
        self.status, self.headers, self._stream, self.connections = status, headers, _closing(stream, *conns), conns

    def chunks(self) -> Iterator[bytes]:
        return self._stream

    def read(self) -> bytes:
        return b"".join(self._stream)

    def close(self) -> None:
        """Drop what is left of the body, and the connection (also when none of it was read)."""
        self._stream.close()
        for conn in self.connections:
            conn.close()

    def json(self):
        data = self.read()
        return json.loads(data) if data else None


def params_of(params: dict | None) -> str:
    """A query string: booleans as 1/0, lists and dicts as JSON (the engine's `filters`)."""
    if not params:
        return ""
    flat = {k: (int(v) if isinstance(v, bool) else json.dumps(v) if isinstance(v, (dict, list)) else v)
            for k, v in params.items() if v is not None}
    return "?" + urlencode(flat)


def path_of(template: str, *args: str) -> str:
    """`template` with its {} filled in, quoted as the SDK quotes them (an image's / and : kept)."""
    return template.format(*(quote(a, safe="/:") for a in args))


def failed(action: str, answer: Answer) -> EngineError:
    """The engine's own message, mapped: 404 is NotFound, anything else an EngineError."""
    try:
        message = (answer.json() or {}).get("message", "")
    except (ValueError, AttributeError):
        message = ""
    text = f"{action}: {message or f'HTTP {answer.status}'}"
    # podman answers 500 "… does not exist in database: no such container" for one removed meanwhile
    return NotFound(text) if answer.status == 404 or message.endswith("no such container") else EngineError(text)


# podman's own API (/libpod/…) is versioned by podman's releases, not Docker's: the bodies here are
# its 4.0 forms (a network create under a Docker API version gets the CNI-era answer, or a refusal).
LIBPOD_API = "4.0.0"


def versioned(path: str, version: str) -> str:
    """`path` under the API version it speaks: podman's own for /libpod/, else the engine's (if known)."""
    if path.startswith("/libpod/"):
        return f"/v{LIBPOD_API}{path}"
    return f"/v{version}{path}" if version else path


class Unix:
    """HTTP/1.1 on a unix socket, one connection per request: nothing shared between the
    launcher's threads, and a connect costs microseconds."""

    def __init__(self, path: str, timeout: float = 300):
        self.path, self.timeout, self.version = path, timeout, ""

    def call(self, method: str, path: str, params: dict | None = None, body=None, *, raw: Body = None,
             timeout: float | None = -1, upgrade: bool = False) -> Answer:
        """Send one request (`body` as JSON, or `raw` bytes or chunks as a tar) and read the answer's
        head; its body is read as asked, and the connection closes when it ends (or at close()).
        `timeout` None waits for ever (a wait, an attach)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout if timeout == -1 else timeout)
            sock.connect(self.path)
            head = [f"{method} {versioned(path, self.version)}{params_of(params)} HTTP/1.1", "Host: docker", "User-Agent: sandbox"]
            head += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
            if body is not None:
                raw = json.dumps(body).encode()
                head.append("Content-Type: application/json")
            elif raw is not None:
                head.append("Content-Type: application/x-tar")
            if isinstance(raw, bytes):
                sock.sendall("\r\n".join(head + [f"Content-Length: {len(raw)}"]).encode() + b"\r\n\r\n" + raw)
            elif raw is None:
                sock.sendall("\r\n".join(head + ["Content-Length: 0"] * (method == "POST")).encode() + b"\r\n\r\n")
            else:
                sock.sendall("\r\n".join(head + ["Transfer-Encoding: chunked"]).encode() + b"\r\n\r\n")
                for chunk in raw:
                    if chunk:
                        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sock.sendall(b"0\r\n\r\n")
            reader = sock.makefile("rb")
            status_line = reader.readline(65536).decode("latin-1")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise EngineError(f"the engine at {self.path} answered {status_line.strip()!r}, not HTTP")
            headers = {}
            while (line := reader.readline(65536)) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
        except BaseException:
            sock.close()
            raise
        status = int(parts[1])
        return Answer(status, headers, _body(reader, headers, method, status), reader, sock)

    def attach(self, ref: str) -> Iterator[tuple[bytes | None, bytes | None]]:
        answer = self.call("POST", path_of("/containers/{}/attach", ref), upgrade=True, timeout=None,
                           params={"logs": True, "stream": True, "stdout": True, "stderr": True})
        if answer.status not in (101, 200):
            raise failed(f"attaching to {ref}", answer)
        return frames(answer.chunks())

    def exec_tty(self, exec_id: str) -> ExecSocket:
        """Start the exec `exec_id` (made with a terminal) on a hijacked connection; what came with
        the answer's head stays in the reader that read it (the shell's first prompt)."""
        answer = self.call("POST", path_of("/exec/{}/start", exec_id), body={"Detach": False, "Tty": True},
                           upgrade=True, timeout=None)
        if answer.status not in (101, 200):
            raise failed(f"starting exec {exec_id}", answer)
        reader, sock = answer.connections
        return ExecSocket(sock, reader)


class Sdk:
    """The same requests through the docker SDK's session (its transports: tcp, ssh, TLS)."""

    def __init__(self, client):
        self.client, self.api = client, client.api
        self.version = self.api.api_version

    def call(self, method: str, path: str, params: dict | None = None, body=None, *, raw: Body = None,
             timeout: float | None = -1, upgrade: bool = False) -> Answer:
        api = self.api
        answer = api.request(method, f"{api.base_url}{versioned(path, self.version)}{params_of(params)}", json=body,
                             data=raw, stream=True, timeout=api.timeout if timeout == -1 else timeout)
        headers = {name.lower(): value for name, value in answer.headers.items()}
        return Answer(answer.status_code, headers, answer.iter_content(1 << 16), answer)

    def attach(self, ref: str) -> Iterator[tuple[bytes | None, bytes | None]]:
        return self.api.attach(ref, stdout=True, stderr=True, stream=True, logs=True, demux=True)

    def exec_tty(self, exec_id: str) -> ExecSocket:
        # The SDK's socket: output that came with the answer's head is lost (the shell draws its
        # prompt again at the first key).
        return ExecSocket(self.api.exec_start(exec_id, tty=True, socket=True))


def _closing(chunks: Iterator[bytes], *conns) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:
        for conn in conns:
            conn.close()


def _body(reader, headers: dict[str, str], method: str, status: int) -> Iterator[bytes]:
    if method == "HEAD" or status in (204, 304):
        return
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while size := int(reader.readline(1024).split(b";")[0].strip() or b"0", 16):
            yield reader.read(size)
            reader.readline(1024)
        return
    if "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0 and (chunk := reader.read(min(left, 1 << 16))):
            left -= len(chunk)
            yield chunk
        return
    while chunk := reader.read1(1 << 16):   # to the end: a hijacked stream, or Connection: close
        yield chunk


class Frames:
    """The engine's multiplexed stream, parsed: feed bytes, take (stream, payload) pairs (1 stdout,
    2 stderr; 8-byte header: stream, three zeros, big-endian length)."""

    def __init__(self):
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer, at, found = self.buffer + data, 0, []
        # an offset, not a cut per frame: many small frames in one chunk stay linear
        while len(buffer) - at >= 8:
            size = int.from_bytes(buffer[at + 4:at + 8], "big")
            if len(buffer) - at < 8 + size:
                break
            found.append((buffer[at], buffer[at + 8:at + 8 + size]))
            at += 8 + size
        self.buffer = buffer[at:]
        return found


def frames(stream: Iterator[bytes]) -> Iterator[tuple[bytes | None, bytes | None]]:
    """An attached container's output as (stdout, stderr) pairs, one per frame."""
    parser = Frames()
    for chunk in stream:
        for kind, data in parser.feed(chunk):
            yield (data, None) if kind != 2 else (None, data)


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
    return podman_ulimits(hostfacts.hard_rlimits())


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
            "Tmpfs": {p: spec.podman_scratch_options() if podman else spec.scratch_options for p in spec.scratch_dirs},
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
                "options": m.podman_tmpfs_options().split(",")}
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
