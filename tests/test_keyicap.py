"""The key ICAP service (images/proxy/sandbox-icap, issue 42 item 3), without an engine: ICAP
transactions as Squid sends them, the placeholder in every header and the body in each form it looks
for, the answers (204, the request echoed, 403 with the reason), a body over the limit, the service
on loopback; and what squid.conf, the audit and `sandbox check` make of it."""

from __future__ import annotations

import base64
import io
import json
import socket
import subprocess
import sys
import tempfile
import time
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from urllib.parse import quote

import pytest

from launcher.egress import audit
from launcher.policy import keybind
from launcher.policy.model import KeyBinding
from test_keybind import BASE, plan

SERVICE = Path(__file__).parent.parent / "images" / "proxy" / "sandbox-icap"
PH = keybind.placeholder("seed", "anthropic")
OWN = "POST https://api.example.com/v1/messages HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer %s\r\n" % PH


def _module():
    loader = SourceFileLoader("sandbox_icap_under_test", str(SERVICE))
    module = module_from_spec(spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


icap = _module()


def keys_text() -> str:
    return keybind.keys_file(keybind.seen_headers(["Authorization"]), [
        keybind.keys_line(KeyBinding(host="api.example.com", paths=("/v1/",), variable="ANTHROPIC_API_KEY"), PH,
                          "Authorization", f"Bearer {PH}")])


@pytest.fixture(scope="module")
def loaded():
    with tempfile.NamedTemporaryFile("w", suffix=".keys") as file:
        file.write(keys_text())
        file.flush()
        return icap.load(file.name)


def reqmod(head: str, body: bytes | None, allow204: bool = True, chunk: int = 7) -> bytes:
    """A REQMOD as Squid sends it (no preview): the HTTP head, then the body in ICAP chunks."""
    http = (head + "\r\n").encode()
    where = f"req-body={len(http)}" if body is not None else f"null-body={len(http)}"
    out = (f"REQMOD icap://127.0.0.1:1344/reqmod ICAP/1.0\r\nHost: 127.0.0.1:1344\r\nEncapsulated: req-hdr=0, {where}\r\n"
           + ("Allow: 204\r\n" if allow204 else "") + "\r\n").encode() + http
    if body is not None:
        for start in range(0, len(body), chunk):
            part = body[start:start + chunk]
            out += b"%x\r\n" % len(part) + part + b"\r\n"
        out += b"0\r\n\r\n"
    return out


def transact(loaded, data: bytes, limit: int = icap.MAX_BODY) -> bytes:
    out = io.BytesIO()
    assert icap.handle(*loaded, io.BufferedReader(io.BytesIO(data)), out, limit)
    return out.getvalue()


def refusal(answer: bytes) -> str:
    """The reason of a 403 answer (its ICAP header), "" for an unchanged request."""
    if answer.startswith(b"ICAP/1.0 204") or b"Encapsulated: req-hdr=0" in answer:
        return ""
    assert answer.startswith(b"ICAP/1.0 200 OK") and b"\r\n\r\nHTTP/1.1 403 Forbidden" in answer, answer[:300]
    reason = answer.split(b"X-Sandbox-Reason: ", 1)[1].split(b"\r\n", 1)[0].decode()
    assert reason.startswith("refused: ") and ("sandbox: refused by the egress policy: " + reason[9:]).encode() in answer
    return reason


OTHER = "POST https://other.example.com/v1/x HTTP/1.1\r\nHost: other.example.com\r\n"
BODY_FORMS = {
    "raw": PH.encode(),
    "upper case": PH.upper().encode(),
    "percent-encoded": "".join("%%%02X" % ord(c) for c in PH).encode(),
    "percent-encoded twice": "".join("%%25%02x" % ord(c) for c in PH).encode(),
    "some characters encoded": quote(PH, safe="").replace("-", "%2D").replace("a", "%61").encode(),
    "JSON escapes": json.dumps({"k": PH}).replace("-", "\\u002d").encode(),
    "base64": base64.b64encode(f"user:{PH}".encode()),
    "base64 shifted": base64.b64encode(f"xuser:{PH}!".encode()),
    "base64 shifted twice": base64.b64encode(f"xxuser:{PH}".encode()),
    "base64 URL-safe": base64.urlsafe_b64encode(f"??>{PH}".encode()),
}


@pytest.mark.parametrize("form", BODY_FORMS)
def test_the_placeholder_in_a_body_in_any_form_is_refused(loaded, form):
    body = b"prefix " * 3000 + BODY_FORMS[form] + b" suffix"
    reason = refusal(transact(loaded, reqmod(OTHER + "Content-Length: %d\r\n" % len(body), body)))
    assert "placeholder of ANTHROPIC_API_KEY sent to https://other.example.com:443" in reason, reason
    # in a request to its own host, with its own header right, the body still may not hold it
    reason = refusal(transact(loaded, reqmod(OWN, body)))
    assert reason == ("refused: placeholder of ANTHROPIC_API_KEY in the request body: it goes only in authorization "
                      "(https://api.example.com/v1/ in authorization)"), reason


@pytest.mark.parametrize("header", ["X-Custom: {ph}", "Cookie: a=b; k={ph}", "Authorization: Basic {b64}",
                                    "User-Agent: x/{pct}", "{ph}: 1"])
def test_the_placeholder_in_any_header_is_refused(loaded, header):
    line = header.format(ph=PH, b64=base64.b64encode(f"u:{PH}".encode()).decode(), pct=quote(PH, safe="").replace("s", "%73"))
    assert "placeholder of ANTHROPIC_API_KEY" in refusal(transact(loaded, reqmod(OTHER + line + "\r\n", None)))
    assert "placeholder of ANTHROPIC_API_KEY" in refusal(transact(loaded, reqmod(OWN + line + "\r\n", None)))


def test_the_placeholder_as_the_method_is_refused(loaded):
    # Squid takes any token for a method and passes it on: to a plain-HTTP host no rule lists methods
    line = f"{PH.upper()} http://plain.example.com/x HTTP/1.1\r\nHost: plain.example.com\r\n"
    assert "placeholder of ANTHROPIC_API_KEY sent to http://plain.example.com:80" in refusal(transact(loaded, reqmod(line, None)))
    own = OWN.replace("POST ", "%25" + PH + " ", 1)
    assert refusal(transact(loaded, reqmod(own, None))).startswith("refused: placeholder of ANTHROPIC_API_KEY in the method")


def test_the_placeholder_in_a_trailer_after_the_body_is_refused(loaded):
    data = reqmod(OWN + "Transfer-Encoding: chunked\r\n", b"hello")
    assert data.endswith(b"0\r\n\r\n")
    trailer = data[:-2] + b"X-Checksum: %s\r\n\r\n" % PH.encode()
    assert "placeholder of ANTHROPIC_API_KEY" in refusal(transact(loaded, trailer))
    assert transact(loaded, data[:-2] + b"X-Checksum: 1234\r\n\r\n").startswith(b"ICAP/1.0 204")


def test_the_placeholder_exactly_in_its_header_to_its_host_goes_on_unchanged(loaded):
    assert transact(loaded, reqmod(OWN, None)).startswith(b"ICAP/1.0 204 No Content\r\n")
    assert transact(loaded, reqmod(OWN, b'{"model": "x"}')).startswith(b"ICAP/1.0 204 No Content\r\n")
    clean = "GET http://plain.example.com/x HTTP/1.1\r\nHost: plain.example.com\r\nCookie: sandbox-placeholder-x\r\n"
    assert transact(loaded, reqmod(clean, None)).startswith(b"ICAP/1.0 204")   # another string, not the placeholder
    # outside its paths, or over plain HTTP: refused even in its own header (the key helper's rule)
    assert "sent to path /v2/x" in refusal(transact(loaded, reqmod(OWN.replace("/v1/messages", "/v2/x"), None)))
    assert "sent to http://api.example.com:80" in refusal(transact(loaded, reqmod(OWN.replace("https:", "http:"), None)))


def test_without_a_204_allowed_the_request_is_echoed_byte_for_byte(loaded):
    body = bytes(range(256)) * 2000
    answer = transact(loaded, reqmod(OWN + "Transfer-Encoding: chunked\r\n", body, allow204=False, chunk=65536))
    head = (OWN + "Transfer-Encoding: chunked\r\n\r\n").encode()
    assert answer.startswith(b"ICAP/1.0 200 OK\r\n") and b"Encapsulated: req-hdr=0, req-body=%d\r\n" % len(head) in answer
    echoed = answer.split(b"\r\n\r\n", 1)[1]
    assert echoed.startswith(head)
    stream, got = io.BufferedReader(io.BytesIO(echoed[len(head):])), bytearray()
    while (size := int(stream.readline(), 16)):
        got += stream.read(size)
        assert stream.readline() == b"\r\n"
    assert bytes(got) == body and stream.read() == b"\r\n"


def test_a_body_over_the_limit_is_refused_unchecked_and_the_next_request_is_read(loaded):
    body = b"a" * 101
    data = reqmod(OTHER, body, chunk=50) + reqmod(OWN, None)
    stream, out = io.BufferedReader(io.BytesIO(data)), io.BytesIO()
    assert icap.handle(*loaded, stream, out, 100) and icap.handle(*loaded, stream, out, 100)
    first, second = out.getvalue().split(b"ICAP/1.0 ")[1:]
    assert "request body over 100 bytes: not checked for placeholders" in refusal(b"ICAP/1.0 " + first)
    assert second.startswith(b"204 No Content") and icap._buffered[0] == 0
    assert icap.MAX_BODY == 128 * 1024 * 1024


def test_options_and_an_unknown_method(loaded):
    out = io.BytesIO()
    assert icap.handle(*loaded, io.BufferedReader(io.BytesIO(b"OPTIONS icap://127.0.0.1:1344/reqmod ICAP/1.0\r\n\r\n")), out)
    assert out.getvalue().startswith(b"ICAP/1.0 200 OK\r\nMethods: REQMOD\r\n") and b"Preview" not in out.getvalue()
    out = io.BytesIO()
    assert not icap.handle(*loaded, io.BufferedReader(io.BytesIO(b"RESPMOD icap://x/ ICAP/1.0\r\n\r\n")), out)
    assert out.getvalue().startswith(b"ICAP/1.0 405")


def test_the_service_listens_on_loopback_and_writes_its_pid(tmp_path):
    (tmp_path / "keys").write_text(keys_text())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVICE), str(tmp_path / "keys"), str(port), str(tmp_path / "pid")])
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert int((tmp_path / "pid").read_text()) == proc.pid
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(reqmod(OTHER + "X-Any: " + PH + "\r\n", None) + reqmod(OWN, None))
            conn.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
        assert b"403 Forbidden" in data and data.count(b"ICAP/1.0 ") == 2 and b"ICAP/1.0 204" in data
    finally:
        proc.kill()
        proc.wait()


