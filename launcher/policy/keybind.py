"""Keys bound to their destination (`secrets[].bind`): the agent gets a placeholder in its usual
variable, and the proxy, which intercepts the key's host (a network.allow rule with http:), swaps
it for the real key only in HTTPS requests to that host and port, under the binding's paths, in
the secret's header. A request carrying the placeholder anywhere else is refused with 403 and
logged (images/proxy/sandbox-keys), never forwarded as it is. The value reaches only the proxy,
by the endpoint way's path (SANDBOX_SECRET_<i>)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from urllib.parse import quote

from launcher.policy.allowlist import DEFAULT_PORTS, parse_rule
from launcher.policy.httprules import RuleError, normalise, under
from launcher.policy.model import KeyBinding

PREFIX = "sandbox-placeholder-"
_KEYS = ("host", "paths", "variable")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# What may stand around {value} in a bound key's header: the swap compares the whole value, and
# Squid's req_header ACL gets it as a regular expression built from these characters alone.
_FORM = re.compile(r"^[A-Za-z0-9 _=:,;/.+-]*$")
# Variables the launcher sets itself: a placeholder never replaces them.
RESERVED = ("HOME", "PATH", "USER", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy")


# Where the key helper looks for a placeholder besides the URL: these headers and each bound key's
# own (Squid hands an ACL helper named headers only). Every header and the whole body are searched
# after it by the key ICAP service (images/proxy/sandbox-icap); only a CONNECT tunnel goes unseen.
SEEN_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "x-auth-token",
                "x-access-token", "private-token", "cookie")


def seen_headers(headers) -> tuple[str, ...]:
    """SEEN_HEADERS and the bound keys' own header names, lower case, each once."""
    return tuple(dict.fromkeys(SEEN_HEADERS + tuple(h.lower() for h in headers)))


def placeholder(seed: str, name: str) -> str:
    """The placeholder of secret `name` in one sandbox (seed: the launch's nonce, or for files
    another tool starts the policy's digest and the sandbox's name): worthless outside its proxy."""
    return PREFIX + hashlib.sha256(f"{seed}\0{name}".encode()).hexdigest()[:32]


def parse_bind(entry, env: str) -> KeyBinding:
    """A secrets entry's `bind:` mapping; raises RuleError with the key path below the entry."""
    if not isinstance(entry, dict) or set(entry) - set(_KEYS) or not isinstance(entry.get("host"), str):
        extra = sorted(set(entry) - set(_KEYS)) if isinstance(entry, dict) else []
        raise RuleError("{host: api.example.com, paths: [/v1/], variable: EXAMPLE_API_KEY}", ".bind",
                        f"unknown key {extra[0]!r}" if extra else repr(entry))
    if not entry["host"]:
        raise RuleError("the host the key goes to", ".bind.host", "none")
    try:
        rule = parse_rule(entry["host"])
    except ValueError as exc:
        raise RuleError(f"an exact host name, optionally with :port ({exc})", ".bind.host", repr(entry["host"])) from None
    if rule.wildcard:
        raise RuleError("one exact host, not a wildcard: the key goes to that host alone", ".bind.host",
                        repr(entry["host"]))
    paths = entry.get("paths", ["/"])
    if not isinstance(paths, list) or not paths:
        raise RuleError("a non-empty list of path prefixes", ".bind.paths", repr(paths))
    for i, path in enumerate(paths):
        if not isinstance(path, str) or not path.startswith("/") or normalise(path) != (path.rstrip("/") or "/") \
                or re.search(r"[\s%;?#]", path):
            raise RuleError("a plain path prefix starting with / (no dot segments, doubled slashes, %-escapes, ;, ? "
                            "or spaces)", f".bind.paths[{i}]", repr(path))
    variable = entry.get("variable") or env
    if not isinstance(variable, str) or not _VARIABLE.match(variable) or variable in RESERVED \
            or variable.startswith("SANDBOX_"):
        raise RuleError("the agent's variable for the placeholder: letters, digits and _, not one the launcher sets",
                        ".bind.variable", repr(variable) if variable else "none (the key is read from a file)")
    port = 443 if rule.ports == DEFAULT_PORTS else rule.ports[0]
    return KeyBinding(host=rule.host, port=port, paths=tuple(dict.fromkeys(paths)), variable=variable)


def given(bind: dict) -> bool:
    """Whether a secrets entry's `bind:` (its schema defaults filled in) says anything."""
    return bool(bind) and (bool(bind.get("host")) or bind.get("paths", ["/"]) != ["/"] or bool(bind.get("variable")))


