"""`sandbox up --port` on the real engine: a server inside answers on the host's loopback once `up`
has returned, `ls` lists the port, the sandbox keeps `network: none`; a host port in use refuses
the start with nothing made; a keeper that cannot start takes its sandbox with it; `down` frees
the port at once and leaves nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import BIND
from test_port_engine import free_port, sandbox   # the same tools as `sandbox port`'s tests
from fakes import Recorder
from launcher.errors import EngineError, ExitCode
from launcher.launch import ports, session

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_up_port_forwards_while_the_sandbox_lives(engine, workspace):
    name, host_port = f"sandbox-test-upport-{os.getpid()}", free_port()
    (workspace / "hello.txt").write_text("hello from inside\n")
    up = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--json", "--port", f"{host_port}:8000")
    try:
        assert up.returncode == 0, up.stderr
        said = json.loads(up.stdout)
        assert said["ports"] == [{"address": "127.0.0.1", "host_port": host_port, "port": 8000}], said
        assert f"forwarding 127.0.0.1:{host_port} to 127.0.0.1:8000 inside {name} while it runs" in up.stderr

        server = ("mkdir /tmp/www && cp hello.txt /tmp/www/ && cd /tmp/www && "
                  "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &")
        assert sandbox("exec", name, "--", "sh", "-c", server).returncode == 0
        deadline, body = time.monotonic() + 30, None
        while body is None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{host_port}/hello.txt", timeout=30).read()
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "the server inside never answered"
                time.sleep(0.3)
        assert body == b"hello from inside\n"

        listed = json.loads(sandbox("ls", "--json").stdout)
        mine = next(i for i in listed if i["name"] == name)
        assert mine["ports"] == [{"address": "127.0.0.1", "host_port": host_port, "port": 8000, "forwarded": True}]
        assert f"{host_port}->8000" in sandbox("ls").stdout

        state = engine.inspect(name)   # nothing was published or added to its network
        assert state.host.network_mode == "none" and not state.host.port_bindings

        other = f"{name}-taken"   # the same host port for another sandbox: refused before it starts
        taken = sandbox("up", *BIND, str(workspace), "--name", other, "--no-shell", "--port", f"{host_port}:9000")
        assert taken.returncode == ExitCode.POLICY_INVALID and f"{host_port} is in use" in taken.stderr, taken.stderr
        assert "Traceback" not in taken.stderr and engine.list(f"dev.sandbox.sandbox={other}") == []
    finally:
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    assert is_free(host_port) and ports.keepers(name) == []   # at once, not at the keeper's next look
    assert engine.list(f"dev.sandbox.sandbox={name}") == []


def test_a_keeper_that_cannot_start_leaves_nothing_behind(engine, workspace, monkeypatch):
    """As if the keeper failed after the sandbox started (here: it exits at once)."""
    name = f"sandbox-test-upport-gone-{os.getpid()}"
    monkeypatch.setattr(ports, "_argv", lambda n, spec: [sys.executable, "-c", "import sys; sys.exit(3)"])
    request = session.Request(policy="read-only", workspace=str(workspace), name=name,
                              ports=(ports.PortSpec(port=8000, host_port=0),))
    with pytest.raises(EngineError, match=r"did not start \(exit 3\)") as failed:
        session.up(request, Recorder(), engine=engine)
    assert failed.value.exit_code == ExitCode.ENGINE
    assert engine.list(f"dev.sandbox.sandbox={name}") == [] and engine.list_networks(f"dev.sandbox.sandbox={name}") == []


def test_run_port_forwards_while_the_agent_runs(engine, workspace):
    """The agent is the server: it answers one request, then the run ends with 0 and the port is free."""
    host_port = free_port()
    (workspace / "hello.txt").write_text("hello from the agent\n")
    serve_one = ("import http.server as h; s = h.HTTPServer(('127.0.0.1', 8000), h.SimpleHTTPRequestHandler); "
                 "s.handle_request()")
    run = subprocess.Popen(SANDBOX + ["run", "-p", "read-only", "-w", str(workspace), "--port", f"{host_port}:8000",
                                      "--", "python3", "-c", serve_one],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, body = time.monotonic() + 120, None
        while body is None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{host_port}/hello.txt", timeout=30).read()
            except (urllib.error.URLError, ConnectionError):
                assert run.poll() is None, run.communicate()
                assert time.monotonic() < deadline, "the agent's server never answered"
                time.sleep(0.3)
        assert body == b"hello from the agent\n"
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert f"forwarding 127.0.0.1:{host_port} to 127.0.0.1:8000 inside" in err and is_free(host_port)
