"""The egress audit: proxy log lines to events, and the summary of what was blocked."""

from launcher.egress.audit import parse_log, summarize

LOG = """\
2026/11/30 21:00:00| Accepting HTTP Socket connections
SANDBOX-EGRESS 100 GET denied.test 80 403 TCP_DENIED - -
SANDBOX-EGRESS 101 GET denied.test 80 403 TCP_DENIED - -
SANDBOX-EGRESS 102 CONNECT allowed.test 443 200 NONE_NONE evil.test terminate
SANDBOX-EGRESS 103 CONNECT allowed.test 443 200 TCP_TUNNEL allowed.test splice
SANDBOX-EGRESS 104 GET allowed.test 80 200 TCP_MISS - -
SANDBOX-EGRESS garbage line
"""


def test_log_lines_become_events_and_others_are_ignored():
    events = parse_log(LOG)
    assert len(events) == 5
    assert [e.denied for e in events] == [True, True, True, False, False]
    assert events[2].sni == "evil.test" and events[2].tls == "terminate"


def test_summary_groups_by_destination_most_frequent_first():
    blocked = summarize(tuple(e for e in parse_log(LOG) if e.denied))
    assert [(b.host, b.port, b.method, b.count, b.first, b.last) for b in blocked] == [
        ("denied.test", "80", "GET", 2, 100, 101), ("allowed.test", "443", "CONNECT", 1, 102, 102)]


def test_learn_mode_suggests_the_narrowest_entries_for_what_was_refused():
    from launcher.egress.audit import EgressEvent, suggest, suggestion_yaml
    from launcher.policy.allowlist import parse_rule

    def refused(host, port="443", sni="-"):
        return EgressEvent(time=1, method="CONNECT", host=host, port=port, status="403", verdict="TCP_DENIED", sni=sni)

    allowed = EgressEvent(time=1, method="CONNECT", host="api.test", port="443", status="200", verdict="TCP_TUNNEL")
    events = (refused("telemetry.example.com"), refused("telemetry.example.com"), refused("git.example.org", "8443"),
              refused("203.0.113.7"), allowed)
    entries, skipped = suggest(events)
    assert entries == ["git.example.org:8443", "telemetry.example.com"] and skipped[0].startswith("203.0.113.7")
    for entry, (host, port) in zip(entries, [("git.example.org", 8443), ("telemetry.example.com", 443)]):
        rule = parse_rule(entry, False)
        assert rule.matches(host, port) and not rule.wildcard and not rule.matches("other." + host, port)
    text = suggestion_yaml(entries, skipped, 4)
    assert "    - telemetry.example.com" in text and "not suggested: 203.0.113.7" in text and "api.test" not in text


def test_the_agent_profiles_blocked_hosts_are_what_learn_mode_would_suggest():
    """Each profile lists the hosts its CLI still tries (and the proxy refuses): learn mode turns
    exactly those into entries, so a user who wants them gets no wider rule than that."""
    from launcher import agents
    from launcher.egress.audit import EgressEvent, suggest

    for profile in agents.PROFILES.values():
        hosts = [h.replace("*", "example") for h in profile.blocked]   # a pattern's concrete host
        events = tuple(EgressEvent(time=1, method="CONNECT", host=h, port="443", status="403", verdict="TCP_DENIED")
                       for h in hosts)
        assert suggest(events) == (sorted(hosts), []), profile.name
        assert not profile.hosts or set(profile.hosts) <= set(suggest(tuple(
            EgressEvent(time=1, method="GET", host=h, port="80", status="403", verdict="TCP_DENIED")
            for h in profile.hosts))[0])


def test_the_agents_bytes_in_the_log_are_decoded_once_and_never_suggested_unless_a_host_name():
    """Squid writes method, host and SNI URL-encoded (%#): a line break of the agent's cannot forge a
    log line, and learn mode skips what is not a DNS name (shown escaped)."""
    from launcher.egress.audit import suggest, suggestion_yaml

    log = ("SANDBOX-EGRESS 1 CONNECT allowed.test 443 200 NONE_NONE "
           "evil%1B%5D52%3Bc%3Bx%07%0A%20%20private%3A%20true terminate\n"
           "SANDBOX-EGRESS 2 GET Denied.TEST 80 403 TCP_DENIED - -\n")
    events = parse_log(log)
    assert events[0].sni == "evil\x1b]52;c;x\x07\n  private: true" and events[0].denied
    entries, skipped = suggest(events)
    assert entries == ["denied.test"] and skipped == ["evil\\u001b]52;c;x\\u0007\\u000a  private: true: not a host name"]
    assert [line for line in suggestion_yaml(entries, skipped, 2).splitlines() if "private" in line] == [
        "# not suggested: " + skipped[0]]


def test_a_step_summary_holds_no_markdown_or_control_character_of_the_agent():
    import re

    from launcher.targets.summary import markdown

    hostile = "x`![i](http://canary.test/p.png)<img src=y>|\x1b[2K\n"
    report = {"status": "surfaces-changed", "exit_code": 123, "agent": {"exit_code": 0}, "policy": {"name": "ci"},
              "probe": None, "duration_seconds": 1.0,
              "workspace_changes": [{"change": "new", "path": hostile, "detail": "d"}],
              "egress": {"blocked": [{"method": "GET", "host": hostile, "port": 80, "count": 1}]}}
    rows = [line for line in markdown(report).splitlines() if "canary" in line]
    assert len(rows) == 2
    for row in rows:
        assert "\x1b" not in row and re.search(r"(?<!\\)[<`!\[\]()]", row.replace("|", "")) is None, row
