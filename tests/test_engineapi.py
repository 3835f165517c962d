"""The launcher's own Engine API requests: the container-create body is the SDK's, field for field
(the SDK made it before; the probe and the inspect comparison rely on every field), and the HTTP
framing reads what an engine sends (chunks, lengths, multiplexed frames)."""

from __future__ import annotations

import dataclasses
import socket
import threading

import pytest

from conftest import fake_facts, untrusted_bind
from launcher.engine import engineapi
from launcher.engine.engine import Engine
from launcher.engine.enginebodies import create_body
from launcher.errors import EngineError, NotFound
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import Mount, MountKind

PLAN = compile_policy(untrusted_bind(), fake_facts())


def sdk_body(spec) -> dict:
    """What `client.containers.create` posted for `spec` (the call engine.py made before)."""
    import docker
    import docker.types

    client = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41")
    sent = {}

    def post_json(url, data, params=None):
        sent.update({k: v for k, v in data.items() if v is not None})
        return None

    client.api._post_json = post_json
    client.api._result = lambda *a, **k: {"Id": "x"}
    client.api.inspect_container = lambda ref: {"Id": ref}
    mounts, tmpfs = [], {}
    for m in spec.mounts:
        if m.owned_tmpfs:
            tmpfs[m.target] = m.tmpfs_options
        elif m.kind is MountKind.TMPFS:
            mounts.append(docker.types.Mount(m.target, None, type="tmpfs", read_only=m.read_only, tmpfs_size=m.size_bytes))
        else:
            mounts.append(docker.types.Mount(m.target, m.source, type=m.kind.value, read_only=m.read_only,
                                             no_copy=m.no_copy))
    client.containers.create(
        spec.image, name=spec.name, command=list(spec.command), entrypoint=list(spec.entrypoint),
        user=spec.user, environment=[f"{k}={v}" for k, v in spec.env], working_dir=spec.working_dir,
        labels=dict(spec.labels), hostname=spec.hostname, mounts=mounts, tmpfs=tmpfs or None,
        network_mode=spec.network_mode, read_only=spec.read_only_root, cap_drop=list(spec.cap_drop),
        cap_add=list(spec.cap_add) or None, security_opt=list(spec.security_opt), pids_limit=spec.pids_limit,
        mem_limit=spec.memory_bytes, memswap_limit=spec.memory_bytes, nano_cpus=spec.nano_cpus,
        devices=list(spec.devices) or None, pid_mode=spec.pid_mode or None, dns=list(spec.dns) or None,
        group_add=list(spec.group_add) or None, sysctls=dict(spec.sysctls) or None,
        ulimits=[docker.types.Ulimit(name=n, soft=s, hard=h) for n, s, h in spec.ulimits] or None,
        log_config=docker.types.LogConfig(type="json-file", config=dict(spec.log_options)),
        runtime=spec.runtime, stdin_open=spec.stdin, tty=False)
    return sent


VARIANTS = {
    "untrusted bind": {},
    "tamper fields": {"devices": ("/dev/fuse", "/dev/sda:/dev/xda:r"), "pid_mode": "host", "group_add": ("0",),
                      "cap_add": ("SYS_ADMIN",), "dns": ("10.0.0.2",), "runtime": "runsc",
                      "sysctls": (("net.ipv4.neigh.eth0.mcast_solicit", "2"),),
                      "ulimits": (("nofile", 1024, 4096), ("nproc", 512, 512))},
    "stdin open for the word": {"stdin": True}, "no stdin (files another tool starts)": {"stdin": False},
    "volumes and limits": {"mounts": (Mount(kind=MountKind.VOLUME, target="/home/agent", read_only=False,
                                            source="home", no_copy=True),
                                      Mount(kind=MountKind.VOLUME, target="/x", read_only=True, source="v"),
                                      Mount(kind=MountKind.TMPFS, target="/t", read_only=True)),
                           "pids_limit": None, "memory_bytes": None, "nano_cpus": None, "network_mode": ""},
}


@pytest.mark.parametrize("change", VARIANTS.values(), ids=VARIANTS.keys())
def test_create_body_is_the_sdks(change):
    spec = dataclasses.replace(PLAN.container, **change)
    assert create_body(spec) == sdk_body(spec)


class OneAnswer:
    """A unix socket that answers each connection with `reply` and keeps what it was sent."""

    def __init__(self, tmp_path, reply: bytes):
        self.path, self.reply, self.got = str(tmp_path / "engine.sock"), reply, []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(self.path)
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            conn, _ = self.server.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            if b"chunked" in head:
                while not rest.endswith(b"0\r\n\r\n"):
                    rest += conn.recv(65536)
            self.got.append(head + b"\r\n\r\n" + rest)
            conn.sendall(self.reply)
            conn.close()


def engine_answering(tmp_path, reply: bytes) -> tuple[Engine, OneAnswer]:
    server = OneAnswer(tmp_path, reply)
    http = engineapi.Unix(server.path)
    http.version = "1.41"
    return Engine(http, {"ApiVersion": "1.41"}), server


def test_chunked_json_is_read_whole(tmp_path):
    body = b'[{"Id":"a","Labels":{"dev.sandbox.managed":"1","dev.sandbox.kind":"up"}}]'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 6]), body[i:i + 6]) for i in range(0, len(body), 6))
    engine, server = engine_answering(tmp_path, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                + chunks + b"0\r\n\r\n")
    assert [c.id for c in engine.list("dev.sandbox.kind=up")] == ["a"]
    request = server.got[0].decode()
    assert request.startswith("GET /v1.41/containers/json?all=1&filters=%7B%22label%22") and "Connection: close" in request


