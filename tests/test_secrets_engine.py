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

from conftest import docker_sdk, script_upstream

from launcher.selftest import testnet

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
# Both recorders log every request line and header they get (never echoing headers back).
LOG_REQUEST = r'''
def log_request(conn):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    for line in data.decode(errors="replace").split("\r\n"):
        if line:
            print("REQ " + line, flush=True)
    # the rest of the body, read (not logged) so that closing never resets a request still arriving
    head, _, rest = data.partition(b"\r\n\r\n")
    fields = dict(l.split(b":", 1) for l in head.lower().split(b"\r\n")[1:] if b":" in l)
    size, chunked = int(fields.get(b"content-length", b"0").strip() or 0), b"chunked" in fields.get(b"transfer-encoding", b"")
    conn.settimeout(10)
    try:
        while (len(rest) < size or (chunked and not rest.endswith(b"0\r\n\r\n"))):
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest = rest[-8:] + chunk if chunked else rest + chunk
    except OSError:
        pass
'''
# Answers 200 with a fixed body.
RECORDER = r'''
import socket, threading
''' + LOG_REQUEST + r'''
def serve(conn):
    with conn:
        log_request(conn)
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
    api, ref = docker_sdk().api, model_api[2]
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
    sandboxes = [c for c in engine.list(f"dev.sandbox.workspace={workspace}") if c.labels["dev.sandbox.kind"] != "proxy"]
    inspected = json.dumps([docker_sdk().api.inspect_container(c.id) for c in sandboxes])
    proxy = next(c.name for c in engine.list(f"dev.sandbox.workspace={workspace}")
                 if c.labels["dev.sandbox.kind"] == "proxy")
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


def test_squid_format_codes_in_a_value_reach_the_upstream_as_they_are(engine, model_api, workspace, tmp_path):
    # %>h would make Squid insert a request header: the proxy config must not see it as a format code
    value = "fmt-" + os.urandom(8).hex() + "%>h%>ha%%x%"
    _run_and_search(engine, model_api, workspace, "env: SANDBOX_TEST_MODEL_KEY", value, tmp_path)


@pytest.mark.parametrize("special", ['"', "\n", "\\", "\x07", "%{Host}>h"])
def test_a_value_that_could_change_the_proxy_config_is_refused_and_never_shown(engine, model_api, workspace, tmp_path,
                                                                               special):
    secret = os.urandom(8).hex()
    value = f"tok{special}{secret}"
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY % "env: SANDBOX_TEST_MODEL_KEY")
    result = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", model_api[0],
                                       "--", "true"], capture_output=True, text=True,
                            env={**os.environ, "SANDBOX_TEST_MODEL_KEY": value})
    assert result.returncode == 120 and "expected a single-line printable value" in result.stderr, result.stderr
    assert secret not in result.stderr + result.stdout
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []


def test_a_missing_secret_refuses_the_run_before_anything_starts(engine, model_api, workspace, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY % "env: SANDBOX_TEST_UNSET_KEY")
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_TEST_UNSET_KEY"}
    result = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", model_api[0],
                                       "--", "true"], capture_output=True, text=True, env=env)
    assert result.returncode == 120 and "$SANDBOX_TEST_UNSET_KEY set and not empty" in result.stderr
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []


# ---- https:// upstreams: the proxy verifies the upstream's certificate (ca_file or system CAs)

# Inside the proxy image (it has the openssl CLI; no network): two throwaway CAs, a certificate for
# api.test and one for wrong.test, both signed by the first CA.
CERTS = r"""
set -eu; cd /tmp
for ca in good other; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=sandbox test $ca CA" \
      -keyout $ca.key -out $ca.pem 2>/dev/null
done
for name in api.test wrong.test; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" -keyout $name.key -out $name.csr 2>/dev/null
  printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\n' $name > $name.ext
  openssl x509 -req -in $name.csr -CA good.pem -CAkey good.key -CAcreateserial -days 2 -extfile $name.ext -out $name.crt 2>/dev/null
done
for f in good.pem other.pem api.test.crt api.test.key wrong.test.crt wrong.test.key; do echo "== $f"; cat $f; done
"""
# The recorder over TLS: port 443 presents the api.test certificate, port 8443 the wrong.test one.
TLS_RECORDER = r'''
import os, socket, ssl, tempfile, threading
''' + LOG_REQUEST + r'''
def context(name):
    folder = tempfile.mkdtemp()
    for part in ("CERT", "KEY"):
        with open(os.path.join(folder, part), "w") as out:
            out.write(os.environ[name + "_" + part])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(folder, "CERT"), os.path.join(folder, "KEY"))
    return ctx
def serve(conn, ctx, port):
    try:
        conn = ctx.wrap_socket(conn, server_side=True)
    except (OSError, ssl.SSLError) as exc:
        print("TLS-FAIL %d %s" % (port, exc), flush=True)
        conn.close()
        return
    with conn:
        log_request(conn)
        print("REQ-END %d %s" % (port, conn.version()), flush=True)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 13\r\n\r\nmodel tls ok\n")
def accept(sock, ctx, port):
    while True:
        threading.Thread(target=serve, args=(sock.accept()[0], ctx, port), daemon=True).start()
