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