# ---- squid.conf, the audit and `sandbox check`

def test_squid_sends_every_request_read_in_clear_to_the_service_and_fails_closed():
    config = plan().proxy.config
    assert "icap_service sandbox_keys_icap reqmod_precache icap://127.0.0.1:1344/reqmod bypass=0\n" in config
    assert "icap_preview_enable off\n" in config and "respmod" not in config
    assert config.index("adaptation_access sandbox_keys_icap deny keys_connect\n") < \
        config.index("adaptation_access sandbox_keys_icap allow all\n")
    assert "%#{X-Sandbox-Reason}adapt::<last_h %err_code\n" in config
    # no protocol upgrade (WebSocket, ...) is forwarded: after one, frames would pass the service unseen
    assert "http_upgrade_request_protocols" not in config
    unbound = plan(BASE.split("secrets:")[0]).proxy.config
    assert "icap" not in unbound and "adapt::" not in unbound


def test_the_audit_reads_the_services_reason_as_a_refusal():
    line = ("SANDBOX-EGRESS 1700000000 POST other.example.com 443 403 TCP_MISS - bump /v1/x - "
            + quote("refused: placeholder of K in the request body", safe="") + " -\n")
    event, = audit.parse_log(line)
    assert event.reason == "refused: placeholder of K in the request body" and event.decision == "refused"
    helper = "SANDBOX-EGRESS 1700000000 GET a.example.com 443 403 TCP_DENIED - bump /x refused%3A%20x - ERR_X\n"
    assert audit.parse_log(helper)[0].reason == "refused: x"
    gone = "SANDBOX-EGRESS 1700000000 GET a.example.com 443 500 NONE_NONE - bump /x - - ERR_ICAP_FAILURE\n"
    assert audit.parse_log(gone)[0].message == "refused: the key ICAP service did not answer"
    assert audit.parse_log(gone)[0].decision == "refused"
    allowed = "SANDBOX-EGRESS 1700000000 GET a.example.com 443 403 TCP_MISS - bump /x - - -\n"
    assert audit.parse_log(allowed)[0].decision == "allowed"   # the upstream's own 403


