"""Rules per request at launch: the proxy made this sandbox's CA on its own tmpfs (start-proxy); its
certificate, read from the proxy's output once Squid is ready, joins the CA files the sandbox binds,
before the sandbox starts. The key stays in the proxy and goes with it."""

from __future__ import annotations

import re

from launcher.errors import EngineError
from launcher.plan.plan import ProxySpec

MARK = "start-proxy: this sandbox's CA:"
_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]{100,8000}-----END CERTIFICATE-----\n")


def proxy_ca(log: str) -> str:
    """The one certificate after MARK in the proxy's stderr; raises EngineError without one."""
    _, found, rest = log.partition(MARK + "\n")
    match = _CERT.match(rest) if found else None
    if not match:
        raise EngineError("the egress proxy did not show its CA for rules per request (start-proxy)")
    return match.group()


def hand_over(proxy: ProxySpec, log: str) -> str:
    """The proxy's CA into the sandbox's CA files (ProxySpec.ca_files); returns the certificate."""
    from launcher.plan import trustfiles

    cert = proxy_ca(log)
    if not all(proxy.ca_files):
        raise EngineError("no CA files were prepared for the proxy's CA (rules per request)")
    trustfiles.add_proxy_ca(proxy.ca_files, cert)
    return cert
