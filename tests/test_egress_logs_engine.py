"""`sandbox logs` of a real `up` sandbox with one enforcing and one auditing rule per request (issue 42
item 5): allowed, refused and would-refuse requests, each shown with its method, path, decision and
the rule helper's reason (`--json`), as OCSF HTTP Activity events (`--format ocsf`), and learned back
into http: rules (`--suggest`); the run report and the record carry the rules in force. The upstream
is our own TLS container (tests/test_egress_http_engine.py's, certificates from a test CA)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from test_egress_http_engine import tls_upstream  # noqa: F401 - a fixture
from test_egress_logs import valid
from test_secrets_engine import SANDBOX, certs  # noqa: F401 - a fixture

pytestmark = pytest.mark.engine

POLICY = """version: 1
name: logs-test
description: per-request logs against our own TLS upstream
image: sandbox/agent:bookworm-full
workspace: {access: read-write}
tmpfs: [{target: /tmp, size: 16m}]
limits: {timeout: 5m}
network:
  mode: proxy
  allow:
    - {host: 'api.test:443', private: true, http: {methods: [GET, HEAD], paths: [/repos/acme/], ca_file: good.pem}}
    - {host: 'api.test:80', private: true, http: {methods: [GET], paths: [/pub/], mode: audit}}
"""
# label: curl arguments; what the proxy must decide, and the path it logs
CALLS = {
    "get": ("https://api.test/repos/acme/get", "allowed", "/repos/acme/get"),
    "post": ("-X POST https://api.test/repos/acme/post", "refused", "/repos/acme/post"),
    "outside": ("https://api.test/repos/other/outside", "refused", "/repos/other/outside"),
    "pubget": ("http://api.test/pub/pubget", "allowed", "/pub/pubget"),
    "pubpost": ("-X POST http://api.test/pub/pubpost", "would-refuse", "/pub/pubpost"),
    "private": ("http://api.test/private/x/y", "would-refuse", "/private/x/y"),
    "nohost": ("http://nothere.test/nohost", "refused", "/nohost"),
}
SCRIPT = "; ".join(f"curl -s -o /dev/null --max-time 20 {args}" for args, _, _ in CALLS.values())


def sandbox(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def test_logs_show_each_request_with_its_decision_and_reason_as_json_ocsf_and_suggestions(
        tls_upstream, workspace, tmp_path, certs):  # noqa: F811
    network, upstream_log, _ = tls_upstream
    (tmp_path / "good.pem").write_text(certs["good.pem"])
    (tmp_path / "policy.yaml").write_text(POLICY)
    name, record = f"sandbox-logs-{os.getpid()}", tmp_path / "up.intoto.json"
    try:
        up = sandbox("up", "-p", str(tmp_path / "policy.yaml"), str(workspace), "--name", name, "--egress-network",
                     network, "--attest", str(record), "--no-shell")
        assert up.returncode == 0, up.stderr
        done = sandbox("exec", name, "--", "bash", "-c", SCRIPT)
        assert done.returncode == 0, done.stderr
        as_json, ocsf, suggested, text = (sandbox("logs", name, "--egress", *more) for more in (
            ("--json",), ("--format", "ocsf"), ("--suggest",), ("--allowed",)))
    finally:
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    for result in (as_json, ocsf, suggested, text):
        assert result.returncode == 0, result.stderr
    seen = upstream_log()
    assert "/repos/acme/post" not in seen and "/repos/other/outside" not in seen   # refused: never reached it
    assert "POST /pub/pubpost" in seen and "/private/x/y" in seen                  # audit: let through

    requests = {r["path"]: r for r in json.loads(as_json.stdout) if r["path"] != "-"}
    for label, (_, decision, path) in CALLS.items():
        assert requests[path]["decision"] == decision, (label, requests[path])
    assert requests["/repos/acme/post"]["message"] == "refused: method POST not allowed (allowed: GET, HEAD)"
    assert requests["/repos/other/outside"]["message"] == "refused: path /repos/other/outside is outside /repos/acme/"
    assert requests["/pub/pubpost"]["message"] == "would refuse: method POST not allowed (allowed: GET)"
    assert requests["/private/x/y"]["message"] == "would refuse: path /private/x/y is outside /pub/"
    assert requests["/repos/acme/get"]["kind"] == "intercepted" and requests["/pub/pubget"]["kind"] == "plain"
    assert not [r for r in json.loads(as_json.stdout) if "sandbox-probe" in r["path"] + r["host"]]

    events = [json.loads(line) for line in ocsf.stdout.splitlines()]
    assert events and all(valid(e) == [] for e in events), [valid(e) for e in events]
    by_path = {e["http_request"]["url"].get("path"): e for e in events}
    assert by_path["/repos/acme/post"]["disposition"] == "Blocked" and by_path["/repos/acme/post"]["activity_id"] == 6
    assert by_path["/pub/pubpost"]["disposition"] == "Detected" and by_path["/pub/pubpost"]["action"] == "Allowed"
    assert by_path["/repos/acme/get"]["http_request"]["url"]["url_string"] == "https://api.test/repos/acme/get"
    assert by_path["/pub/pubget"]["disposition"] == "Allowed" and by_path["/pub/pubget"]["src_endpoint"] == {"name": name}

    allow = yaml.safe_load(suggested.stdout)["network"]["allow"]
    assert "nothere.test" in allow, suggested.stdout
    (rule,) = [a for a in allow if isinstance(a, dict)]
    assert rule["host"] == "api.test" and rule["http"]["methods"] == ["GET", "POST"], suggested.stdout
    assert rule["http"]["paths"] == ["/private/x/", "/pub/pubget", "/pub/pubpost", "/repos/acme/", "/repos/other/"]
    assert "sandbox-probe" not in suggested.stdout

    assert "would-refuse" in text.stdout and "/pub/pubpost" in text.stdout and "allowed" in text.stdout

    egress = json.loads(record.read_text())["predicate"]["report"]["egress"]
    assert [(r["host"], r["ports"], r["mode"], r["enforcer"]) for r in egress["rules"]] == [
        ("api.test", [443], "enforce", "proxy (intercepted)"), ("api.test", [80], "audit", "proxy (intercepted)")]
    assert {r["path"] for r in egress["requests"]} >= {p for _, _, p in CALLS.values()}
