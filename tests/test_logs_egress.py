"""`sandbox logs` of a sandbox whose preset has no network says so instead of failing (issue 44),
and neither it nor learn mode ever shows the probe's own request for the name the proxy must
refuse: that request is not the agent's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fakes import one_sandbox
from launcher.cli import main
from launcher.egress.audit import EgressEvent, agents_own
from launcher.engine import engine
from launcher.errors import ExitCode
from launcher.plan.plan import PROBE_DENIED_HOST


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def fake(monkeypatch):
    made = one_sandbox()
    monkeypatch.setattr(engine, "connect", lambda **_: made)
    return made


@pytest.mark.parametrize("args, said", [
    ((), "no egress in this preset (network: none)\n"),
    (("--suggest",), "# no egress in this preset (network: none): nothing to allow\n"),
    (("--json",), "[]\n"),
])
def test_logs_of_a_sandbox_without_a_network_says_so(fake, args, said):
    result = invoke("logs", "box", *args)
    assert result.exit_code == 0 and result.stdout == said, result.stderr


def test_logs_of_a_sandbox_whose_proxy_is_gone_is_still_an_error(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="sandbox-net-box"))
    result = invoke("logs", "box")
    assert result.exit_code == ExitCode.ENGINE and "no egress proxy" in result.stderr


LOG = "\n".join(f"SANDBOX-EGRESS 1700000000 {method} {host} {port} 403 TCP_DENIED - -" for method, host, port in (
    ("GET", PROBE_DENIED_HOST, "80"), ("CONNECT", "evil.example", "443"), ("GET", PROBE_DENIED_HOST, "80")))


def test_the_probes_own_requests_are_never_shown_nor_suggested(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="sandbox-net-box", proxy_log=LOG))
    for args in (("--suggest",), ("--json",), ("--allowed",)):
        result = invoke("logs", "box", *args)
        assert result.exit_code == 0 and "evil.example" in result.stdout, result.stderr
        assert "sandbox-probe" not in result.stdout
    suggested = invoke("logs", "box", "--suggest").stdout
    assert "# learned from 1 refused requests" in suggested and "    - evil.example" in suggested
    report = tmp_path / "report.json"   # a report that kept them (an older launcher's) is read the same way
    report.write_text(json.dumps({"sandbox_version": "0", "egress": {"requests": [
        {"time": 1, "method": "GET", "host": PROBE_DENIED_HOST, "port": "80", "status": "403", "verdict": "TCP_DENIED"}]}}))
    assert "sandbox-probe" not in invoke("logs", "--report", str(report), "--suggest").stdout


def test_a_run_report_without_a_network_says_so_too(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"sandbox_version": "0", "egress": None,
                                  "plan": {"container": {"network_mode": "none"}}}))
    assert invoke("logs", "--report", str(report)).stdout == "no egress in this preset (network: none)\n"


def test_agents_own_drops_only_the_probes_deny_test():
    events = tuple(EgressEvent(time=1, method="GET", host=h, port="80", status="403", verdict="TCP_DENIED")
                   for h in (PROBE_DENIED_HOST, "sandbox-probe.invalid.example", "x.test"))
    assert [e.host for e in agents_own(events)] == ["sandbox-probe.invalid.example", "x.test"]
