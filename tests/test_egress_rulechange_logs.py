"""Rule changes of a running sandbox (`sandbox egress`, issue 42 item 6) in `sandbox logs --json`
(records of kind "rule-change" among the requests, in time order) and `--format ocsf` (OCSF 1.6.0
Entity Management events, class 3004: the rule is the managed entity, created by an allow and
deleted by a deny, the reason its comment), from the change lines in the proxy's own log."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fakes import one_sandbox
from launcher.cli import main
from launcher.egress.audit import RuleChange, change_line, parse_changes, parse_log, with_changes
from launcher.egress.ocsf import change_event, lines
from launcher.engine import engine
from test_egress_logs import LOG, valid

ADDED = RuleChange(time=1796586489, action="allow", rule="{host: api.test, http: {methods: [GET]}}",
                   reason="read the API, café")
REMOVED = RuleChange(time=1796586600, action="deny", rule="pypi.org", reason="dependencies installed")
WITH_CHANGES = LOG + change_line(ADDED) + "\n" + change_line(REMOVED) + "\n"

# OCSF 1.6.0 Entity Management (events/iam/entity_management.json, base_event.json, objects/managed_entity.json)
ATTRIBUTES = {"activity_id", "activity_name", "category_name", "category_uid", "class_name", "class_uid", "count",
              "duration", "end_time", "enrichments", "message", "metadata", "observables", "raw_data", "severity",
              "severity_id", "start_time", "status", "status_code", "status_detail", "status_id", "time",
              "timezone_offset", "type_name", "type_uid", "unmapped", "actor", "api", "http_request", "src_endpoint",
              "access_list", "access_mask", "comment", "entity", "entity_result", "device"}
REQUIRED = {"activity_id", "category_uid", "class_uid", "entity", "metadata", "severity_id", "time", "type_uid"}
ACTIVITIES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete"}
ENTITY = {"data", "name", "type", "type_id", "uid", "version", "device", "email", "group", "org", "policy", "user"}


def change_valid(found: dict) -> list[str]:
    wrong = [f"unknown attribute {k}" for k in set(found) - ATTRIBUTES] + [f"missing {k}" for k in REQUIRED - set(found)]
    checks = [
        (found["class_uid"] == 3004 and found["category_uid"] == 3, "class 3004 in category 3"),
        (found["class_name"] == "Entity Management" and found["category_name"] == "Identity & Access Management", "names"),
        (ACTIVITIES.get(found["activity_id"]) == found["activity_name"], "activity_id and activity_name"),
        (found["type_uid"] == 300400 + found["activity_id"], "type_uid"),
        (found["type_name"] == "Entity Management: " + found["activity_name"], "type_name"),
        (isinstance(found["time"], int) and found["time"] > 10 ** 12, "time in ms"),
        ((found["severity_id"], found["severity"]) == (1, "Informational"), "severity"),
        ((found["status_id"], found["status"]) == (1, "Success"), "status"),
        (set(found["entity"]) <= ENTITY and found["entity"]["type_id"] == 99 and found["entity"]["name"], "entity"),
        (found["metadata"]["version"] == "1.6.0" and found["metadata"]["product"]["name"] == "sandbox", "metadata"),
    ]
    return wrong + [said for ok, said in checks if not ok]


def test_a_rule_change_is_an_ocsf_entity_management_event():
    added, removed = change_event(ADDED, "box"), change_event(REMOVED)
    assert change_valid(added) == [] and change_valid(removed) == []
    assert (added["activity_id"], added["activity_name"], removed["activity_id"]) == (1, "Create", 4)
    assert added["comment"] == "read the API, café" and added["entity"]["name"] == ADDED.rule
    assert added["entity"]["data"] == {"action": "allow", "rule": ADDED.rule, "sandbox": "box"}
    assert added["device"]["name"] == "box" and "device" not in removed
    assert removed["message"] == "rule changed: deny pypi.org" and removed["time"] == 1796586600000


def test_ocsf_lines_mix_requests_and_changes_in_time_order():
    out = [json.loads(line) for line in lines(parse_log(WITH_CHANGES), "box", parse_changes(WITH_CHANGES))]
    classes = [f["class_uid"] for f in out]
    assert classes.count(3004) == 2 and classes.count(4002) == len(parse_log(LOG)) - 1
    assert [f["time"] for f in out] == sorted(f["time"] for f in out)
    # the change comes after the requests of its own second, the removal last
    assert classes[-1] == 3004 and out[-1]["activity_id"] == 4
    second = [f for f in out if f["time"] == ADDED.time * 1000]
    assert second[-1]["class_uid"] == 3004 and all(f["class_uid"] == 4002 for f in second[:-1])
    for found in out:
        assert (valid(found) if found["class_uid"] == 4002 else change_valid(found)) == [], found
    assert all(line.isascii() for line in lines((), "box", (ADDED,)))


def test_logs_json_and_ocsf_carry_the_changes(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="sandbox-net-box", proxy_log=WITH_CHANGES))
    done = CliRunner().invoke(main, ["logs", "box", "--json"], catch_exceptions=False)
    records = json.loads(done.stdout)
    changes = [r for r in records if r["kind"] == "rule-change"]
    assert changes == [{"time": ADDED.time, "kind": "rule-change", "action": "allow", "rule": ADDED.rule,
                        "reason": ADDED.reason},
                       {"time": REMOVED.time, "kind": "rule-change", "action": "deny", "rule": "pypi.org",
                        "reason": "dependencies installed"}]
    assert records == with_changes(parse_log(WITH_CHANGES), parse_changes(WITH_CHANGES))
    assert len(records) == len(parse_log(LOG)) + 2 and records[-1]["kind"] == "rule-change"
    done = CliRunner().invoke(main, ["logs", "box", "--format", "ocsf"], catch_exceptions=False)
    found = [json.loads(line) for line in done.stdout.splitlines()]
    assert [f["entity"]["name"] for f in found if f["class_uid"] == 3004] == [ADDED.rule, "pypi.org"]
    assert all(f.get("device", f.get("src_endpoint")) == {"name": "box"} or f["class_uid"] == 3004 for f in found)
    done = CliRunner().invoke(main, ["logs", "box"], catch_exceptions=False)
    assert "rule changed: allow {host: api.test, http: {methods: [GET]}}  reason: read the API, café" in done.stdout
    # without changes the JSON is what it was: the requests alone
    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="sandbox-net-box", proxy_log=LOG))
    assert all(r["kind"] != "rule-change" for r in json.loads(CliRunner().invoke(main, ["logs", "box", "--json"]).stdout))
