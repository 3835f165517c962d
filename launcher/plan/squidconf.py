"""The egress proxy's Squid configuration, rendered at compile time from a jinja2 template
(squid.conf.j2 beside this file): the allow rules and the injected secrets' endpoints. The plan's
proxy types and constants (ProxySpec, PROXY_ALIAS, ...) are launcher/plan/plan.py's.

A rendering is kept by its exact input (the template's text and every value it is given, the
sandbox's name aside, which goes in afterwards), one small file each in the package's
`__pycache__`, where Python keeps this module's bytecode (trusted alike: whoever can write one can
write the other; `sys.pycache_prefix` and `PYTHONDONTWRITEBYTECODE` are honoured as Python honours
them): importing jinja2 and compiling the template cost a proxy-mode start ~50 ms, reading the kept
text well under one. The same input always renders the same text, so what the proxy enforces is
decided by the input alone, exactly as without the files."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

from launcher.plan.plan import PROXY_ALIAS, PROXY_PORT, EgressRule, SecretEndpoint
from launcher.policy.allowlist import AllowRule
from launcher.policy import inject, keybind
from launcher.policy.inject import CA_PATH
from launcher.policy.model import SecretPolicy


def _pattern(rule: AllowRule) -> str:
    # Any name below the suffix, never the suffix itself (Squid's ".suffix" would match both).
    return "^([a-z0-9-]+\\.)+" + re.escape(rule.host).replace("\\-", "-") + "$"


def _acl(rule: AllowRule) -> str:
    if rule.wildcard:
        return "dstdom_regex -n -i " + _pattern(rule)  # -n: an IP literal is not reverse-resolved (hung here)
    return f"dstdomain -n {rule.host}"  # -n: compare the name as written, no reverse lookups


def _sni_acl(rule: AllowRule) -> str:
    # --client-requested: the name the client sent (SNI), whatever the server's certificate says.
    if rule.wildcard:
        return "ssl::server_name_regex --client-requested -i " + _pattern(rule)
    return f"ssl::server_name --client-requested {rule.host}"


def _endpoint(index: int, s: SecretEndpoint) -> dict:
    # The value is filled in by the proxy's start script from s.var; % is doubled (logformat codes).
    value = s.template.replace("%", "%%").replace("{value}", f"@{s.var}@")
    headers = [{"name": s.header, "value": value}] + [{"name": name, "value": f"@{var}@"} for name, var in s.extra]
    return {"id": f"secret{index}", "bind": PROXY_ALIAS, "port": s.port, "host": s.host, "upstream_port": s.upstream_port,
            "tls": s.scheme == "https", "headers": headers, "path": s.path,
            "cafile": CA_PATH % index if s.ca_pem else ""}


TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "squid.conf.j2")
NAME = "\0sandbox\0"   # the sandbox's name while rendering: no policy value holds a NUL
KEPT = 64               # renderings kept; past that the oldest go


def render_squid(sandbox: str, rules: tuple[AllowRule, ...], port: int = PROXY_PORT,
                 secrets: tuple[SecretEndpoint, ...] = ()) -> str:
    http = [r for r in rules if r.http]
    context = [{"acl": _acl(r), "sni_acl": _sni_acl(r), "ports": " ".join(map(str, r.ports)), "private": r.private,
                "index": i, "text": str(r), **_http(r, http, len(secrets))} for i, r in enumerate(rules, 1)]
    endpoints = [_endpoint(i, s) for i, s in enumerate(secrets) if not s.bind]
    return _rendered(dict(sandbox=NAME, rules=context, port=port, bind=PROXY_ALIAS, endpoints=endpoints, bump=bool(http),
                          keys=[_key(i, s) for i, s in enumerate(secrets) if s.bind],
                          seen=list(keybind.seen_headers(s.header for s in secrets if s.bind)))).replace(NAME, sandbox)


def _rendered(values: dict) -> str:
    """The template rendered with `values` (plain data only): kept, or rendered now and kept."""
    with open(TEMPLATE, encoding="utf-8") as source:
        template = source.read()
    key = hashlib.sha256(f"{template}\0{json.dumps(values, sort_keys=True)}".encode()).hexdigest()
    folder = kept_folder()
    path = os.path.join(folder, f"{key}.conf") if folder else ""
    try:
        with open(path, encoding="utf-8") as kept:
            text = kept.read()
        if text.startswith(f"{key}\n"):   # a whole file of this key (written in one rename)
            return text[len(key) + 1:]
    except (OSError, ValueError):
        pass
    from jinja2 import Environment, StrictUndefined

    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                      autoescape=False)
    text = env.from_string(template).render(**values)
    if folder and not sys.dont_write_bytecode:
        _keep(folder, path, f"{key}\n{text}")
    return text


def kept_folder() -> str:
    """Where the renderings are kept: beside this module's bytecode ("" where Python keeps none)."""
    from importlib.util import cache_from_source

    try:
        return os.path.join(os.path.dirname(cache_from_source(os.path.abspath(__file__))), "squid-conf")
    except (NotImplementedError, ValueError):
        return ""


