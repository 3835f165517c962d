"""Secrets the egress proxy injects: each becomes a plain-HTTP endpoint on the proxy that forwards to
one upstream and adds one header. The value itself reaches only the proxy, at launch time."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.policy import keybind
from launcher.policy.allowlist import parse_rule
from launcher.policy.secrets import secret_name

ENDPOINT_PREFIX = "SANDBOX_ENDPOINT_"
FIRST_PORT = 3130              # secret i (0-based) is served on FIRST_PORT + i
PROXY_VAR = "SANDBOX_SECRET_"  # the proxy container's variable carrying secret i: SANDBOX_SECRET_<i>
CA_VAR = "SANDBOX_CA_"          # ... and secret i's CA bundle (base64), written to CA_PATH by its start script
CA_PATH = "/run/squid/ca-%d.pem"
CA_MAX_BYTES = 256 * 1024
_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
_UPSTREAM = re.compile(r"^(https?)://([^/?#@\s]+?)(?::([0-9]{1,5}))?/?$")
# Squid reads the header value as a quoted string with logformat %codes: no quotes or backslashes,
# and the template text is written with % doubled.
_SAFE_TEXT = re.compile(r'^[\x20-\x7e]*$')


@dataclass(frozen=True, kw_only=True)
class Upstream:
    scheme: str
    host: str
    port: int


def parse_upstream(url: str, ip_literals: bool) -> Upstream:
    """scheme://host[:port] with nothing else; raises ValueError saying what is wrong."""
    match = _UPSTREAM.match(url)
    if not match:
        raise ValueError("http(s)://host[:port] without path, query or user")
    scheme, host, port = match.groups()
    number = int(port) if port else (443 if scheme == "https" else 80)
    rule = parse_rule(f"{host}:{number}", ip_literals)   # the same host rules as network.allow
    if rule.wildcard:
        raise ValueError("one exact host, not a wildcard")
    return Upstream(scheme=scheme, host=rule.host, port=number)


def split_header(header: str) -> tuple[str, str]:
    """('Authorization', 'Bearer {value}') from 'Authorization: Bearer {value}'."""
    name, _, template = header.partition(": ")
    return name, template


# A login's value comes with more than one header: what the reader (launcher/agents/chatgpt.py) gives
# besides the bearer, each in its own proxy variable SANDBOX_SECRET_<i>_<n> (n from 1).
LOGIN_HEADERS = {"codex-chatgpt": ("chatgpt-account-id",)}


def login_headers(login: str, index: int) -> tuple[tuple[str, str], ...]:
    """(header name, proxy variable) of a login's further headers."""
    return tuple((name, f"{PROXY_VAR}{index}_{n}") for n, name in enumerate(LOGIN_HEADERS.get(login, ()), 1))


def endpoint_var(name: str) -> str:
    return ENDPOINT_PREFIX + name.upper()


def header_problems(header: str) -> str | None:
    name, template = split_header(header)
    if not re.fullmatch(r"[A-Za-z0-9-]+", name) or name.lower() in ("host", "content-length", "transfer-encoding"):
        return "a header name such as Authorization or x-api-key"
    rest = template.replace("{value}", "", 1)
    if template.count("{value}") != 1 or not _SAFE_TEXT.match(template) or any(c in rest for c in '"\\{}'):
        return "printable text with {value} exactly once and no quote, backslash or other brace"
    return None


