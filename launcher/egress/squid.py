"""Proxy-mode pieces of a plan: the Squid configuration (rendered from a jinja2 template) and the
sandbox network's options. The plan's types (NetworkSpec, ProxySpec, SecretEndpoint) are launcher/plan.py's."""

from __future__ import annotations

import re

from launcher.allowlist import AllowRule
from launcher.inject import CA_PATH
from launcher.plan import SecretEndpoint

PROXY_ALIAS = "sandbox-proxy"
PROXY_PORT = 3128
# A name that no allow-list may contain (.invalid is reserved): the probe expects a 403 for it.
PROBE_DENIED_HOST = "denied.sandbox-probe.invalid"


# The sandbox's only network. inhibit_ipv4 keeps the gateway address off the host's bridge, so
# the sandbox cannot reach services on the host through it (a plain --internal network can).
# A large MTU: it leads nowhere but to the proxy, and Squid writes plain-HTTP bodies 4 KB at a
# time, each one packet then instead of three (bench/squid.py: plain ~0.22 -> ~0.28 of direct).
INTERNAL_OPTIONS = (("com.docker.network.bridge.inhibit_ipv4", "true"), ("com.docker.network.driver.mtu", "65000"))

# The sandbox's neighbour discovery on that network, in its own namespace: an address nobody owns
# (the gateway, which inhibit_ipv4 leaves ownerless, and through it every outside address) fails at
# once with "No route to host" after two ARP requests 20 ms apart, instead of after 3 s. The probe's
# egress.direct then gets connect()'s own refusal in ~50 ms rather than waiting out its 1 s window
# (which stays, for runtimes that do not take these: gVisor's netstack, a cluster's Pod). A bridge
# answers a live neighbour in microseconds, so the proxy's address still resolves.
ARP_SYSCTLS = (("net.ipv4.neigh.eth0.mcast_solicit", "2"), ("net.ipv4.neigh.eth0.retrans_time_ms", "20"))


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

    env = Environment(loader=PackageLoader("launcher", "egress"), undefined=StrictUndefined,
                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    context = [{"acl": _acl(r), "sni_acl": _sni_acl(r), "ports": " ".join(map(str, r.ports)), "private": r.private}
               for r in rules]
    endpoints = [_endpoint(i, s) for i, s in enumerate(secrets)]
    return env.get_template("squid.conf.j2").render(sandbox=sandbox, rules=context, port=port, bind=PROXY_ALIAS,
                                                    endpoints=endpoints)
