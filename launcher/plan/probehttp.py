"""What the probe tries for rules per request (network.allow[].http), from the plan alone: a TLS
ClientHello through the proxy to an intercepted host (the answer must carry this sandbox's CA), requests
the proxy itself must refuse (a method and a path no rule allows), and a tunnel host that must not be
intercepted. The ClientHello is built here (TLS 1.2, so the certificate is readable in the clear) and
handed to the probe as printf octal escapes: its busybox has no TLS of its own."""

from __future__ import annotations

import re
import struct

from launcher.policy.allowlist import AllowRule
from launcher.policy import keybind
from launcher.policy.httprules import under

PROBE_LABEL = "sandbox-probe"   # the label a wildcard rule's probe name starts with
OUTSIDE = "/sandbox-probe-outside"
KEY_PATH = "/sandbox-probe-key"   # the path of the probe's request carrying a bound key's placeholder
METHOD_PROBE = "sandbox-probe-method"   # the last segment of the probe's refused-method request


def client_hello(host: str) -> bytes:
    """A TLS 1.2 ClientHello for `host` (SNI), with the suites and groups OpenSSL 3 servers take."""
    def ext(kind: int, body: bytes) -> bytes:
        return struct.pack(">HH", kind, len(body)) + body

    name = host.encode("ascii")
    algorithms = bytes.fromhex("040305030603080408050806040105010601")
    extensions = (ext(0, struct.pack(">HBH", len(name) + 3, 0, len(name)) + name)
                  + ext(10, struct.pack(">H", 6) + bytes.fromhex("001d00170018")) + ext(11, b"\x01\x00")
                  + ext(13, struct.pack(">H", len(algorithms)) + algorithms) + ext(23, b"") + ext(0xFF01, b"\x00"))
    suites = bytes.fromhex("c02bc02fc02cc030cca9cca8c009c013c00ac014009c009d002f0035")
    body = (b"\x03\x03" + bytes(range(32)) + b"\x00" + struct.pack(">H", len(suites)) + suites + b"\x01\x00"
            + struct.pack(">H", len(extensions)) + extensions)
    handshake = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(handshake)) + handshake


def octal(data: bytes) -> str:
    return "".join(f"\\{b:03o}" for b in data)


def _name(rule: AllowRule) -> str:
    return f"{PROBE_LABEL}.{rule.host}" if rule.wildcard else rule.host


def _tls_port(rule: AllowRule) -> int:
    return 443 if 443 in rule.ports else rule.ports[-1]


def expectations(rules: tuple[AllowRule, ...]) -> dict[str, object]:
    """The probe's keys for rules per request (none without an http: rule): bump/bumphello, refuse,
    tunnel/tunnelhello; each "-" or () when there is nothing to try (the check is then not asked for:
    checks_for)."""
    http = [r for r in rules if r.http]
    if not http:
        return {}
    first = http[0]
    found: dict[str, object] = {"bump": f"{_name(first)}:{_tls_port(first)}",
                                "bumphello": octal(client_hello(_name(first)))}
    refuse = []
    for rule in (r for r in http if r.http.mode == "enforce"):
        target = f"{_name(rule)}:{_tls_port(rule)}"
        method = next((m for m in ("POST", "DELETE", "PUT", "PATCH") if m not in rule.http.methods), "")
        prefix = rule.http.paths[0].rstrip("/")
        if method and not re.fullmatch(r"[A-Za-z0-9/._~-]*", prefix):
            method = ""   # a prefix the probe's argument cannot carry: the path request alone
        if method:
            refuse.append(f"{method}@{target}{prefix}/{METHOD_PROBE}")
        if not any(under(OUTSIDE, p) for p in rule.http.paths):
            refuse.append(f"{rule.http.methods[0]}@{target}{OUTSIDE}")
        if refuse:
            break
    found["refuse"] = tuple(refuse)
    tunnel = next((r for r in rules if not r.http and not r.ip and not r.wildcard), None)
    if tunnel:
        found.update(tunnel=f"{tunnel.host}:{_tls_port(tunnel)}", tunnelhello=octal(client_hello(tunnel.host)))
    return found


def key_expectations(rules: tuple[AllowRule, ...], secrets) -> dict[str, str]:
    """keyrefuse= for a plan with keys bound to their destination (none without): the first key's
    header, "@", and another allowed destination than its host (else its host over plain HTTP),
    where the probe sends that key's placeholder (from keyvars=) and the proxy must refuse it."""
    key = next((s for s in secrets if s.bind), None)
    if key is None:
        return {}
    other = next((r for r in rules if not r.ip and (r.wildcard or r.host != key.host)), None)
    target = f"{_name(other)}:{_tls_port(other)}" if other else f"{key.host}:80"
    # the key's own host, method and path, its placeholder in a header the key helper is not handed
    # (HIDDEN_HEADER): allowed by every rule, only the key ICAP service refuses it (egress.key_hidden)
    serving = keybind.serving(key.bind, rules)
    hidden = {"keyhidden": f"{serving[0].http.methods[0]}@{key.host}:{key.upstream_port}"
                           f"{key.bind.paths[0].rstrip('/')}{KEY_PATH}"} if serving else {}
    return {"keyrefuse": f"{key.header}@{target}{KEY_PATH}", **hidden}


def checks_for(found: dict[str, object]) -> tuple[str, ...]:
    """The rules-per-request checks these expectations give the probe something to try for."""
    if not found:
        return ()
    return ("egress.bump_ca",) + (("egress.http_refused",) if found.get("refuse") else ()) \
        + (("egress.tunnel",) if found.get("tunnel", "-") != "-" else ()) \
        + (("egress.key_refused",) if found.get("keyrefuse") else ()) \
        + (("egress.key_hidden",) if found.get("keyhidden") else ())