def problems(secrets: list[dict], network: dict, inherited_allow: bool = False) -> list[tuple[str, str, str, str]]:
    """(key path, expected, found, hint) for every secrets entry the schema could not refuse
    (inherited_allow: a layer's, whose bound hosts are judged on the combined policy)."""
    out, seen = [], {}
    for i, entry in enumerate(secrets):
        at = f"secrets[{i}]"
        if network["mode"] != "proxy":
            out.append((at, "network.mode proxy", f"mode {network['mode']}",
                        "the proxy injects secrets; set network: {mode: proxy}"))
        if bool(entry["env"]) == bool(entry["file"]):
            out.append((at, "exactly one of env and file", "both" if entry["env"] else "neither",
                        "env: MODEL_API_KEY reads the host variable; file: ~/.config/model/key reads a file"))
        if entry["name"] in seen:
            out.append((f"{at}.name", "a name used once", repr(entry["name"]), f"also used by {seen[entry['name']]}"))
        seen.setdefault(entry["name"], at)
        if keybind.given(entry.get("bind") or {}):
            out += _bind_problems(i, entry, network, inherited_allow)
            continue
        if not entry["upstream"]:
            out.append((at, "exactly one of upstream and bind", "neither",
                        "upstream: https://api.example.com serves an endpoint; bind: {host: api.example.com} a placeholder"))
            continue
        if secret_name(endpoint_var(entry["name"])):
            out.append((f"{at}.name", "a name whose endpoint variable does not look like a secret",
                        f"{entry['name']!r} ({endpoint_var(entry['name'])})",
                        "the probe refuses secret-shaped variables in the sandbox; name it after the service, e.g. model"))
        try:
            parse_upstream(entry["upstream"], network["allow_ip_literals"])
        except ValueError as exc:
            out.append((f"{at}.upstream", str(exc), repr(entry["upstream"]), "for example https://api.example.com"))
        if entry["ca_file"] and not entry["upstream"].startswith("https://"):
            out.append((f"{at}.ca_file", "an https:// upstream", f"upstream {entry['upstream']!r}",
                        "the proxy checks the upstream's certificate only over TLS: use https:// or drop ca_file"))
        elif "\0" in entry["ca_file"] or "\n" in entry["ca_file"]:
            out.append((f"{at}.ca_file", "a file path", repr(entry["ca_file"]), "for example ~/certs/company-ca.pem"))
        expected = header_problems(entry["header"])
        if expected:
            out.append((f"{at}.header", expected, repr(entry["header"]), "for example 'Authorization: Bearer {value}'"))
    return out


def _bind_problems(i: int, entry: dict, network: dict, inherited_allow: bool) -> list[tuple[str, str, str, str]]:
    from launcher.policy.httprules import RuleError

    try:
        bind = keybind.parse_bind(entry["bind"], entry["env"])
    except RuleError as exc:
        return [(f"secrets[{i}]{exc.path}", str(exc), exc.found,
                 "for example bind: {host: api.anthropic.com, paths: [/v1/], variable: ANTHROPIC_API_KEY}")]
    out = []
    expected = header_problems(entry["header"])
    if expected:
        out.append((f"secrets[{i}].header", expected, repr(entry["header"]), "for example 'Authorization: Bearer {value}'"))
    allow = []
    for rule in network["allow"]:
        try:
            allow.append(parse_rule(rule, network["allow_ip_literals"]))
        except ValueError:
            pass   # said at network.allow[...]
    return out + keybind.problems(i, entry, bind, None if inherited_allow else allow)


def squid_value(value: str) -> str:
    """A secret as it may appear inside Squid's quoted header value, or ValueError."""
    # Squid reads `{...}` after a format code as its argument, even after an escaped %%: a brace
    # would change what the header says (found by a test), so it is refused like a quote.
    if not value or not _SAFE_TEXT.match(value) or any(c in value for c in '"\\{}'):
        raise ValueError("an empty value, or one with a quote, backslash, brace or non-printable character")
    return value.replace("%", "%%")


def ca_bundle(data: bytes) -> str:
    """The certificates of a CA file (PEM), nothing else from it; ValueError says what is wrong."""
    import ssl

    if len(data) > CA_MAX_BYTES:
        raise ValueError(f"more than {CA_MAX_BYTES // 1024} KiB")
    text = data.decode("ascii", errors="replace")
    if "PRIVATE KEY-----" in text:
        raise ValueError("a private key, which is a secret (it is not copied anywhere)")
    blocks = _CERT.findall(text)
    if not blocks:
        raise ValueError("no -----BEGIN CERTIFICATE----- block")
    pem = "\n".join(blocks) + "\n"
    try:   # in memory: only a bundle OpenSSL reads can reach the proxy
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise ValueError(f"a certificate OpenSSL cannot read ({exc.reason or exc})") from None
    return pem
