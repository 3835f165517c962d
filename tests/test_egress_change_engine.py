"""`sandbox egress` on a real engine: a running `up` sandbox in proxy mode gets a host allowed and
then denied again while it runs (same container, a long-running process inside survives), each
change with its reason in `sandbox logs`; `up` attaching again proves the rules in force."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_attest_engine import verified
from test_egress_http_engine import ENFORCED, POLICY, tls_upstream  # noqa: F401 - a fixture
from test_proxy import internet  # noqa: F401 - a fixture
from test_secrets_engine import certs  # noqa: F401 - a fixture

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
CURL = 'curl -s -o /dev/null -w "%{http_code}" --max-time 10'


def sandbox(*args) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300)


def inside(name: str, script: str) -> str:
    return subprocess.run(["docker", "exec", name, "sh", "-c", script], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_a_rule_added_and_removed_while_the_sandbox_runs(engine, internet, workspace, tmp_path):
    name, record = "sandbox-test-egress-change", tmp_path / "up.intoto.json"
    try:
        started = sandbox("up", "-p", "ci", "-w", str(workspace), "--name", name, "--no-shell", "--attest", str(record),
                          "--egress-network", internet.network, "--allow-private", "allowed.test")
        assert started.returncode == 0, started.stderr
        container = engine.inspect(name).id
        inside(name, "nohup sleep 600 >/dev/null 2>&1 & echo $! > /tmp/long.pid")
        pid = inside(name, "cat /tmp/long.pid")
        assert pid.isdigit()
        assert inside(name, f"{CURL} http://other.test/") == "403"
        # a download through the proxy that spans both reloads (64 MiB at 2 MiB/s): its connection stays
        inside(name, "nohup curl -s --limit-rate 2M --max-time 180 -o /dev/null -w '%{http_code} %{size_download}' "
                     "http://allowed.test/big >/tmp/download 2>&1 &")

        added = sandbox("egress", name, "--allow", "{host: other.test, private: true}", "--reason", "fixtures for the tests",
                        "--json")
        assert added.returncode == 0, added.stderr
        said = json.loads(added.stdout)
        assert said["ok"] and said["action"] == "allow" and "other.test (private)" in said["rules"], said
        assert said["checks"] > 0
        assert inside(name, f"{CURL} http://other.test/") == "200"
        assert inside(name, f"{CURL} http://allowed.test/") == "200"   # the rules it started with still hold

        denied = sandbox("egress", name, "--deny", "other.test", "--reason", "fixtures downloaded")
        assert denied.returncode == 0, denied.stderr
        assert inside(name, f"{CURL} http://other.test/") == "403"

        unknown = sandbox("egress", "sandbox-test-no-such", "--allow", "other.test", "--reason", "r")
        assert unknown.returncode == 117, unknown.stderr

        assert engine.inspect(name).id == container and engine.inspect(name).running
        assert inside(name, f"test -d /proc/{pid} && echo alive") == "alive"   # nothing inside was restarted
        assert inside(name, "test -s /tmp/download || echo running") == "running"   # still downloading
        said = inside(name, "while [ ! -s /tmp/download ]; do sleep 1; done; cat /tmp/download")
        assert said == f"200 {64 << 20}", said   # the whole of it, over the connection opened before

        logs = sandbox("logs", name, "--allowed")
        assert logs.returncode == 0, logs.stderr
        assert "rule changed: allow other.test (private)  reason: fixtures for the tests" in logs.stdout, logs.stdout
        assert "rule changed: deny other.test  reason: fixtures downloaded" in logs.stdout, logs.stdout
        # ... and in --json (records of kind rule-change) and OCSF (Entity Management: Create, Delete)
        records = json.loads(sandbox("logs", name, "--json").stdout)
        assert [(r["action"], r["rule"], r["reason"]) for r in records if r["kind"] == "rule-change"] == [
            ("allow", "other.test (private)", "fixtures for the tests"), ("deny", "other.test", "fixtures downloaded")]
        ocsf = [json.loads(line) for line in sandbox("logs", name, "--format", "ocsf").stdout.splitlines()]
        assert [(e["activity_name"], e["entity"]["name"], e["comment"]) for e in ocsf if e["class_uid"] == 3004] == [
            ("Create", "other.test (private)", "fixtures for the tests"), ("Delete", "other.test", "fixtures downloaded")]

        again = sandbox("up", "--name", name, "--no-shell")
        assert again.returncode == 0, again.stderr
        assert "probe passed again" in again.stderr
        assert engine.inspect(name).id == container
    finally:
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    changes = verified(record)["predicate"]["report"]["egress"]["rule_changes"]
    assert [(c["action"], c["rule"], c["reason"]) for c in changes] == [
        ("allow", "other.test (private)", "fixtures for the tests"), ("deny", "other.test", "fixtures downloaded")]
    assert all(isinstance(c["time"], int) for c in changes)


ISSUER = "curl -sv https://api.test/repos/acme/x -o /dev/null 2>&1 | sed -n 's/^\\*  issuer: //p'"


def test_a_reload_keeps_the_sandboxs_own_ca_and_its_rules_per_request(engine, tls_upstream, certs, workspace,
                                                                       tmp_path):  # noqa: F811
    """Squid reconfigures with ssl-bump on: the same CA (its random name) before and after, the
    http: rules still enforced; an http: rule for a host the CA was not made for is refused."""
    network, upstream_log, _ = tls_upstream
    (tmp_path / "good.pem").write_text(certs["good.pem"])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + f"    - {ENFORCED}\n")
    name = "sandbox-test-egress-bump"
    try:
        started = sandbox("up", "-p", str(policy), "-w", str(workspace), "--name", name, "--no-shell",
                          "--egress-network", network)
        assert started.returncode == 0, started.stderr
        before = inside(name, ISSUER)
        assert before.startswith("O=sandbox; CN=sandbox egress CA "), before
        assert inside(name, f"{CURL} http://front.test/") == "403"
        refused = sandbox("egress", name, "--allow", "{host: front.test, private: true, http: {methods: [GET]}}",
                          "--reason", "r")
        assert refused.returncode == 120, refused.stderr
        assert "its CA was made then, for those names alone" in refused.stderr and "Traceback" not in refused.stderr
        added = sandbox("egress", name, "--allow", "{host: front.test, private: true}", "--reason", "a plain tunnel")
        assert added.returncode == 0, added.stderr
        assert inside(name, f"{CURL} http://front.test/") == "200"
        assert inside(name, ISSUER) == before   # the same CA: reconfigured, not restarted
        assert inside(name, f"{CURL} https://api.test/repos/acme/get") == "200"
        assert inside(name, f"{CURL} -X POST https://api.test/repos/acme/posted") == "403"
        assert "posted" not in upstream_log()
    finally:
        sandbox("down", name)
