"""`sandbox port` without an engine: argument parsing, the errors, the frame parser, and the
forwarder end to end against a local HTTP server, its relays run by the host's busybox through a
stand-in for the engine's exec stream that behaves like the daemon's (half-close closes stdin)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from click.testing import CliRunner

from conftest import external_tool
from launcher import labels as label
from launcher.cli import main
from launcher.engine.enginefake import FakeEngine
from launcher.engine.execsocket import ExecSocket
from launcher.errors import EngineError, ExitCode, NotFound, PolicyError
from launcher.launch import forward
from launcher.plan.plan import PROBE_BUSYBOX


@pytest.mark.parametrize("text, port, host_port", [("8000", 8000, 8000), ("18000:8000", 8000, 18000),
                                                   ("0:5173", 5173, 0), ("65535:1", 1, 65535)])
def test_an_optional_host_port_first_as_docker_run_p(text, port, host_port):
    assert forward.parse_spec(text) == forward.PortSpec(port=port, host_port=host_port, address="127.0.0.1")


@pytest.mark.parametrize("text", ["", "0", "65536", "8000:", ":8000", "99999:80", "80:0", "-1", "+80", " 80",
                                  "80:81:82", "127.0.0.1:80:81", "８０", "http"])
def test_anything_else_is_refused_with_what_was_expected(text):
    with pytest.raises(ValueError, match=r"expected \[HOST_PORT:\]PORT \(host first, as docker run -p\) with .* found"):
        forward.parse_spec(text)


def test_another_address_only_as_an_ip():
    assert forward.parse_spec("80", "::1").address == "::1"
    assert not forward.is_loopback("0.0.0.0") and forward.is_loopback("127.0.0.2")
    with pytest.raises(ValueError, match="expected an IP address"):
        forward.parse_spec("80", "localhost")


@pytest.mark.parametrize("args, word", [(["box", "0"], "[HOST_PORT:]PORT"), (["box", "8000:0"], "PORT a number from 1"), (["box", "80", "--address", "x"], "--address"),
                                        (["box"], "Missing argument")])
def test_the_command_line_says_what_is_wrong_with_exit_2(args, word):
    result = CliRunner().invoke(main, ["port", *args])
    assert result.exit_code == ExitCode.USAGE and word in result.output, result.output


def test_help_says_how_it_reaches_the_sandbox():
    text = " ".join(CliRunner().invoke(main, ["port", "--help"]).output.split())
    assert "127.0.0.1:PORT inside the running `up` sandbox NAME" in text
    assert "The host port comes first, as in `docker run -p`" in text and "18000:8000" in text
    assert "Usage: main port [OPTIONS] NAME [HOST_PORT:]PORT" in text and "listen-fd" not in text
    assert "no network, no interface and no published port" in text and "Ctrl-C" in text


def listed(kind="up", state="running", user="1000:1000") -> FakeEngine:
    """The fake engine with one sandbox, box."""
    engine = FakeEngine()
    engine.http.add_container("box", {label.MANAGED: "1", label.KIND: kind}, status=state, user=user)
    return engine


def test_the_target_is_a_running_up_sandbox_and_its_user():
    engine = listed()
    assert forward.target(engine, "box") == forward.Target(name="box", ref=engine.list()[0].id, user="1000:1000")
    with pytest.raises(NotFound, match="no sandbox named 'other'") as missing:
        forward.target(listed(), "other")
    assert missing.value.exit_code == ExitCode.NO_SANDBOX
    with pytest.raises(PolicyError, match="box is a `run` sandbox") as run:
        forward.target(listed(kind="run"), "box")
    assert run.value.exit_code == ExitCode.POLICY_INVALID
    with pytest.raises(EngineError, match="box is exited, not running"):
        forward.target(listed(state="exited"), "box")


def test_a_host_port_in_use_is_refused_with_another_to_try():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    spec = forward.PortSpec(port=8000, host_port=taken.getsockname()[1])
    forwarder = forward.Forwarder(listed(), forward.Target(name="box", ref="cid", user=""), spec, lambda m: None)
    with pytest.raises(PolicyError, match=f"found {spec.host_port} is in use") as used:
        forwarder.listen()
    assert used.value.exit_code == ExitCode.POLICY_INVALID and "sandbox port box HOST_PORT:8000" in str(used.value)
    taken.close()


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


def test_frames_split_anywhere_come_out_whole():
    stream = frame(1, b"hello") + frame(2, b"12\n") + frame(1, b"") + frame(1, b"x" * 70000)
    parser, found = forward.Frames(), []
    for at in range(0, len(stream), 7):
        found += parser.feed(stream[at:at + 7])
    assert found == [(1, b"hello"), (2, b"12\n"), (1, b""), (1, b"x" * 70000)] and not parser.buffer


BUSYBOX = shutil.which("busybox") or "busybox"


class LocalExec(FakeEngine):
    """The fake engine with a running sandbox named cid, whose exec_socket, exec_running and
    exec_stream run argv here, the probe's busybox replaced by the host's: framed output on a
    socket pair, its stdin closed at a half-close."""

    def __init__(self):
        super().__init__()
        self.http.add_container("cid", {label.MANAGED: "1", label.KIND: "up"})
        self.procs: dict[str, subprocess.Popen] = {}
        self.kills: list[list[str]] = []

    @property
    def alive(self) -> bool:
        return self.inspect("cid").running

    @alive.setter
    def alive(self, running: bool) -> None:
        self.http.container("cid")["State"].update(Running=running, Status="running" if running else "exited")

    def _argv(self, argv):
        return [BUSYBOX if a == PROBE_BUSYBOX else a for a in argv]

    def exec_socket(self, ref, argv, user):
        if not self.alive:
            raise EngineError("container cid is not running")
        proc = subprocess.Popen(self._argv(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ours, daemon = socket.socketpair()
        lock = threading.Lock()

        def stdin():
            try:
                while data := daemon.recv(65536):
                    proc.stdin.write(data)
                    proc.stdin.flush()
                proc.stdin.close()
            except OSError:   # it exited
                pass

        def output(pipe, kind, done):
            try:
                while data := pipe.read1(65536):
                    with lock:
                        daemon.sendall(frame(kind, data))
            except OSError:   # our side is gone: stop reading, as the daemon does
                return
            done.set()

        ended = [threading.Event(), threading.Event()]
        for target, args in ((stdin, ()), (output, (proc.stdout, 1, ended[0])), (output, (proc.stderr, 2, ended[1]))):
            threading.Thread(target=target, args=args, daemon=True).start()

        def finish():
            for event in ended:
                event.wait()
            proc.wait()
            daemon.shutdown(socket.SHUT_WR)

        threading.Thread(target=finish, daemon=True).start()
        self.procs[str(proc.pid)] = proc
        return str(proc.pid), ExecSocket(ours)

    def exec_running(self, exec_id):
        return self.procs[exec_id].poll() is None

    def exec_stream(self, ref, argv, user=""):
        self.kills.append(argv)
        done = subprocess.run(self._argv(argv), capture_output=True)
        return "kill", iter([(done.stdout, done.stderr)])

    def left(self) -> list[str]:
        return [pid for pid, proc in self.procs.items() if proc.poll() is None]


@pytest.fixture
def served(tmp_path):
    """A local HTTP server with a 3 MiB file (and big.bin, 256 MiB of zeros); (port, the 3 MiB)."""
    external_tool("busybox", "Debian: apt-get install busybox-static (.ci/run installs it)")
    blob = os.urandom(3 << 20)
    (tmp_path / "blob.bin").write_bytes(blob)
    with open(tmp_path / "big.bin", "wb") as big:
        big.truncate(256 << 20)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield port, blob
    server.kill()
    server.wait()


def running(engine, port, messages):
    forwarder = forward.Forwarder(engine, forward.Target(name="box", ref="cid", user=""),
                                  forward.PortSpec(port=port, host_port=0), messages.append)
    forwarder.listen()
    thread = threading.Thread(target=forwarder.serve, daemon=True)
    thread.start()
    return forwarder, thread


def test_concurrent_requests_and_a_large_response_pass_byte_for_byte(served):
    port, blob = served
    engine, messages = LocalExec(), []
    forwarder, thread = running(engine, port, messages)
    url = f"http://127.0.0.1:{forwarder.port}"

    def get(path):
        with urllib.request.urlopen(url + path, timeout=30) as response:
            return response.status, response.read()

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(get, ["/blob.bin", "/"] * 12))
    assert all(status == 200 for status, _ in results)
    assert all(hashlib.sha256(body).digest() == hashlib.sha256(blob).digest() for body, in
               ((b,) for (_, b), p in zip(results, ["/blob.bin", "/"] * 12) if p == "/blob.bin"))
    assert all(b"blob.bin" in body for (_, body), p in zip(results, ["/blob.bin", "/"] * 12) if p == "/")
    forwarder.stop()
    thread.join(5)
    assert forwarder.close() == 0 and forwarder.served == 24 and engine.left() == [] and messages == []


def test_nothing_listening_closes_the_connection_and_says_so(served):
    port, _ = served
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    nobody = free.getsockname()[1]
    free.close()
    engine, messages = LocalExec(), []
    forwarder, thread = running(engine, nobody, messages)
    client = socket.create_connection(("127.0.0.1", forwarder.port), timeout=10)
    client.sendall(b"GET / HTTP/1.0\r\n\r\n")
    assert client.recv(100) == b""
    deadline = time.monotonic() + 5
    while not messages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert messages == [f"nothing is listening on 127.0.0.1:{nobody} inside box: closed the connection from "
                        f"127.0.0.1:{client.getsockname()[1]}"]
    forwarder.stop()
    thread.join(5)
    assert forwarder.close() == 0 and engine.left() == []


def test_stopping_ends_relays_stuck_in_the_middle_of_a_response(served):
    """Clients that stopped reading a large response, and one that sent nothing yet: close() ends
    all their relays (killed by pid where their streams closing is not enough)."""
    port, _ = served
    engine, messages = LocalExec(), []
    forwarder, thread = running(engine, port, messages)
    stalled = []
    for _ in range(3):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", forwarder.port))
        client.sendall(b"GET /big.bin HTTP/1.0\r\n\r\n")
        assert client.recv(10) == b"HTTP/1.0 2"
        stalled.append(client)
    idle = socket.create_connection(("127.0.0.1", forwarder.port), timeout=10)
    deadline = time.monotonic() + 5
    while len(engine.left()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(engine.left()) == 4
    forwarder.stop()
    thread.join(5)
    started = time.monotonic()
    assert forwarder.close() == 0 and engine.left() == []
    assert time.monotonic() - started < forward.STOP_WAIT + 2 and messages == []
    killed = {pid for argv in engine.kills for pid in argv[6:]}
    assert len(killed) == 3 and killed <= set(engine.procs)   # the idle one ended with its stdin
    for client in stalled + [idle]:
        client.close()


def test_a_sandbox_that_stops_stops_the_forwarder_with_121(served, monkeypatch):
    port, _ = served
    monkeypatch.setattr(forward, "LIVENESS_EVERY", 0.1)
    engine, messages = LocalExec(), []
    forwarder = forward.Forwarder(engine, forward.Target(name="box", ref="cid", user=""),
                                  forward.PortSpec(port=port, host_port=0), messages.append)
    forwarder.listen()
    engine.alive = False
    with pytest.raises(EngineError, match="box is not running any more") as gone:
        forwarder.serve()
    assert gone.value.exit_code == ExitCode.ENGINE
    forwarder.close()


def test_ctrl_c_stops_the_command_with_0_and_a_port_in_use_gives_120(monkeypatch):
    from launcher.engine import engine as engine_mod

    monkeypatch.setattr(engine_mod, "connect", lambda **_: listed())

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(forward.Forwarder, "serve", interrupted)
    stopped = CliRunner().invoke(main, ["port", "box", "0:8000"])
    assert stopped.exit_code == 0, stopped.output
    assert "forwarding 127.0.0.1:" in stopped.output and "stopped forwarding to box (0 connections)" in stopped.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        used = CliRunner().invoke(main, ["port", "box", f"{taken.getsockname()[1]}:8000"])
    assert used.exit_code == ExitCode.POLICY_INVALID and "is in use" in used.output, used.output
    monkeypatch.setattr(forward, "is_loopback", lambda address: False)   # as if: never listens beyond loopback here
    wide = CliRunner().invoke(main, ["port", "box", "0:8000", "--address", "127.0.0.2"])
    assert wide.exit_code == 0 and "warning: listening on 127.0.0.2: whoever reaches" in wide.output, wide.output
