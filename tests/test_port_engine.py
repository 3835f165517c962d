"""`sandbox port` on the real engine: a real HTTP server inside an `up` sandbox answers a real
client on the host's loopback, concurrently and byte for byte, while the sandbox keeps `network:
none`; Ctrl-C ends the forwarder with 0 and leaves no relay inside; `down` leaves nothing."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import BIND, docker_sdk
from launcher.errors import ExitCode

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
BB = "/.sandbox/probe/busybox"
# Every relay process to port 8000 inside: its uid, no-new-privileges and effective capabilities.
RELAYS = (f'for s in /proc/[0-9]*; do [ "$({BB} tr "\\0" " " < $s/cmdline 2>/dev/null)" = "{BB} nc 127.0.0.1 8000 " ] '
          f'&& {BB} grep -E "^(Uid|NoNewPrivs|CapEff):" $s/status; done; true')


def sandbox(*args, timeout=300):
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lines_of(proc) -> queue.Queue:
    found = queue.Queue()
    threading.Thread(target=lambda: [found.put(line) for line in proc.stderr], daemon=True).start()
    return found


def wait_for(lines: queue.Queue, text: str, timeout: float = 60) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.5))
        except queue.Empty:
            continue
        if text in seen[-1]:
            return seen
    raise AssertionError(f"no line with {text!r}; saw {seen}")


def relays(name: str) -> list[str]:
    return sandbox("exec", name, "--", BB, "sh", "-c", RELAYS).stdout.split("\n")[:-1]


def test_a_server_inside_answers_on_the_host_loopback_and_the_sandbox_stays_offline(engine, workspace):
    name, blob = f"sandbox-test-port-{os.getpid()}", os.urandom(4 << 20)
    (workspace / "blob.bin").write_bytes(blob)
    up = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell")
    assert up.returncode == 0, up.stderr
    forwarder = None
    try:
        logs = engine.logs(name)   # the probe ran before anything else, in the sandbox's own container
        assert "PROBE\tnet.interfaces\tpass\t" in logs and "PROBE\tnet.routes\tpass\t" in logs, logs
        host_port = free_port()
        forwarder = subprocess.Popen(SANDBOX + ["port", name, f"{host_port}:8000"], stderr=subprocess.PIPE, text=True)
        said = lines_of(forwarder)
        wait_for(said, f"forwarding 127.0.0.1:{host_port} to 127.0.0.1:8000 inside {name}")
        url = f"http://127.0.0.1:{host_port}"

        with pytest.raises((urllib.error.URLError, ConnectionError)):   # no server yet: closed, and said
            urllib.request.urlopen(url, timeout=30)
        wait_for(said, f"nothing is listening on 127.0.0.1:8000 inside {name}")

        server = ("mkdir /tmp/www && cp blob.bin /tmp/www/ && ln -s /dev/zero /tmp/www/endless && cd /tmp/www && "
                  "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &")
        assert sandbox("exec", name, "--", "sh", "-c", server).returncode == 0
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=30).read()
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the server inside never answered"
                time.sleep(0.3)

        def get(path):
            with urllib.request.urlopen(url + path, timeout=60) as response:
                return path, response.status, hashlib.sha256(response.read()).hexdigest()

        paths = ["/blob.bin", "/"] * 8
        with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(get, paths))
        assert all(status == 200 for _, status, _ in answers)
        assert {digest for path, _, digest in answers if path == "/blob.bin"} == {hashlib.sha256(blob).hexdigest()}

        endless = socket.create_connection(("127.0.0.1", host_port), timeout=60)   # /dev/zero, streamed, held open
        endless.sendall(b"GET /endless HTTP/1.0\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += endless.recv(1)
        assert head.startswith(b"HTTP/1.0 200 ")
        body = b""
        while len(body) < 1 << 20:
            body += endless.recv(65536)
        assert body == bytes(len(body))
        deadline = time.monotonic() + 10
        while len(relay := relays(name)) != 3 and time.monotonic() < deadline:   # the others' are ending
            time.sleep(0.2)
        assert relay[0].split()[1:] == ["1000"] * 4 and relay[1:] == ["CapEff:\t0000000000000000", "NoNewPrivs:\t1"], relay

        taken = sandbox("port", name, f"{host_port}:8000")
        assert taken.returncode == ExitCode.POLICY_INVALID and f"{host_port} is in use" in taken.stderr, taken.stderr
        missing = sandbox("port", f"{name}-nope", "8000")
        assert missing.returncode == ExitCode.NO_SANDBOX and "no sandbox named" in missing.stderr

        forwarder.send_signal(signal.SIGINT)   # Ctrl-C, with the endless response still flowing
        assert forwarder.wait(timeout=30) == 0
        wait_for(said, f"stopped forwarding to {name}")
        endless.close()
        assert relays(name) == []

        state = engine.inspect(name)   # nothing was added to the sandbox's network
        assert state.host.network_mode == "none" and not state.host.port_bindings and "bridge" not in state.networks
        assert not docker_sdk().api.inspect_container(name)["NetworkSettings"].get("Ports")
        devices = sandbox("exec", name, "--", "cat", "/proc/net/dev").stdout.splitlines()[2:]
        assert [line.split(":")[0].strip() for line in devices] == ["lo"]
    finally:
        if forwarder is not None and forwarder.poll() is None:
            forwarder.kill()
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    assert engine.list(f"dev.sandbox.workspace={os.path.realpath(workspace)}") == []