for port, name in ((443, "API"), (8443, "WRONG")):
    sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port)); sock.listen(16)
    threading.Thread(target=accept, args=(sock, context(name), port), daemon=True).start()
print("READY", flush=True)
threading.Event().wait()
'''
TLS_POLICY = """version: 1
name: secret-tls-test
description: an agent that calls a model API over TLS through injected secrets
workspace: {access: read-write}
tmpfs: [{target: /tmp, size: 16m}]
network: {mode: proxy}
limits: {timeout: 5m}
secrets:
"""
# Calls every endpoint; prints "<name> <status> <body or Squid's error>" for each.
CALLS = r"""
for name in %s; do
  var=SANDBOX_ENDPOINT_$(echo $name | tr a-z A-Z)
  eval url=\$$var
  status=$(curl -s --max-time 20 -D /tmp/head -o /tmp/body -w '%%{http_code}' "$url/v1/complete")
  error=$(sed -n 's/^X-Squid-Error: *//p' /tmp/head | tr -d '\r')
  detail=$(grep -o '[A-Z_]*X509_V_ERR_[A-Z_]*' /tmp/body | head -1)   # the certificate error, if any
  echo "$name $status ${error:-$(head -c 40 /tmp/body | tr -d '\n')} $detail"
done
"""


@pytest.fixture(scope="module")
def certs(engine):
    from launcher.engine import images

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    out = docker_sdk().containers.run(images.proxy_image().tag, entrypoint=["sh", "-c", CERTS], user="13:13",
                                       network_disabled=True, remove=True, ulimits=testnet.tool_ulimits(engine)).decode()
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in out.split("== ")[1:]}


@pytest.fixture
def tls_api(engine, certs):
    """An https upstream called api.test (our own container on a fresh internal network)."""
    env = {"API_CERT": certs["api.test.crt"], "API_KEY": certs["api.test.key"],
           "WRONG_CERT": certs["wrong.test.crt"], "WRONG_KEY": certs["wrong.test.key"]}
    with script_upstream(engine, "secrets-tls", "api.test", TLS_RECORDER, env) as upstream:
        yield upstream


def _run_calls(tls_api, workspace, tmp_path, certs, entries: list[tuple[str, str, str]]) -> tuple[str, dict, str]:
    """Run a sandbox with one secret per (name, upstream, CA file name or ''); what the agent saw
    per name, the values, and the upstream's log."""
    network, upstream_log, _ = tls_api
    lines, env = [], dict(os.environ)
    for index, (name, upstream, ca) in enumerate(entries):
        env[f"SANDBOX_TEST_TLS_KEY_{index}"] = f"tok{index}-" + os.urandom(12).hex()
        if ca:
            (tmp_path / ca).write_text(certs[ca])
        ca_line = f", ca_file: {tmp_path / ca}" if ca else ""
        lines.append(f'  - {{name: {name}, env: SANDBOX_TEST_TLS_KEY_{index}, upstream: "{upstream}", '
                     f'header: "Authorization: Bearer {{value}}"{ca_line}}}\n')
    policy = tmp_path / "policy.yaml"
    policy.write_text(TLS_POLICY + "".join(lines))
    result = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                       "--", "bash", "-c", CALLS % " ".join(e[0] for e in entries)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1].strip() for line in result.stdout.splitlines() if " " in line}
    values = {name: env[f"SANDBOX_TEST_TLS_KEY_{i}"] for i, (name, _, _) in enumerate(entries)}
    return seen, values, upstream_log()


def test_an_https_upstream_signed_by_the_policys_ca_file_gets_the_header_over_tls(tls_api, workspace, tmp_path, certs):
    seen, values, log = _run_calls(tls_api, workspace, tmp_path, certs, [("model", "https://api.test", "good.pem")])
    assert seen["model"] == "200 model tls ok", seen
    assert f"REQ Authorization: Bearer {values['model']}" in log and "REQ Host: api.test" in log
    assert "REQ-END 443 TLSv1." in log


def test_an_upstream_the_proxy_cannot_verify_never_gets_the_header(tls_api, workspace, tmp_path, certs):
    """Fails closed: the system CAs (no ca_file), another CA, or a certificate for another name;
    never a fallback to no verification. `model` is the control: the upstream does answer."""
    seen, values, log = _run_calls(tls_api, workspace, tmp_path, certs, [
        ("model", "https://api.test", "good.pem"), ("sysca", "https://api.test", ""),
        ("otherca", "https://api.test", "other.pem"), ("wrongname", "https://api.test:8443", "good.pem")])
    assert seen["model"] == "200 model tls ok", seen
    for name in ("sysca", "otherca", "wrongname"):
        assert seen[name].startswith("503 ERR_SECURE_CONNECT_FAIL"), (name, seen)
        assert values[name] not in log, name
    assert seen["wrongname"].endswith("SQUID_X509_V_ERR_DOMAIN_MISMATCH"), seen
    # Only the control's request ever reached the upstream (Squid's TCP probes of its peers and the
    # refused handshakes carry none).
    assert log.count("REQ GET ") == 1 and log.count("REQ Authorization:") == 1, log
