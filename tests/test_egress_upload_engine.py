"""Large uploads through the proxy on a real engine: a body the upstream reads slower than the
sandbox sends fills Squid's request buffer, which in Squid 5.7 (bug 5405) aborted the upload
(curl 52/55, ERR_CLIENT_GONE) every time on plain HTTP with a 1 MB buffer and in about half the
intercepted ones (squid.conf.j2: client_request_buffer_max_size). Plain HTTP and TLS terminated by
the proxy (a rule with http:), both through the same rule; our own upstream container only."""

from __future__ import annotations

import subprocess

import pytest

from conftest import script_upstream
from test_secrets_engine import SANDBOX, certs  # noqa: F401 - a fixture

pytestmark = pytest.mark.engine

SIZE = 30 << 20
# 443 (TLS, api.test's certificate) and 80 (plain): reads the whole body 64 KB at a time with a
# 2 ms pause (~30 MB/s, slower than the proxy takes it from the sandbox), then answers its length.
UPSTREAM = r'''
import os, socket, ssl, tempfile, threading, time
folder = tempfile.mkdtemp()
for part in ("CERT", "KEY"):
    with open(os.path.join(folder, part), "w") as out:
        out.write(os.environ["API_" + part])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(folder, "CERT"), os.path.join(folder, "KEY"))
def serve(conn, tls):
    try:
        if tls:
            conn = ctx.wrap_socket(conn, server_side=True)
        with conn, conn.makefile("rb") as stream:
            head = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                head[name.strip().lower()] = value.strip()
            left, got = int(head.get("content-length", "0")), 0
            while left and (chunk := stream.read(min(left, 1 << 16))):
                got += len(chunk); left -= len(chunk); time.sleep(0.002)
            body = b"got %d" % got
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    except OSError as exc:
        print("FAIL", tls, exc, flush=True)
def accept(sock, tls):
    while True:
        threading.Thread(target=serve, args=(sock.accept()[0], tls), daemon=True).start()
for port in (443, 80):
    sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port)); sock.listen(16)
    threading.Thread(target=accept, args=(sock, port == 443), daemon=True).start()
print("READY", flush=True)
threading.Event().wait()
'''

POLICY = """version: 1
name: upload-test
description: large uploads through an intercepted rule and plain HTTP
extends: [read-only]
tmpfs: [{{target: /tmp, size: 64m}}]
ca_certificates: [{ca}]
limits: {{timeout: 5m}}
network:
  mode: proxy
  allow:
    - {{host: api.test, private: true, http: {{methods: [POST], paths: [/up], ca_file: {ca}}}}}
"""
# One line per upload: "<url> <status> <what the upstream got> <curl's own error, if any>".
INSIDE = f"""head -c {SIZE} /dev/zero > /tmp/up
for url in http://api.test/up https://api.test/up http://api.test/up https://api.test/up; do
  code=$(curl -sS --max-time 60 -o /tmp/got -w '%{{http_code}}' -X POST -H 'Expect:' -T /tmp/up $url 2>/tmp/err)
  echo "$url $code $(cat /tmp/got 2>/dev/null) $(tr '\\n' ' ' < /tmp/err)"
  rm -f /tmp/got
done"""


def test_a_large_upload_the_upstream_reads_slowly_is_not_cut_off(engine, workspace, tmp_path, certs):  # noqa: F811
    env = {"API_CERT": certs["api.test.crt"], "API_KEY": certs["api.test.key"]}
    with script_upstream(engine, "upload", "api.test", UPSTREAM, env) as (network, upstream_log, _):
        (tmp_path / "good.pem").write_text(certs["good.pem"])
        policy = tmp_path / "policy.yaml"
        policy.write_text(POLICY.format(ca=tmp_path / "good.pem"))
        done = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                         "--", "sh", "-c", INSIDE], capture_output=True, text=True, timeout=300)
        log = upstream_log()
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    for line in lines:
        assert line.split()[1:] == ["200", "got", str(SIZE)], f"{line}\n{done.stderr[-3000:]}\n{log}"
