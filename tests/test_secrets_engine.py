"""A secret injected by the proxy reaches the upstream in a header and exists nowhere in the sandbox:
not in any process's environment, any file, the probe's report, `docker inspect` of the sandbox or
the JSON report. The upstream is our own container on an internal network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import script_upstream

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
# Logs every request line and header it gets, answers 200 with a fixed body (never echoes headers).
RECORDER = r'''
import socket, threading
def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        for line in data.decode(errors="replace").split("\r\n"):
            if line:
                print("REQ " + line, flush=True)
        print("REQ-END", flush=True)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nmodel ok\n")
sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("0.0.0.0", 80)); sock.listen(16)
print("READY", flush=True)
while True:
    threading.Thread(target=serve, args=(sock.accept()[0],), daemon=True).start()
'''


@pytest.fixture
def model_api(engine):
    """A model-API-like upstream called model.test on a fresh internal network."""
    with script_upstream(engine, "secrets", "model.test", RECORDER) as upstream:
        yield upstream


POLICY = """version: 1
name: secret-test
description: an agent that calls a model API through an injected secret
workspace: {access: read-write}
tmpfs: [{target: /tmp, size: 64m}]
network: {mode: proxy}
env: {set: {XDG_CACHE_HOME: /tmp/.cache}}
limits: {timeout: 5m}
secrets:
  - {name: model, %s, upstream: "http://model.test", header: "Authorization: Bearer {value}"}
"""
# Inside: call the endpoint (with a forged header the proxy must drop), wait until the test has
# inspected the container, then copy out what a hostile agent could read: every process's
# environment and command line, and the files under /etc, /tmp, /home, /run and the workspace.
SCRIPT = r"""
set -u
curl -s --max-time 10 -H 'Authorization: Bearer forged-by-agent' "$SANDBOX_ENDPOINT_MODEL/v1/complete" > /workspace/answer.txt
echo "answer=$(cat /workspace/answer.txt)"
echo INSPECT-NOW
for i in $(seq 300); do [ -e /workspace/go ] && break; sleep 0.1; done
mkdir -p /tmp/dump
for p in /proc/[0-9]*; do cat $p/environ $p/cmdline > /tmp/dump/proc-${p#/proc/} 2>/dev/null; done
env > /tmp/dump/env
tar -cf /workspace/everything.tar /etc /tmp /home /run /workspace --exclude=/workspace/everything.tar 2>/dev/null
echo done
"""


def from_the_egress_side(engine, model_api, proxy: str) -> str:
    """Connect to the proxy's secret endpoint from the upstream's side (another network)."""
    api, ref = engine.client.api, model_api[2]
    probe = ("import socket\ntry:\n    socket.create_connection((%r, 3130), timeout=3); print('connected')\n"
             "except OSError as exc:\n    print('refused' if isinstance(exc, ConnectionRefusedError) else repr(exc))") % proxy
    exec_id = api.exec_create(ref, ["python3", "-c", probe])["Id"]
    return api.exec_start(exec_id).decode().strip()


def _run_and_search(engine, model_api, workspace, source_line: str, value: str, tmp_path):
    network, upstream_log, _ = model_api
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY % source_line)
    report = tmp_path / "report.json"
    env = {**os.environ, "SANDBOX_TEST_MODEL_KEY": value}
    proc = subprocess.Popen(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                       "--report", str(report), "--", "bash", "-c", SCRIPT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    answer = proc.stdout.readline()
    assert proc.stdout.readline().strip() == "INSPECT-NOW", answer
    sandboxes = [c for c in engine.list(f"dev.sandbox.workspace={workspace}") if c["Labels"]["dev.sandbox.kind"] != "proxy"]
    inspected = json.dumps([engine.inspect(c["Id"]) for c in sandboxes])
    proxy = next(c["Names"][0].lstrip("/") for c in engine.list(f"dev.sandbox.workspace={workspace}")
                 if c["Labels"]["dev.sandbox.kind"] == "proxy")
    from_egress = from_the_egress_side(engine, model_api, proxy)
    (workspace / "go").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert answer.strip() == "answer=model ok" and "done" in out
    assert from_egress == "refused", from_egress   # the endpoint serves the sandbox's network only

    # the upstream saw the proxy's header, and only it
    requests = upstream_log()
    assert f"REQ Authorization: Bearer {value}" in requests
    assert "forged-by-agent" not in requests and requests.count("REQ Authorization:") == 1
    assert "REQ GET /v1/complete HTTP/1.1" in requests and "REQ Host: model.test" in requests

    # ... and the value is nowhere the sandbox or its records could show it
    assert len(sandboxes) == 1 and value not in inspected
    text = report.read_text()
    assert value not in text and json.loads(text)["probe"]["ok"]
    assert value not in out and value not in err
    with tarfile.open(workspace / "everything.tar") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        dumps = [tar.extractfile(m).read() for m in members if m.name.startswith("tmp/dump/proc-")]
        assert any(b"SANDBOX_ENDPOINT_MODEL=http://sandbox-proxy:3130" in d for d in dumps)   # the dump works
        for member in members:
            assert value.encode() not in tar.extractfile(member).read(), member.name
    for path in workspace.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
    compiled = subprocess.run(SANDBOX + ["compile", "-p", str(policy), "-w", str(workspace)],
                              capture_output=True, text=True, env=env)
    assert compiled.returncode == 0 and value not in compiled.stdout + compiled.stderr
    assert "SANDBOX_ENDPOINT_MODEL" in compiled.stdout


def test_a_secret_from_the_host_environment_reaches_the_upstream_and_never_the_sandbox(engine, model_api, workspace,
                                                                                       tmp_path):
    value = "tok-" + os.urandom(12).hex()
    _run_and_search(engine, model_api, workspace, "env: SANDBOX_TEST_MODEL_KEY", value, tmp_path)


def test_a_secret_from_a_file_works_the_same(engine, model_api, workspace, tmp_path):
    value = "file-" + os.urandom(12).hex() + "%41"     # a % must reach the upstream as it is
    key = tmp_path / "key"
    key.write_text(value + "\n")
    _run_and_search(engine, model_api, workspace, f"file: {key}", value, tmp_path)


def test_a_missing_secret_refuses_the_run_before_anything_starts(engine, model_api, workspace, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY % "env: SANDBOX_TEST_UNSET_KEY")
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_TEST_UNSET_KEY"}
    result = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", model_api[0],
                                       "--", "true"], capture_output=True, text=True, env=env)
    assert result.returncode == 120 and "$SANDBOX_TEST_UNSET_KEY set and not empty" in result.stderr
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []
