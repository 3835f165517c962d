"""Egress audit: the proxy's access log lines turned into events and a summary of what was blocked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

MARK = "SANDBOX-EGRESS"
# A DNS name as learn mode may suggest it: letters, digits and hyphens in dot-separated labels.
_HOST_NAME = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


@dataclass(frozen=True, kw_only=True)
class EgressEvent:
    time: int
    method: str
    host: str
    port: str
    status: str
    verdict: str        # Squid's, e.g. TCP_DENIED, TCP_MISS, TCP_TUNNEL
    sni: str = "-"      # the TLS server name the client sent inside a CONNECT tunnel
    tls: str = "-"      # what Squid did with that TLS: peek, splice, bump (rules per request) or terminate
    path: str = "-"     # with rules per request: the request's path (decrypted ones too)
    reason: str = "-"   # ... and the rule helper's word: "refused: ...", "would refuse: ..." (audit) or -

    @property
    def denied(self) -> bool:
        return self.verdict.startswith("TCP_DENIED") or self.status == "403" or self.tls == "terminate"


@dataclass(frozen=True, kw_only=True)
class EgressSummary:
    host: str
    port: str
    method: str
    count: int
    first: int
    last: int


def parse_log(text: str) -> tuple[EgressEvent, ...]:
    events = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) in (9, 11) and fields[0] == MARK and fields[1].isdigit():
            # URL-decoded (squid.conf's %#): the agent's own bytes, shown only through values.visible
            method, host, sni, *rest = (unquote(f, errors="surrogateescape") for f in (fields[2], fields[3], fields[7],
                                                                                          *fields[9:]))
            events.append(EgressEvent(time=int(fields[1]), method=method, host=host, port=fields[4],
                                      status=fields[5], verdict=fields[6], sni=sni, tls=fields[8],
                                      **dict(zip(("path", "reason"), rest))))
    return tuple(events)


def agents_own(events: tuple[EgressEvent, ...]) -> tuple[EgressEvent, ...]:
    """The requests without the probe's own: the one for the name the proxy must refuse
    (plan.PROBE_DENIED_HOST) is no request of the agent, never shown nor suggested."""
    from launcher.plan.plan import PROBE_DENIED_HOST
    from launcher.plan.probehttp import KEY_PATH, METHOD_PROBE, OUTSIDE

    probes = (OUTSIDE, "/" + METHOD_PROBE, KEY_PATH)   # the probe's own refused requests (rules per request, keys)
    return tuple(e for e in events if e.host != PROBE_DENIED_HOST
                 and not (e.denied and e.path.endswith(probes)))


def summarize(events: tuple[EgressEvent, ...]) -> tuple[EgressSummary, ...]:
    groups: dict[tuple[str, str, str], list[int]] = {}
    for event in events:
        groups.setdefault((event.host, event.port, event.method), []).append(event.time)
    return tuple(EgressSummary(host=h, port=p, method=m, count=len(t), first=min(t), last=max(t))
                 for (h, p, m), t in sorted(groups.items(), key=lambda kv: -len(kv[1])))


def suggest(events: tuple[EgressEvent, ...]) -> tuple[list[str], list[str]]:
    """Learn mode: the narrowest network.allow entries that would have admitted what was refused
    (each exact host, with its port unless 80 or 443; never a wildcard), and what cannot be
    allowed by name (IP literals and anything that is not a host name, with the reason). Never
    applied: the person reads it."""
    import ipaddress

    from launcher.policy.allowlist import DEFAULT_PORTS
    from launcher.values import visible

    entries, skipped = {}, {}
    for event in events:
        if not event.denied:
            continue
        host = (event.sni if event.sni not in ("-", "") else event.host).lower()
        try:
            ipaddress.ip_address(host.strip("[]"))
            skipped[host] = "an IP literal: no name to allow (network.allow_ip_literals would be needed)"
            continue
        except ValueError:
            pass
        if not _HOST_NAME.fullmatch(host):
            skipped[visible(host, keep_lines=False)] = "not a host name"
            continue
        port = int(event.port) if event.port.isdigit() else 443
        entries[host if port in DEFAULT_PORTS else f"{host}:{port}"] = None
    return sorted(entries), [f"{h}: {why}" for h, why in sorted(skipped.items())]


def suggestion_yaml(entries: list[str], skipped: list[str], requests: int) -> str:
    head = [f"# learned from {requests} refused requests: review each host before adding it, every one is a way out"]
    body = ["network:", "  allow:", *[f"    - {e}" for e in entries]] if entries else ["# nothing to allow by name"]
    return "\n".join(head + body + [f"# not suggested: {s}" for s in skipped])


def from_report(path: str) -> tuple[EgressEvent, ...] | None:
    """The requests a `sandbox run --report` file recorded (None: its sandbox had no network);
    PolicyError for a file that is not one."""
    import json

    from launcher.errors import PolicyError, Problem

    def refuse(found: str) -> PolicyError:
        return PolicyError([Problem(file=path, path="egress.requests", expected="a report written by "
                                    "`sandbox run --report FILE`", found=found, hint="give the file that run wrote")])
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        raise refuse(f"a file that cannot be read ({exc.__class__.__name__})") from None
    except ValueError as exc:
        raise refuse(f"no JSON ({exc})") from None
    if not isinstance(report, dict) or "sandbox_version" not in report:
        raise refuse("JSON that is not a run report (no sandbox_version)")
    if report.get("egress") is None and ((report.get("plan") or {}).get("container") or {}).get("network_mode") == "none":
        return None
    egress = report.get("egress") or {"requests": []}    # no plan: the run ended before its sandbox
    requests = egress.get("requests") if isinstance(egress, dict) else None
    if not isinstance(requests, list):
        raise refuse("a report without an egress.requests list")
    names = {f for f in EgressEvent.__dataclass_fields__}
    try:
        return agents_own(tuple(EgressEvent(**{k: v for k, v in r.items() if k in names}) for r in requests))
    except (AttributeError, TypeError):
        raise refuse("requests that are not egress records") from None
