"""Egress audit: the proxy's access log lines turned into events and a summary of what was blocked."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from urllib.parse import unquote

MARK = "SANDBOX-EGRESS"
# A DNS name as learn mode may suggest it: letters, digits and hyphens in dot-separated labels.
# Squid's verdicts of a request it forwarded: a 403 with one of these is the upstream's answer.
_FORWARDED = ("TCP_MISS", "TCP_TUNNEL", "TCP_HIT", "TCP_REFRESH", "TCP_IMS", "TCP_MEM_HIT", "TCP_SWAPFAIL")
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
    reason: str = "-"   # ... and the rule helper's (or key ICAP service's) word: "refused: ...", "would refuse: ..." or -

    @property
    def denied(self) -> bool:
        """Refused by the proxy: its own verdict, a cut tunnel, or a 403 that no upstream answered
        (an upstream's own 403 to a forwarded request is its answer, not the proxy's refusal)."""
        return self.verdict.startswith("TCP_DENIED") or self.tls == "terminate" or (
            self.status == "403" and not self.verdict.startswith(_FORWARDED)) or self.reason.startswith("refused: ")

    @property
    def decision(self) -> str:
        """refused (by the proxy), would-refuse (let through by a rule in audit mode) or allowed."""
        if self.denied:
            return "refused"
        return "would-refuse" if self.reason.startswith("would refuse") else "allowed"

    @property
    def kind(self) -> str:
        """tunnel (a CONNECT: host and port only), intercepted (a request decrypted by the proxy:
        method and path known), plain (plain HTTP: method and path known), or - (no request read)."""
        if self.method == "CONNECT":
            return "tunnel"
        if self.method == "-":
            return "-"
        return "intercepted" if self.tls == "bump" else "plain"

    @property
    def message(self) -> str:
        """Why, in one line: the rule helper's word, or what the proxy's host rules decided."""
        if self.reason != "-":
            return self.reason
        if self.decision == "allowed":
            return "allowed" if self.kind != "tunnel" or self.tls != "bump" else "allowed (intercepted: its requests follow)"
        if self.tls == "terminate":
            return f"refused: TLS server name {self.sni} not allowed"
        return "refused: host or port not allowed (or the name resolves to a private address)"


@dataclass(frozen=True, kw_only=True)
class RuleChange:
    """An allow rule `sandbox egress` added or removed in the running sandbox, and why (its proxy's log)."""

    time: int
    action: str         # allow | deny
    rule: str
    reason: str


CHANGE_MARK = "SANDBOX-EGRESS-RULE"


def change_line(change: RuleChange) -> str:
    """The change as one line of the proxy's log: rule and reason URL-encoded (no space or line break)."""
    from urllib.parse import quote

    return f"{CHANGE_MARK} {change.time} {change.action} {quote(change.rule, safe='')} {quote(change.reason, safe='')}"


def parse_changes(text: str) -> tuple[RuleChange, ...]:
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[0] == CHANGE_MARK and fields[1].isdigit() and fields[2] in ("allow", "deny"):
            found.append(RuleChange(time=int(fields[1]), action=fields[2], rule=unquote(fields[3]),
                                    reason=unquote(fields[4])))
    return tuple(found)


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
        if len(fields) in (9, 11, 13) and fields[0] == MARK and fields[1].isdigit():
            # URL-decoded (squid.conf's %#): the agent's own bytes, shown only through values.visible
            method, host, sni, *rest = (unquote(f, errors="surrogateescape") for f in (fields[2], fields[3], fields[7],
                                                                                          *fields[9:]))
            if len(rest) == 4:   # keys bound: the key ICAP service's word, where the helpers said nothing
                failed = "refused: the key ICAP service did not answer" if rest[3] == "ERR_ICAP_FAILURE" else "-"
                rest = [rest[0], next((r for r in (rest[1], rest[2], failed) if r != "-"), "-")]
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


def as_json(event: EgressEvent) -> dict:
    """One request as `logs --json` and the run report give it: the log's fields, and what they mean."""
    return asdict(event) | {"denied": event.denied, "decision": event.decision, "kind": event.kind,
                            "message": event.message}


def change_json(change: RuleChange) -> dict:
    """One rule change as `logs --json` gives it, among the requests: kind "rule-change"."""
    return {"time": change.time, "kind": "rule-change", "action": change.action, "rule": change.rule,
            "reason": change.reason}


def with_changes(events: tuple[EgressEvent, ...], changes: tuple[RuleChange, ...]) -> list[dict]:
    """`logs --json`: every request (as_json) and rule change (change_json) in time order, a change
    after the requests of its second."""
    found = [(e.time, 0, as_json(e)) for e in events] + [(c.time, 1, change_json(c)) for c in changes]
    return [f for _, _, f in sorted(found, key=lambda t: t[:2])]


def listing(events: tuple[EgressEvent, ...], allowed: bool) -> list[tuple[str, ...]]:
    """`sandbox logs`' table (the header first): per request its time (UTC), decision, method,
    host:port, path and why; the refused and would-refuse ones, or with `allowed` every request.
    Left out: a CONNECT the proxy intercepted (its requests are the rows) and a connection that
    sent no request (nothing to show). Every field the agent chose is made visible."""
    import time

    from launcher.values import visible

    rows = [("TIME (UTC)", "DECISION", "METHOD", "HOST:PORT", "PATH", "WHY")]
    for e in events:
        if e.kind == "-" or (e.kind == "tunnel" and e.tls == "bump" and not e.denied) or (
                not allowed and e.decision == "allowed"):
            continue
        rows.append((time.strftime("%H:%M:%S", time.gmtime(e.time)), e.decision, visible(e.method, keep_lines=False),
                     f"{visible(e.host, keep_lines=False)}:{e.port}",
                     "(tunnel)" if e.kind == "tunnel" else visible(e.path, keep_lines=False),
                     visible(e.message.removeprefix("refused: ").removeprefix("would refuse: "), keep_lines=False)))
    return rows


def counts(events: tuple[EgressEvent, ...]) -> str:
    """One line: how many requests were refused, would be refused (audit) and allowed."""
    shown = [e for e in events if e.kind != "-" and not (e.kind == "tunnel" and e.tls == "bump" and not e.denied)]
    said = {d: sum(1 for e in shown if e.decision == d) for d in ("refused", "would-refuse", "allowed")}
    return (f"egress: {said['refused']} refused, {said['would-refuse']} would be refused (audit mode), "
            f"{said['allowed']} allowed")


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
        if not event.denied or event.reason != "-":   # a reason: refused by a rule per request, the host is allowed
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


def suggestion_yaml(entries: list[str], skipped: list[str], requests: int, http: tuple = ()) -> str:
    """The policy snippet learn mode prints: host entries for what was refused by name, and (from a
    run with rules per request) an http: rule per host the proxy read requests of (learn.py)."""
    read = sum(s.requests for s in http)
    head = [f"# learned from {requests} refused requests" + (f" and {read} requests read per request (methods and "
            "paths; keep private: and ca_file: of the rules they replace)" if http else "")
            + ": review each host before adding it, every one is a way out"]
    lines = [f"    - {e}" for e in entries] + [line for s in http for line in _http_entry(s)]
    body = ["network:", "  allow:", *lines] if lines else ["# nothing to allow by name"]
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


def _http_entry(s) -> list[str]:
    """A learn.HttpSuggestion's allow entry lines (under `allow:`): enforce, since that is what the
    audit run was for."""
    import json

    quoted = lambda items: ", ".join(json.dumps(i) if not re.fullmatch(r"[A-Za-z0-9/._~-]+", i) else i  # noqa: E731
                                     for i in items)
    note = f"   # {s.requests} requests" + (f", {s.would_refuse} refused or would be refused by the rule in force"
                                              if s.would_refuse else "")
    return [f"    - host: {s.host}{note}",
            f"      http: {{methods: [{quoted(s.methods)}], paths: [{quoted(s.paths)}], mode: enforce}}"]