def test_check_warns_about_a_tunnel_beside_a_bound_key(tmp_path):
    from test_cli_inputs import run_process

    (tmp_path / "p.yaml").write_text(BASE)
    done = run_process("check", "./p.yaml", cwd=tmp_path)
    said = "plain.example.com is a tunnel (nothing decrypted): a placeholder of a bound key (ANTHROPIC_API_KEY)"
    assert "warning: network.allow[2]: " + said in done.stdout and done.stdout.count("placeholder of a bound") == 1
    assert '"code": "egress-keys-tunnel"' in run_process("check", "./p.yaml", "--json", cwd=tmp_path).stdout
    (tmp_path / "p.yaml").write_text(BASE.replace("    - plain.example.com\n", "    - 'plain.example.com:80'\n"))
    assert "placeholder of a bound" not in run_process("check", "./p.yaml", cwd=tmp_path).stdout


def test_small_bodies_go_on_beside_a_large_one_and_the_budget_holds(loaded):
    """Each body counts against BUDGET by what it holds so far, not by the most it could hold: a
    request with a small body beside one of 128 MiB in flight is checked; one that would take
    the bytes buffered past BUDGET is refused (try again) and gives back what it held."""
    assert icap._reserve(icap.MAX_BODY)   # a large body being read by another connection
    try:
        assert transact(loaded, reqmod(OTHER, b'{"small": 1}')).startswith(b"ICAP/1.0 204")
        assert "placeholder of ANTHROPIC_API_KEY" in refusal(transact(loaded, reqmod(OTHER, PH.encode())))
        body = b"a" * (icap.BUDGET - icap.MAX_BODY + 10)
        assert refusal(transact(loaded, reqmod(OTHER, body, chunk=1 << 20))) == \
            "refused: other large request bodies are being checked: try again"
        assert icap._buffered[0] == icap.MAX_BODY
    finally:
        icap._release(icap.MAX_BODY)
    assert icap._buffered[0] == 0