def serving(bind: KeyBinding, allow) -> list:
    """The allow rules that intercept a binding's host and port (exact host, http: rules)."""
    return [r for r in allow if r.http and not r.wildcard and r.host == bind.host and bind.port in r.ports]


def problems(index: int, entry: dict, bind: KeyBinding, allow: list | None) -> list[tuple[str, str, str, str]]:
    """(key path, expected, found, hint) for a bound secret whose binding the rest of the policy
    cannot serve: its host must be intercepted (allow None: a layer's, judged when combined), its
    header a form the swap can compare."""
    at, out = f"secrets[{index}]", []
    if entry["upstream"] or entry["ca_file"]:
        key = "upstream" if entry["upstream"] else "ca_file"
        out.append((f"{at}.{key}", "no upstream or ca_file with bind (the key goes to the bound host itself)",
                    repr(entry[key]), "a bound host's certificate is checked by its network.allow rule (http.ca_file)"))
    rules = serving(bind, allow) if allow is not None else [None]
    if not rules:
        hint = (f"add {{host: {bind.host}{'' if bind.port == 443 else f':{bind.port}'}, http: {{methods: [GET, POST]}}}} "
                "to network.allow: only an intercepted host lets the proxy see the placeholder")
        out.append((f"{at}.bind.host", "a host with http: rules in network.allow (TLS terminated by the proxy)",
                    f"{bind.host}:{bind.port}" + (" (a plain tunnel: nothing decrypted)"
                                                  if any(r.matches(bind.host, bind.port) for r in allow) else " (not allowed)"),
                    hint))
    elif allow is not None and not any(all(any(under(p, q) for q in r.http.paths) for p in bind.paths) for r in rules):
        out.append((f"{at}.bind.paths", "paths the host's http: rule allows", ", ".join(bind.paths),
                    f"the rule allows {', '.join(rules[0].http.paths)}"))
    name, _, form = entry["header"].partition(": ")
    if not _FORM.match(form.replace("{value}", "")):
        out.append((f"{at}.header", "a bound key's header form: {value} alone, or with a plain prefix such as "
                    "'Bearer ' (letters, digits, space and _=:,;/.+-)", repr(entry["header"]),
                    "'Authorization: Bearer {value}', 'x-api-key: {value}' or 'X-Named-Header: {value}'"))
    return out


def bound_value(template: str, value: str) -> str:
    return template.replace("{value}", value, 1)


def squid_regex(text: str) -> str:
    """`text` as one whole-value POSIX regular expression Squid reads as a single token (a space is
    [[:space:]]: the helper has already refused every value but the exact one)."""
    return "^" + "".join(c if c.isalnum() else "[[:space:]]" if c == " " else f"[{c}]" for c in text) + "$"


def keys_file(headers: tuple[str, ...], lines: list[str]) -> str:
    """The helper's file: "headers NAME ..." (the order of Squid's fields after the URL), then a line per key."""
    return f"headers {' '.join(headers)}\n" + "".join(lines)


def keys_line(bind: KeyBinding, placeholder: str, header: str, form: str) -> str:
    """The helper's line for one key (images/proxy/sandbox-keys):
    "VARIABLE PLACEHOLDER HEADER FORM(%-encoded, the placeholder in it) HOST PORT PATH ..."."""
    return (f"{bind.variable} {placeholder} {header.lower()} {quote(form, safe='')} {bind.host} {bind.port} "
            f"{' '.join(bind.paths)}\n")


def meet_secret(a, b):
    """Two layers' entries of one secret as a layer leaves it: the same entry, its binding narrowed
    (meet), or None (different, or a binding moved)."""
    if a.bind is None and b.bind is None:
        return a if a == b else None
    if replace(a, bind=None) != replace(b, bind=None):
        return None
    bind = meet(a.bind, b.bind)
    return replace(a, bind=bind) if bind else None


def meet(a: KeyBinding | None, b: KeyBinding | None) -> KeyBinding | None | bool:
    """What two layers' bindings of one secret both allow: the same host, port and variable with
    the paths under both (False: none, or a binding moved); None when neither binds."""
    if a is None or b is None:
        return None if a is b else False
    if (a.host, a.port, a.variable) != (b.host, b.port, b.variable):
        return False
    paths = tuple(dict.fromkeys([p for p in a.paths if any(under(p, q) for q in b.paths)]
                                + [q for q in b.paths if any(under(q, p) for p in a.paths)]))
    return KeyBinding(host=a.host, port=a.port, paths=paths, variable=a.variable) if paths else False
