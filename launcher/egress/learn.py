"""Learn mode for rules per request: from the requests the proxy read (a host with an `http:` rule,
best in audit mode), the `http: {methods, paths}` rule per host that would have let them all through,
by a rule of thumb a person then reviews (docs/egress.md, "Learning rules from an audit run")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.egress.audit import EgressEvent
from launcher.policy.allowlist import DEFAULT_PORTS
from launcher.policy.httprules import METHODS, normalise, under

DEPTH = 2        # a prefix keeps at most this many leading segments of a path
SIBLINGS = 4     # more prefixes than this below one first segment: that segment alone
# What a segment of a suggested prefix may hold (the policy refuses %, ;, ?, # and spaces in a prefix).
_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,=:@-]+")
_PROBE = "sandbox-probe."   # the probe's name below a wildcard rule (plan/probehttp.py's PROBE_LABEL)


@dataclass(frozen=True, kw_only=True)
class HttpSuggestion:
    host: str                    # as an allow entry writes it: name, with :port unless 80 or 443
    methods: tuple[str, ...]
    paths: tuple[str, ...]
    requests: int
    would_refuse: int            # of those, what the rule in force refused or would have refused


def prefix(path: str) -> str | None:
    """The prefix a request's path suggests: its first DEPTH segments after normalisation (cut there
    with a trailing /, a shorter path whole); a segment a prefix cannot hold ends it early; None for
    a path that climbs above / (never a prefix)."""
    normal = normalise(path)
    if normal is None:
        return None
    segments = [s for s in normal.split("/") if s]
    kept = []
    for segment in segments[:DEPTH]:
        if not _SEGMENT.fullmatch(segment) or segment in (".", ".."):
            break
        kept.append(segment)
    if len(kept) == len(segments):
        return "/" + "/".join(kept)
    return "/" + "".join(s + "/" for s in kept)


def _merge(prefixes: set[str]) -> tuple[str, ...]:
    """Many prefixes below one first segment become that segment; a prefix under another goes."""
    below: dict[str, set[str]] = {}
    for p in prefixes:
        parts = [s for s in p.split("/") if s]
        if len(parts) > 1:
            below.setdefault(parts[0], set()).add(p)
    merged = set(prefixes)
    for first, group in below.items():
        if len(group) > SIBLINGS:
            merged = (merged - group) | {f"/{first}/"}
    merged = {p for p in merged if not (p.endswith("/") and p != "/" and p.rstrip("/") in merged)}   # /a covers /a/
    return tuple(sorted(p for p in merged if not any(q != p and under(p.rstrip("/") or "/", q) for q in merged)))


def suggest_http(events: tuple[EgressEvent, ...]) -> tuple[list[HttpSuggestion], list[str]]:
    """Per host whose requests the proxy decrypted (a host with an http: rule), the methods seen and
    the prefixes of the paths seen, over every request it read there (decrypted or plain HTTP,
    allowed, would-refuse or refused by the rule; never one the host rules refused, a CONNECT or the
    probe's own); and what could not be suggested, with why."""
    read = [e for e in events if e.kind in ("intercepted", "plain") and e.path != "-"
            and not e.host.lower().startswith(_PROBE) and not (e.denied and e.reason == "-")]
    intercepted = {e.host.lower() for e in read if e.kind == "intercepted"}
    groups: dict[str, list[EgressEvent]] = {}
    for e in read:
        if e.host.lower() not in intercepted:
            continue   # plain HTTP to a host without http: rules: a tunnel rule's host, nothing to narrow
        port = int(e.port) if e.port.isdigit() else 443
        groups.setdefault(e.host.lower() if port in DEFAULT_PORTS else f"{e.host.lower()}:{port}", []).append(e)
    found, skipped = [], []
    for host, group in sorted(groups.items()):
        methods = {e.method.upper() for e in group}
        skipped += [f"{host}: method {m} (a rule names only {', '.join(METHODS)})" for m in sorted(methods - set(METHODS))]
        prefixes = set()
        for e in group:
            p = prefix(e.path)
            if p is None:
                skipped.append(f"{host}: a path that climbs above / ({e.path[:80]})")
            else:
                prefixes.add(p)
        if not prefixes or not methods & set(METHODS):
            continue
        found.append(HttpSuggestion(host=host, methods=tuple(m for m in METHODS if m in methods), paths=_merge(prefixes),
                                    requests=len(group), would_refuse=sum(1 for e in group if e.decision != "allowed")))
    return found, skipped