def _keep(folder: str, path: str, text: str) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, exist_ok=True)
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)   # whole or not at all, also with many launchers at once
        names = [n for n in os.listdir(folder) if n.endswith(".conf")]
        if len(names) > KEPT:
            by_age = sorted(names, key=lambda n: os.stat(os.path.join(folder, n)).st_mtime)
            for name in by_age[:len(names) - KEPT]:
                os.unlink(os.path.join(folder, name))
    except OSError:   # a read-only install: every proxy-mode compile renders, as without the files
        try:
            os.unlink(temporary)
        except OSError:
            pass


def _key(index: int, s: SecretEndpoint) -> dict:
    """A key bound to its destination: the ACLs that find its placeholder, exactly, in its header of
    an HTTPS request to its host and port (the helper has refused it anywhere else), and the value
    the proxy's start script fills in from s.var."""
    value = keybind.bound_value(s.template.replace("%", "%%"), f"@{s.var}@")
    return {"id": f"key{index}", "host": s.host, "port": s.upstream_port, "header": s.header,
            "sent": keybind.squid_regex(keybind.bound_value(s.template, s.placeholder)), "value": value}


def _http(rule: AllowRule, http: list[AllowRule], cas: int) -> dict:
    """A rule's part of the rules per request: its line in the helper's file, and the cache_peer
    that checks its host's certificate against its own CA file (the proxy's SANDBOX_CA_<i>, after
    the secrets' own)."""
    if not rule.http:
        return {"http": None, "peer": ""}
    index = http.index(rule)
    with_ca = [r for r in http if r.http.ca_file]
    peer = {"peer": rule.host, "peer_port": max(rule.ports), "cafile": CA_PATH % (cas + with_ca.index(rule))} \
        if rule.http.ca_file else {"peer": ""}
    return {"http": index, **peer}


def http_rules_file(rules: tuple[AllowRule, ...]) -> str:
    """The rule helper's file (images/proxy/sandbox-http-rules): "MODE METHOD,... PREFIX ..." per rule with http:."""
    return "".join(f"{r.http.mode} {','.join(r.http.methods)} {' '.join(r.http.paths)}\n" for r in rules if r.http)


def keys_file(secrets: tuple[SecretEndpoint, ...]) -> str:
    """The key helper's file (images/proxy/sandbox-keys) for the keys bound to their destination; "" none."""
    bound = [s for s in secrets if s.bind]
    if not bound:
        return ""
    return keybind.keys_file(keybind.seen_headers(s.header for s in bound),
                             [keybind.keys_line(s.bind, s.placeholder, s.header,
                                                keybind.bound_value(s.template, s.placeholder)) for s in bound])


def secret_endpoint(index: int, secret: SecretPolicy, ip_literals: bool, cas: dict[str, tuple[str, str]],
                    seed: str) -> SecretEndpoint:
    """A policy's secret as the proxy serves it (seed: what its placeholder is made from, if bound)."""
    header, template = inject.split_header(secret.header)
    common = dict(name=secret.name, var=f"{inject.PROXY_VAR}{index}", from_env=secret.env, from_file=secret.file,
                  header=header, template=template)
    if secret.bind:   # no endpoint (port 0): the proxy swaps the placeholder in requests to the bound host
        return SecretEndpoint(**common, port=0, scheme="https", host=secret.bind.host, upstream_port=secret.bind.port,
                              bind=secret.bind, placeholder=keybind.placeholder(seed, secret.name))
    upstream = inject.parse_upstream(secret.upstream, ip_literals)
    ca_file, ca_pem = cas.get(secret.ca_file, ("", ""))
    return SecretEndpoint(**common, port=inject.FIRST_PORT + index, scheme=upstream.scheme, host=upstream.host,
                          upstream_port=upstream.port, ca_file=ca_file, ca_pem=ca_pem, login=secret.login,
                          path=secret.path, extra=inject.login_headers(secret.login, index))


def rules_in_force(rules: tuple[AllowRule, ...]) -> tuple[EgressRule, ...]:
    """Each allow rule as the proxy enforces it: a tunnel (host and port), or intercepted (methods
    and path prefixes, enforced or audited)."""
    return tuple(EgressRule(host=f"*.{r.host}" if r.wildcard else r.host, ports=r.ports, private=r.private,
                            **({"methods": r.http.methods, "paths": r.http.paths, "mode": r.http.mode,
                                "enforcer": "proxy (intercepted)"} if r.http else {}))
                 for r in rules)
