"""`sandbox logs` per request (issue 42 item 5): each request's decision (refused, would-refuse,
allowed), kind (tunnel, intercepted, plain), path and why; learn mode's http: rules from an audit
run; OCSF HTTP Activity events; the rules in force in the plan, the run report and the kept
`up --attest` record; and `check`'s egress-unenforced. The log lines are the ones Squid wrote for
tests/test_egress_logs_engine.py's requests."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from fakes import one_sandbox
from launcher.cli import main
from launcher.egress.audit import as_json, counts, listing, parse_log, suggest, suggestion_yaml
from launcher.egress.learn import prefix, suggest_http
from launcher.egress.ocsf import event, lines
from launcher.engine import engine
from launcher.policy.allowlist import parse_rule

# What Squid logged (squid.conf.j2's logformat with rules per request): the probe's CONNECT to the
# intercepted host, then the agent's requests. %# URL-encodes what the client chose.
LOG = """\
SANDBOX-EGRESS 1796586452 CONNECT api.test 443 200 NONE_NONE api.test bump - -
SANDBOX-EGRESS 1796586489 GET api.test 443 200 TCP_MISS api.test bump /repos/acme/get -
SANDBOX-EGRESS 1796586489 POST api.test 443 403 TCP_DENIED api.test bump /repos/acme/post refused:%20method%20POST%20not%20allowed%20(allowed:%20GET,%20HEAD)
SANDBOX-EGRESS 1796586489 GET api.test 443 403 TCP_MISS api.test bump /repos/acme/forbidden -
SANDBOX-EGRESS 1796586489 GET pub.test 8443 200 TCP_MISS pub.test bump /other/x/y would%20refuse:%20path%20/other/x/y%20is%20outside%20/pub/
SANDBOX-EGRESS 1796586489 POST pub.test 8443 200 TCP_MISS pub.test bump /pub/upload would%20refuse:%20method%20POST%20not%20allowed%20(allowed:%20GET)
SANDBOX-EGRESS 1796586489 GET pub.test 8443 200 TCP_MISS pub.test bump /pub/a/b/c -
SANDBOX-EGRESS 1796586490 CONNECT nothere.test 443 200 TCP_DENIED nothere.test bump - -
SANDBOX-EGRESS 1796586490 GET nothere.test 80 403 TCP_DENIED - - /x -
SANDBOX-EGRESS 1796586490 CONNECT tunnel.test 443 200 NONE_NONE tunnel.test splice - -
SANDBOX-EGRESS 1796586490 CONNECT evil.test 443 200 NONE_NONE other.test terminate - -
SANDBOX-EGRESS 1796586490 - - - 0 NONE_NONE - - - -
"""
EVENTS = parse_log(LOG)


def by_path(path: str):
    return next(e for e in EVENTS if e.path == path)


def test_each_request_has_a_decision_a_kind_and_a_reason():
    seen = [(e.method, e.host, e.decision, e.kind) for e in EVENTS]
    assert seen == [
        ("CONNECT", "api.test", "allowed", "tunnel"), ("GET", "api.test", "allowed", "intercepted"),
        ("POST", "api.test", "refused", "intercepted"),
        ("GET", "api.test", "allowed", "intercepted"),      # the upstream's own 403, not the proxy's refusal
        ("GET", "pub.test", "would-refuse", "intercepted"), ("POST", "pub.test", "would-refuse", "intercepted"),
        ("GET", "pub.test", "allowed", "intercepted"),
        ("CONNECT", "nothere.test", "refused", "tunnel"), ("GET", "nothere.test", "refused", "plain"),
        ("CONNECT", "tunnel.test", "allowed", "tunnel"), ("CONNECT", "evil.test", "refused", "tunnel"),
        ("-", "-", "allowed", "-")]
    assert by_path("/repos/acme/post").message == "refused: method POST not allowed (allowed: GET, HEAD)"
    assert by_path("/other/x/y").message == "would refuse: path /other/x/y is outside /pub/"
    assert by_path("/x").message.startswith("refused: host or port not allowed")
    assert EVENTS[10].message == "refused: TLS server name other.test not allowed"


def test_the_listing_shows_refused_and_would_refuse_and_with_allowed_every_request():
    rows = listing(EVENTS, allowed=False)
    assert rows[0] == ("TIME (UTC)", "DECISION", "METHOD", "HOST:PORT", "PATH", "WHY")
    assert [(r[1], r[2], r[3], r[4]) for r in rows[1:]] == [
        ("refused", "POST", "api.test:443", "/repos/acme/post"), ("would-refuse", "GET", "pub.test:8443", "/other/x/y"),
        ("would-refuse", "POST", "pub.test:8443", "/pub/upload"), ("refused", "CONNECT", "nothere.test:443", "(tunnel)"),
        ("refused", "GET", "nothere.test:80", "/x"), ("refused", "CONNECT", "evil.test:443", "(tunnel)")]
    assert rows[1][5] == "method POST not allowed (allowed: GET, HEAD)" and rows[1][0] == "19:48:09"
    every = listing(EVENTS, allowed=True)
    # the intercepted CONNECT (its requests are the rows) and the connection without a request are left out
    assert len(every) == 1 + len(EVENTS) - 2 and ("CONNECT", "tunnel.test:443") in {(r[2], r[3]) for r in every}
    assert counts(EVENTS) == "egress: 4 refused, 2 would be refused (audit mode), 4 allowed"


def test_what_the_agent_sent_is_made_visible_in_the_listing():
    (bad,) = parse_log("SANDBOX-EGRESS 1 GET a.test 80 200 TCP_MISS - - /x%1b[31m%0aforged -\n")
    assert "\x1b" not in "".join(listing((bad,), allowed=True)[1]) and "\n" not in "".join(listing((bad,), True)[1])


def test_json_carries_the_log_fields_and_what_they_mean():
    found = as_json(by_path("/other/x/y"))
    assert found | {"time": 0} == {
        "time": 0, "method": "GET", "host": "pub.test", "port": "8443", "status": "200", "verdict": "TCP_MISS",
        "sni": "pub.test", "tls": "bump", "path": "/other/x/y", "reason": "would refuse: path /other/x/y is outside /pub/",
        "denied": False, "decision": "would-refuse", "kind": "intercepted",
        "message": "would refuse: path /other/x/y is outside /pub/"}


@pytest.mark.parametrize("path, found", [
    ("/", "/"), ("/simple", "/simple"), ("/simple/requests/", "/simple/requests"), ("/repos/acme/widgets/pulls", "/repos/acme/"),
    ("/a/b;x/c", "/a/b/"), ("/a%2fb/c/d", "/a/b/"), ("/a%20b/c", "/"), ("/x?q=/../..", "/x"), ("/../etc", None),
])
def test_a_path_suggests_its_first_two_segments(path, found):
    assert prefix(path) == found


def test_learn_mode_proposes_an_http_rule_per_intercepted_host_from_an_audit_run():
    http, skipped = suggest_http(EVENTS)
    assert [(s.host, s.methods, s.paths, s.requests, s.would_refuse) for s in http] == [
        ("api.test", ("GET", "POST"), ("/repos/acme/",), 3, 1),
        ("pub.test:8443", ("GET", "POST"), ("/other/x/", "/pub/a/", "/pub/upload"), 3, 2)]
    assert skipped == []
    entries, _ = suggest(EVENTS)
    # refused by name (other.test: the server name of a cut tunnel); api.test's POST was refused by its rule
    assert entries == ["nothere.test", "other.test"]
    text = suggestion_yaml(entries, [], 2, tuple(http))
    allow = yaml.safe_load(text)["network"]["allow"]
    rules = [parse_rule(entry) for entry in allow]   # what the policy itself accepts
    assert [str(r) for r in rules] == ["nothere.test", "other.test", "api.test [GET/POST /repos/acme/]",
                                       "pub.test:8443 [GET/POST /other/x/ /pub/a/ /pub/upload]"]
    assert all(r.http.mode == "enforce" for r in rules[2:])


def test_many_prefixes_below_one_segment_become_that_segment_and_odd_methods_are_said():
    log = "".join(f"SANDBOX-EGRESS 1 GET files.test 443 200 TCP_MISS files.test bump /packages/{i:02x}/x/y.whl -\n"
                  for i in range(6)) + "SANDBOX-EGRESS 1 PROPFIND files.test 443 200 TCP_MISS files.test bump /dav -\n"
    http, skipped = suggest_http(parse_log(log))
    assert [(s.methods, s.paths) for s in http] == [(("GET",), ("/dav", "/packages/"))]
    assert skipped == ["files.test: method PROPFIND (a rule names only GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE)"]


def test_learn_mode_never_offers_the_probes_own_requests():
    log = ("SANDBOX-EGRESS 1 CONNECT sandbox-probe.pkgs.test 443 200 NONE_NONE sandbox-probe.pkgs.test bump - -\n"
           "SANDBOX-EGRESS 1 POST api.test 443 403 TCP_DENIED api.test bump /repos/acme/sandbox-probe-method refused:%20x\n"
           "SANDBOX-EGRESS 1 GET api.test 443 403 TCP_DENIED api.test bump /sandbox-probe-outside refused:%20x\n"
           "SANDBOX-EGRESS 1 GET api.test 443 200 TCP_MISS api.test bump /repos/acme/x -\n")
    monkey = one_sandbox(network="sandbox-net-box", proxy_log=log)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "connect", lambda **_: monkey)
        said = CliRunner().invoke(main, ["logs", "box", "--suggest"], catch_exceptions=False).stdout
    assert "sandbox-probe" not in said and "paths: [/repos/acme/]" in said and "methods: [GET]" in said, said


# ---- OCSF: the fields relied on, as OCSF 1.6.0 defines them (ocsf-schema: events/base_event.json,
# events/network/network.json and http_activity.json, profiles/security_control.json, objects/*.json,
# dictionary.json). An attribute outside these is not HTTP Activity's.
OCSF_ATTRIBUTES = {
    # base event
    "activity_id", "activity_name", "category_name", "category_uid", "class_name", "class_uid", "count", "duration",
    "end_time", "enrichments", "message", "metadata", "observables", "raw_data", "severity", "severity_id",
    "start_time", "status", "status_code", "status_detail", "status_id", "time", "timezone_offset", "type_name",
    "type_uid", "unmapped",
    # the security_control profile
    "action", "action_id", "disposition", "disposition_id", "firewall_rule", "policy",
    # network
    "app_name", "connection_info", "dst_endpoint", "proxy", "src_endpoint", "tls", "traffic",
    # HTTP Activity
    "http_cookies", "http_request", "http_response", "http_status", "file"}
REQUIRED = {"activity_id", "category_uid", "class_uid", "metadata", "severity_id", "time", "type_uid"}
ACTIVITY = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99}      # Unknown, Connect, Delete, Get, Head, Options, Post, Put, Trace, Patch, Other
ACTION = {0: "Unknown", 1: "Allowed", 2: "Denied", 99: "Other"}
DISPOSITION = {1: "Allowed", 2: "Blocked", 15: "Detected"}   # the ones used (of 0..27, 99)
STATUS = {0: "Unknown", 1: "Success", 2: "Failure", 99: "Other"}
SEVERITY = {0: "Unknown", 1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal", 99: "Other"}
URL = {"categories", "category_ids", "domain", "hostname", "path", "port", "query_string", "resource_type", "scheme",
       "subdomain", "url_string"}
HTTP_REQUEST = {"args", "http_headers", "http_method", "length", "referrer", "uid", "url", "user_agent", "version",
                "x_forwarded_for"}
ENDPOINT = {"hostname", "ip", "name", "port", "uid", "svc_name", "domain", "instance_uid", "interface_name"}


def valid(found: dict) -> list[str]:
    """What in one event breaks the fields and enums relied on (empty: none)."""
    wrong = [f"unknown attribute {k}" for k in set(found) - OCSF_ATTRIBUTES]
    wrong += [f"missing {k}" for k in REQUIRED - set(found)]
    checks = [
        (found.get("class_uid") == 4002 and found.get("category_uid") == 4, "class 4002 in category 4"),
        (found.get("activity_id") in ACTIVITY, "activity_id"),
        (found.get("type_uid") == 4002 * 100 + found.get("activity_id", -1), "type_uid = class_uid * 100 + activity_id"),
        (isinstance(found.get("time"), int) and found["time"] > 10 ** 12, "time in ms since the epoch"),
        (ACTION.get(found.get("action_id")) == found.get("action"), "action_id and action"),
        (DISPOSITION.get(found.get("disposition_id")) == found.get("disposition"), "disposition_id and disposition"),
        (STATUS.get(found.get("status_id")) == found.get("status"), "status_id and status"),
        (SEVERITY.get(found.get("severity_id")) == found.get("severity"), "severity_id and severity"),
        (isinstance(found.get("message"), str), "message"),
        (found["metadata"]["version"] == "1.6.0" and found["metadata"]["product"]["name"] == "sandbox"
         and isinstance(found["metadata"]["product"]["vendor_name"], str), "metadata version and product"),
        (set(found["http_request"]) <= HTTP_REQUEST and isinstance(found["http_request"]["http_method"], str),
         "http_request"),
        (set(found["http_request"]["url"]) <= URL and ("url_string" in found["http_request"]["url"]
                                                     or "path" in found["http_request"]["url"]), "url (url_string or path)"),
        (set(found["dst_endpoint"]) <= ENDPOINT and "hostname" in found["dst_endpoint"], "dst_endpoint"),
        (isinstance(found.get("http_response", {}).get("code", 0), int), "http_response.code"),
    ]
    return wrong + [said for ok, said in checks if not ok]


def test_every_request_is_an_ocsf_http_activity_event():
    out = [json.loads(line) for line in lines(EVENTS, sandbox="box")]
    assert len(out) == len(EVENTS) - 1   # the connection without a request is no HTTP Activity
    for found in out:
        assert valid(found) == [], found
    post = event(by_path("/repos/acme/post"), "box")
    assert (post["activity_id"], post["action"], post["disposition"], post["status"]) == (6, "Denied", "Blocked", "Failure")
    assert post["http_request"] == {"http_method": "POST", "url": {
        "hostname": "api.test", "port": 443, "scheme": "https", "path": "/repos/acme/post",
        "url_string": "https://api.test/repos/acme/post"}}
    assert post["message"] == "refused: method POST not allowed (allowed: GET, HEAD)" and post["http_response"] == {"code": 403}
    audit = event(by_path("/other/x/y"))
    assert (audit["action"], audit["disposition"], audit["disposition_id"]) == ("Allowed", "Detected", 15)
    assert audit["http_request"]["url"]["url_string"] == "https://pub.test:8443/other/x/y" and "src_endpoint" not in audit
    tunnel = event(EVENTS[9])
    assert tunnel["activity_id"] == 1 and tunnel["http_request"]["url"] == {"hostname": "tunnel.test", "port": 443,
                                                                           "url_string": "tunnel.test:443"}
    assert event(by_path("/x"))["http_request"]["url"]["scheme"] == "http"


def test_logs_writes_ocsf_json_lines_and_json_with_decisions(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="sandbox-net-box", proxy_log=LOG))
    done = CliRunner().invoke(main, ["logs", "box", "--egress", "--format", "ocsf"], catch_exceptions=False)
    assert done.exit_code == 0, done.stderr
    assert [json.loads(line)["src_endpoint"] for line in done.stdout.splitlines()] == [{"name": "box"}] * (len(EVENTS) - 1)
    done = CliRunner().invoke(main, ["logs", "box", "--json"], catch_exceptions=False)
    assert [r["decision"] for r in json.loads(done.stdout)].count("would-refuse") == 2
    done = CliRunner().invoke(main, ["logs", "box"], catch_exceptions=False)
    assert done.stdout.startswith("egress: 4 refused, 2 would be refused (audit mode), 4 allowed\n")
    assert "would-refuse  POST" in done.stdout and "(--allowed lists the allowed requests too)" in done.stdout
    done = CliRunner().invoke(main, ["logs", "box", "--format", "ocsf", "--json"])
    assert done.exit_code == 2 and "without --json or --suggest" in done.stderr


# ---- the rules in force: the plan, the run report, a kept up --attest record

def test_the_plan_and_the_report_carry_the_rules_in_force():
    from conftest import fake_facts
    from launcher.plan.compiler import compile_policy
    from launcher.policy.policy import parse_policy
    from launcher.targets import report

    text = ("version: 1\nname: t\ndescription: d\nnetwork:\n  mode: proxy\n  allow:\n    - pypi.org\n"
            "    - {host: 'api.test:8443', private: true, http: {methods: [GET], paths: [/pub/], mode: audit}}\n")
    plan = compile_policy(parse_policy(text.encode(), "p.yaml"), fake_facts(bump_store=("/s/a.pem", "/s/b.pem")))
    rules = report.build(status="ok", exit_code=0, started=0.0, plan=plan)["egress"]["rules"]
    assert rules == [
        {"host": "pypi.org", "ports": [80, 443], "private": False, "methods": None, "paths": None, "mode": "enforce",
         "enforcer": "proxy (tunnel)"},
        {"host": "api.test", "ports": [8443], "private": True, "methods": ["GET"], "paths": ["/pub/"], "mode": "audit",
         "enforcer": "proxy (intercepted)"}]


def test_a_kept_record_keeps_its_rules_when_down_adds_the_log(monkeypatch, tmp_path):
    from launcher.launch import records

    statement = {"predicate": {"run": {"sandbox": "box"}, "report": {"egress": {"rules": [{"host": "a.test"}],
                                                                                "error": "not read"}}}}
    saved = {"path": str(tmp_path / "r.json"), "statement": statement, "key": None}
    monkeypatch.setattr(records, "pending", lambda name: saved)
    monkeypatch.setattr(records, "drop", lambda name: None)
    monkeypatch.setattr(records.attest, "subjects", lambda pred: [])
    written = records.finish("box", "sandbox down", [], {"blocked": [], "requests": []})
    assert written.problem is None
    assert json.loads((tmp_path / "r.json").read_text())["predicate"]["report"]["egress"] == {
        "rules": [{"host": "a.test"}], "blocked": [], "requests": []}


# ---- check: a rule whose methods and paths another rule goes around

def test_check_warns_where_a_tunnel_goes_around_an_http_rule(tmp_path):
    from launcher.check import lint

    body = ("version: 1\nname: t\ndescription: d\nnetwork:\n  mode: proxy\n  allow:\n"
            "    - api.test\n"                                              # [0] same name and ports: adds nothing
            "    - {host: api.test, http: {methods: [GET], paths: [/a/]}}\n"  # [1]
            "    - '*.example.com'\n"                                       # [2] wider: fronting
            "    - {host: api.example.com, http: {methods: [GET]}}\n"        # [3]
            "    - 'api.test:8443'\n")                                      # [4] another port: not enforced there
    (tmp_path / "p.yaml").write_text(body)
    from launcher.check import lintstack

    found = lintstack.check((str(tmp_path / "p.yaml"),), str(tmp_path))[0]
    said = {(f.code, f.path): f.message for f in found if f.code in ("egress-unenforced", "shadowed")}
    assert set(said) == {("shadowed", "network.allow[0]"), ("egress-unenforced", "network.allow[1].http"),
                         ("egress-unenforced", "network.allow[3].http")}, said
    assert "judges every request there by network.allow[1]'s methods and paths" in said[("shadowed", "network.allow[0]")]
    assert "api.test:8443 (network.allow[4]) reaches the same host on port 8443 as a tunnel" in \
        said[("egress-unenforced", "network.allow[1].http")]
    assert "another name below example.com carry this host's name" in said[("egress-unenforced", "network.allow[3].http")]
    assert all(f.severity is lint.Severity.WARNING for f in found if f.code == "egress-unenforced")


def test_check_says_nothing_of_rules_that_do_not_meet(tmp_path):
    from launcher.check import lintstack

    (tmp_path / "p.yaml").write_text("version: 1\nname: t\ndescription: d\nnetwork:\n  mode: proxy\n  allow:\n"
                                     "    - other.test\n    - {host: api.test, http: {methods: [GET]}}\n"
                                     "    - {host: '*.pkgs.test', http: {methods: [GET]}}\n    - 'pkgs.test:8443'\n")
    found = lintstack.check((str(tmp_path / "p.yaml"),), str(tmp_path))[0]
    assert not [f for f in found if f.code in ("egress-unenforced", "shadowed")], [str(f) for f in found]


def test_check_and_explain_say_each_rules_enforcer(tmp_path):
    from launcher.check import explain, lintstack

    text = ("version: 1\nname: t\ndescription: d\nnetwork:\n  mode: proxy\n  allow:\n    - pypi.org\n"
            "    - {host: api.test, http: {methods: [GET], mode: audit}}\n")
    (tmp_path / "p.yaml").write_text(text)
    found = lintstack.check((str(tmp_path / "p.yaml"),), str(tmp_path))[0]
    said = [(f.path, f.message) for f in found if f.code == "egress-enforcer"]
    assert said == [("network.allow[0]", "pypi.org: proxy (tunnel): host and port only, nothing decrypted"),
                    ("network.allow[1]", "api.test [GET / (audit)]: proxy (intercepted): TLS terminated with this "
                                         "sandbox's CA, methods and paths judged per request, only logged (audit)")]
    from launcher.pipeline import stack

    eff = stack.load_base(str(tmp_path / "p.yaml"))
    assert explain.egress_rules(eff) == (("pypi.org", "proxy (tunnel)"),
                                         ("api.test [GET / (audit)]", "proxy (intercepted), audit: only logged"))
    assert "egress rule pypi.org: proxy (tunnel)" in explain.render(eff)


def test_a_run_ends_saying_how_many_requests_audit_mode_would_refuse(capsys):
    from launcher.cli import output

    output.print_blocked(EVENTS)
    said = capsys.readouterr().err
    assert "egress blocked (4 requests):" in said and "  POST api.test:443  x1" in said
    assert "egress: 2 requests would be refused by rules in audit mode" in said
