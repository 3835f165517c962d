"""Proxy-mode pieces of a plan: the Squid configuration (rendered from a jinja2 template) and the
names of the per-sandbox networks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.allowlist import AllowRule
from launcher.inject import CA_PATH, CA_VAR

PROXY_ALIAS = "sandbox-proxy"
PROXY_PORT = 3128
# A name that no allow-list may contain (.invalid is reserved): the probe expects a 403 for it.
PROBE_DENIED_HOST = "denied.sandbox-probe.invalid"


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    name: str
    internal: bool
    options: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class SecretEndpoint:
    """One injected secret as the proxy serves it. Where the value comes from, never the value."""

    name: str
    var: str                  # the proxy's variable carrying the value at launch (SANDBOX_SECRET_<i>)
    from_env: str             # host variable, or ""
    from_file: str            # host file, or ""
    port: int                 # the proxy's plain-HTTP endpoint port for the sandbox
    scheme: str               # towards the upstream: https (TLS, system CAs or ca_pem) or http
    host: str
    upstream_port: int
    header: str               # header name
    template: str             # header value with {value}
    ca_file: str = ""         # host file the CA bundle was read from, or "" (the proxy's system CAs)
    ca_pem: str = ""          # its certificates (public data): the only CAs the proxy trusts for this upstream
    login: str = ""           # SecretPolicy.login: how the value is read at launch ("" as it is)
    path: str = ""            # only paths under this reach the upstream ("" any)
    extra: tuple[tuple[str, str], ...] = ()   # a login's further headers: (name, proxy variable)


@dataclass(frozen=True, kw_only=True)
class ProxySpec:
    name: str
    image: str
    config: str
    internal_network: str
    egress_network: str
    alias: str
    port: int
    labels: tuple[tuple[str, str], ...]
    user: str = "13:13"          # Debian's proxy user; never root
    pids_limit: int = 128
    memory_bytes: int = 256 * 1024 ** 2
    # The root filesystem is read-only; Squid writes only to these small tmpfs directories.
    scratch_dirs: tuple[str, ...] = ("/run/squid", "/var/spool/squid", "/var/log/squid")
    scratch_options: str = "uid=13,gid=13,mode=0700,size=16m"
    secrets: tuple[SecretEndpoint, ...] = ()
    # Its output is the egress audit: bounded (about a million requests), never unbounded.
    log_options: tuple[tuple[str, str], ...] = (("max-size", "50m"), ("max-file", "4"))


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


def proxy_env(spec: ProxySpec) -> dict[str, str]:
    """The proxy container's environment but the secrets' values: its configuration and the CA
    bundles, base64 (the start script writes them to its tmpfs)."""
    import base64

    env = {"SANDBOX_SQUID_CONF": base64.b64encode(spec.config.encode()).decode()}
    env.update({f"{CA_VAR}{i}": base64.b64encode(s.ca_pem.encode()).decode() for i, s in enumerate(spec.secrets) if s.ca_pem})
    return env


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
