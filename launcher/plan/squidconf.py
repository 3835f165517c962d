"""The egress proxy's Squid configuration, rendered at compile time from a jinja2 template
(squid.conf.j2 beside this file): the allow rules and the injected secrets' endpoints. The plan's
proxy types and constants (ProxySpec, PROXY_ALIAS, INTERNAL_OPTIONS, ...) are launcher/plan/plan.py's."""

from __future__ import annotations

import re

from launcher.plan.plan import PROXY_ALIAS, PROXY_PORT, EgressRule, SecretEndpoint
from launcher.policy.allowlist import AllowRule
from launcher.policy.inject import CA_PATH


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


def render_squid(sandbox: str, rules: tuple[AllowRule, ...], port: int = PROXY_PORT,
                 secrets: tuple[SecretEndpoint, ...] = ()) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("launcher.plan", "."), undefined=StrictUndefined,
                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    http = [r for r in rules if r.http]
    context = [{"acl": _acl(r), "sni_acl": _sni_acl(r), "ports": " ".join(map(str, r.ports)), "private": r.private,
                "index": i, "text": str(r), **_http(r, http, len(secrets))} for i, r in enumerate(rules, 1)]
    endpoints = [_endpoint(i, s) for i, s in enumerate(secrets)]
    return env.get_template("squid.conf.j2").render(sandbox=sandbox, rules=context, port=port, bind=PROXY_ALIAS,
                                                    endpoints=endpoints, bump=bool(http))


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


def rules_in_force(rules: tuple[AllowRule, ...]) -> tuple[EgressRule, ...]:
    """Each allow rule as the proxy enforces it: a tunnel (host and port), or intercepted (methods
    and path prefixes, enforced or audited)."""
    return tuple(EgressRule(host=f"*.{r.host}" if r.wildcard else r.host, ports=r.ports, private=r.private,
                            **({"methods": r.http.methods, "paths": r.http.paths, "mode": r.http.mode,
                                "enforcer": "proxy (intercepted)"} if r.http else {}))
                 for r in rules)
