"""Egress allow-list entries: parsing and the rules that refuse malformed or over-broad ones."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from launcher.policy.httprules import HttpRule, RuleError, parse_http

DEFAULT_PORTS = (80, 443)

# Suffixes under which anyone can register names: a wildcard over one of them allows the world.
# Single-label suffixes (com, org, io, ...) are caught by counting labels; these are the common
# multi-label ones (a subset of the Public Suffix List, which we do not ship).
PUBLIC_SUFFIXES = frozenset("""
co.uk org.uk ac.uk gov.uk me.uk net.uk ltd.uk plc.uk com.au net.au org.au edu.au gov.au co.nz org.nz
co.jp ne.jp or.jp ac.jp com.br net.br org.br com.cn net.cn org.cn co.in net.in org.in co.za org.za
com.mx com.ar com.tr com.tw com.hk com.sg co.kr co.il com.pl co.id com.my com.ph com.vn com.ua
github.io gitlab.io herokuapp.com appspot.com cloudfront.net amazonaws.com azurewebsites.net
blob.core.windows.net web.app firebaseapp.com netlify.app vercel.app pages.dev workers.dev
s3.amazonaws.com googleusercontent.com ngrok.io ngrok-free.app trycloudflare.com
""".split())

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True, kw_only=True)
class AllowRule:
    host: str                  # exact name, or the suffix after "*." for a wildcard
    wildcard: bool             # *.example.com: any name below example.com, not example.com itself
    ports: tuple[int, ...]
    ip: bool = False
    # Its name may resolve to a private, loopback, CGNAT or multicast address (an internal host);
    # off by default: an allowed name pointing there would let the proxy connect inside for the agent.
    private: bool = False
    # Rules per request (methods, path prefixes), enforced by the proxy with TLS terminated; None:
    # a plain tunnel, nothing decrypted.
    # repr=False: the repr of a rule without one is what it always was (trust keys, digests: trustlevel.py)
    http: HttpRule | None = field(default=None, repr=False)
    # The read-only registry (registries.py) this rule stands for, or "": what `explain` says it came
    # from; not part of what the rule allows (equal rules are one rule, whoever asked for them).
    registry: str = field(default="", repr=False, compare=False)

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        name = name if self.ports == DEFAULT_PORTS else f"{name}:{self.ports[0]}"
        name = f"{name} (private)" if self.private else name
        name = f"{name} [{self.http}]" if self.http else name
        return f"{name} (registry {self.registry})" if self.registry else name

    def matches(self, host: str, port: int) -> bool:
        host = host.lower().rstrip(".")
        if port not in self.ports:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host


# Names of cloud instance metadata services (credentials live there). They resolve to link-local
# addresses, which the proxy refuses whatever the rule, so allowing one only looks like it works.
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.internal"})


def parse_rule(entry, allow_ip_literals: bool = False) -> AllowRule:
    """Parse `host`, `*.suffix`, either with `:port`, or `{host: ..., private: true, http: {...}}`.
    Raises ValueError with a hint-ready message (a RuleError naming the key below the entry)."""
    if isinstance(entry, dict):
        if set(entry) - {"host", "private", "http"} or not isinstance(entry.get("host"), str) \
                or not isinstance(entry.get("private", False), bool):
            raise ValueError("{host: NAME, private: true|false, http: {methods: [...], paths: [...], mode: ...}}")
        from dataclasses import replace

        rule = replace(parse_rule(entry["host"], allow_ip_literals), private=entry.get("private", False))
        if "http" not in entry:
            return rule
        if rule.ip:
            raise RuleError("a host name for a rule with http: (the proxy's certificate names it)", ".host",
                            repr(entry["host"]))
        http = parse_http(entry["http"], rule.ports)
        if http.ca_file and rule.wildcard:
            raise RuleError("an exact host for a rule with its own ca_file (the proxy checks that one name)", ".host",
                            repr(entry["host"]))
        return replace(rule, http=http)
    text = entry.strip().lower()
    if "://" in text:
        raise ValueError("a host name, not a URL (drop the scheme)")
    if any(c in text for c in "/?#@ \t"):
        raise ValueError("a host name only (no path, query, user or spaces)")
    host, ports = text, DEFAULT_PORTS
    if text.startswith("["):
        raise ValueError("no IPv6 literal (IPv6 has no way out of the sandbox)")
    if text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"a port between 1 and 65535 after ':', not {port_text!r}")
        ports = (int(port_text),)
    elif ":" in text:
        raise ValueError("no IPv6 literal (IPv6 has no way out of the sandbox)")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        if not allow_ip_literals:
            raise ValueError("a host name; IP literals need network.allow_ip_literals: true")
        return AllowRule(host=host, wildcard=False, ports=ports, ip=True)
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    labels = name.split(".")
    if "*" in name or not all(_LABEL.match(label) for label in labels):
        raise ValueError("a valid host name, or *. followed by one (a wildcard only as the first label)")
    if name == "localhost" or name.endswith(".localhost"):
        raise ValueError("no loopback name: localhost and *.localhost always mean the machine itself, where the "
                         "proxy never connects")
    if name in METADATA_NAMES:
        raise ValueError(f"no cloud metadata service: {name} answers on a link-local address, where the proxy "
                         "never connects")
    if wildcard and (len(labels) < 2 or name in PUBLIC_SUFFIXES):
        raise ValueError(f"a narrower wildcard: *.{name} covers names anyone can register")
    if not wildcard and name in PUBLIC_SUFFIXES:
        raise ValueError(f"a host, not the public suffix {name}")
    return AllowRule(host=name, wildcard=wildcard, ports=ports)


def removal(text: str) -> tuple[str, int | None]:
    """`sandbox egress --deny`'s HOST, *.suffix or either with :PORT as (host as rules name it, port
    or None: every port); raises ValueError as parse_rule does."""
    rule = parse_rule(text, allow_ip_literals=True)
    return (f"*.{rule.host}" if rule.wildcard else rule.host), (rule.ports[0] if ":" in text.strip() else None)


def taken_out(rules: tuple[AllowRule, ...], removed: tuple[str, ...]) -> tuple[AllowRule, ...]:
    """The rules without those of each removed HOST (every port) or HOST:PORT (that port only)."""
    from dataclasses import replace

    kept = list(rules)
    for text in removed:
        host, port = removal(text)
        left = []
        for rule in kept:
            if (f"*.{rule.host}" if rule.wildcard else rule.host) != host:
                left.append(rule)
            elif port is not None and rule.ports != (port,):
                left.append(replace(rule, ports=tuple(p for p in rule.ports if p != port)))
        kept = left
    return tuple(kept)
