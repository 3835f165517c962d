"""Egress audit: the proxy's access log lines turned into events and a summary of what was blocked."""

from __future__ import annotations

from dataclasses import dataclass

MARK = "SANDBOX-EGRESS"


@dataclass(frozen=True, kw_only=True)
class EgressEvent:
    time: int
    method: str
    host: str
    port: str
    status: str
    verdict: str        # Squid's, e.g. TCP_DENIED, TCP_MISS, TCP_TUNNEL
    sni: str = "-"      # the TLS server name the client sent inside a CONNECT tunnel
    tls: str = "-"      # what Squid did with that TLS: peek, splice, or terminate (SNI not allowed)

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
        if len(fields) == 9 and fields[0] == MARK and fields[1].isdigit():
            events.append(EgressEvent(time=int(fields[1]), method=fields[2], host=fields[3], port=fields[4],
                                      status=fields[5], verdict=fields[6], sni=fields[7], tls=fields[8]))
    return tuple(events)


def summarize(events: tuple[EgressEvent, ...]) -> tuple[EgressSummary, ...]:
    groups: dict[tuple[str, str, str], list[int]] = {}
    for event in events:
        groups.setdefault((event.host, event.port, event.method), []).append(event.time)
    return tuple(EgressSummary(host=h, port=p, method=m, count=len(t), first=min(t), last=max(t))
                 for (h, p, m), t in sorted(groups.items(), key=lambda kv: -len(kv[1])))


def suggest(events: tuple[EgressEvent, ...]) -> tuple[list[str], list[str]]:
    """Learn mode: the narrowest network.allow entries that would have admitted what was refused
    (each exact host, with its port unless 80 or 443; never a wildcard), and what cannot be
    allowed by name (IP literals, with the reason). Never applied: the person reads it."""
    import ipaddress

    from launcher.egress.rules import DEFAULT_PORTS

    entries, skipped = {}, {}
    for event in events:
        if not event.denied:
            continue
        host = event.sni if event.sni not in ("-", "") else event.host
        try:
            ipaddress.ip_address(host.strip("[]"))
            skipped[host] = "an IP literal: no name to allow (network.allow_ip_literals would be needed)"
            continue
        except ValueError:
            pass
        port = int(event.port) if event.port.isdigit() else 443
        entries[host if port in DEFAULT_PORTS else f"{host}:{port}"] = None
    return sorted(entries), [f"{h}: {why}" for h, why in sorted(skipped.items())]


def suggestion_yaml(entries: list[str], skipped: list[str], requests: int) -> str:
    head = [f"# learned from {requests} refused requests: review each host before adding it, every one is a way out"]
    body = ["network:", "  allow:", *[f"    - {e}" for e in entries]] if entries else ["# nothing to allow by name"]
    return "\n".join(head + body + [f"# not suggested: {s}" for s in skipped])
