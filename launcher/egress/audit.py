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