def test_an_engine_error_keeps_its_message(tmp_path):
    engine, _ = engine_answering(tmp_path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 27\r\n\r\n"
                                           b'{"message":"no such thing"}')
    with pytest.raises(NotFound, match="inspecting container abc: no such thing"):
        engine.inspect("abc")
    assert not engine.image_exists("sandbox/agent:x")     # a 404 that means "no"


def test_a_socket_that_is_not_http_is_an_engine_error(tmp_path):
    engine, _ = engine_answering(tmp_path, b"SSH-2.0-OpenSSH\r\n")
    with pytest.raises(EngineError, match="not HTTP"):
        engine.info()


def test_a_tar_goes_up_in_chunks(tmp_path):
    engine, server = engine_answering(tmp_path, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    engine.put_archive("abc", "/workspace", iter([b"tar", b"", b"ball"]))
    request = server.got[0]
    assert request.startswith(b"PUT /v1.41/containers/abc/archive?path=%2Fworkspace ")
    assert request.endswith(b"\r\n\r\n3\r\ntar\r\n4\r\nball\r\n0\r\n\r\n")


def test_the_attach_joins_the_stream_without_a_replay_of_the_log(tmp_path):
    # a replay (logs=1) of a container started right after the attach repeats its first lines
    engine, server = engine_answering(tmp_path, b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\n\r\n"
                                                b"\x01\x00\x00\x00\x00\x00\x00\x03hi\n")
    assert list(engine.output("abc")) == [(b"hi\n", None)]
    request = server.got[0].decode()
    assert request.startswith("POST /v1.41/containers/abc/attach?logs=0&stream=1&stdout=1&stderr=1&stdin=0 ")


def test_an_attach_with_stdin_carries_the_word_on_its_own_connection(tmp_path):
    """The gate's word: written on the attach's hijacked connection (stdin=1), no request of its own."""
    path, got = str(tmp_path / "engine.sock"), []
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()

    def serve():
        conn, _ = server.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        conn.sendall(b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\n\r\n\x01\x00\x00\x00\x00\x00\x00\x03hi\n")
        while not rest.endswith(b"\n"):
            rest += conn.recv(100)
        got.append((head, rest))
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    http = engineapi.Unix(path)
    http.version = "1.41"
    attached = Engine(http, {"ApiVersion": "1.41"}).output("abc", stdin=True)
    assert attached.writable and next(attached) == (b"hi\n", None)
    attached.write(b"go\n")
    assert list(attached) == []   # the engine's side closed once it had the word
    head, rest = got[0]
    assert head.startswith(b"POST /v1.41/containers/abc/attach?logs=0&stream=1&stdout=1&stderr=1&stdin=1 ")
    assert rest == b"go\n"


@pytest.mark.parametrize("kind", ["socket", "SocketIO"])
def test_the_sdk_s_attach_socket_carries_the_word_too(kind):
    """tcp, ssh and TLS go through the SDK: its raw attach socket (a read-only SocketIO for unix and
    plain tcp) is read as frames and written to as well."""
    ours, engine_side = socket.socketpair()
    raw = ours if kind == "socket" else socket.SocketIO(ours, "rb")   # as http.client makes it: read only

    class Api:
        api_version = "1.41"

        def attach_socket(self, ref, params):
            assert ref == "abc" and params["stdin"] and params["stream"] and not params["logs"]
            return raw

    http = engineapi.Sdk(type("Client", (), {"api": Api()})())
    attached = http.attach("abc", stdin=True)
    engine_side.sendall(b"\x02\x00\x00\x00\x00\x00\x00\x03err")
    assert next(attached) == (None, b"err")
    attached.write(b"go\n")
    assert engine_side.recv(10) == b"go\n"
    engine_side.close()
    assert list(attached) == []


def test_an_attach_without_stdin_cannot_write(tmp_path):
    engine, _ = engine_answering(tmp_path, b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\n\r\n")
    attached = engine.output("abc")
    assert not attached.writable
    with pytest.raises(EngineError, match="not attached with it"):
        attached.write(b"go\n")


def test_frames_split_anywhere_come_back_whole():
    stream = b"\x01\x00\x00\x00\x00\x00\x00\x05hello" + b"\x02\x00\x00\x00\x00\x00\x00\x03err" + b"\x01\0\0\0\0\0\0\0"
    pieces = [stream[i:i + 3] for i in range(0, len(stream), 3)]
    assert list(engineapi.frames(iter(pieces))) == [(b"hello", None), (None, b"err"), (b"", None)]


def test_the_environment_chooses_the_transport(monkeypatch):
    from launcher.host import host

    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    for address, path in [("", "/d.sock"), ("unix:///run/user/1000/podman/podman.sock", "/run/user/1000/podman/podman.sock"),
                          ("tcp://127.0.0.1:2375", None), ("ssh://me@box", None)]:
        monkeypatch.setenv("DOCKER_HOST", address)
        assert host.engine_socket("/d.sock") == path
    monkeypatch.setenv("DOCKER_HOST", "")
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    assert host.engine_socket("/d.sock") is None
