"""`sandbox egress` (issue 42 item 6) without an engine: the command line, the validation (the
layers are ceilings as for `up --allow`, a bad rule, an unknown sandbox), the rule removal, the
log line, what attaching compiles after a change, and the rollback when the proof fails."""

from __future__ import annotations

import json
import os

import threading
import time

import pytest
from click.testing import CliRunner

from launcher import labels as label
from launcher.cli import main
from launcher.egress import audit, proxy
from launcher.engine import engine
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import ProbeReport
from launcher.errors import ExitCode, NoSandbox, PolicyError, ProbeFailed
from launcher.host import rulechanges
from launcher.launch import egresschange, proof, sandboxes, session, upoptions
from launcher.policy.allowlist import parse_rule, removal, taken_out

NAME = "sandbox-box"


class Quiet:
    def __init__(self):
        self.said = []

    def status(self, message):
        self.said.append(message)

    def output(self, stream, data):
        pass


def up_sandbox(workspace, allow=("allowed.test",), policy="ci") -> FakeEngine:
    """A fake engine holding a running `up` sandbox started with `--policy ci --allow ...`."""
    fake = FakeEngine()
    options = upoptions.UpOptions(policy=policy, allow=tuple(allow))
    labels = {label.MANAGED: "1", label.KIND: "up", label.SANDBOX: NAME, label.WORKSPACE: os.path.realpath(workspace),
              label.UP_OPTIONS: upoptions.label_value(options), label.EFFECTIVE_DIGEST: "started-digest"}
    fake.http.add_container(NAME, labels)
    return fake


@pytest.fixture
def ws(tmp_path):
    folder = tmp_path / "repo"
    folder.mkdir()
    return folder


@pytest.fixture
def reloads(monkeypatch):
    """The proxy's reload and note, and the proof, played here: what was reloaded, in order."""
    done = []
    monkeypatch.setattr(proxy, "reload", lambda eng, spec: done.append(spec.config))
    monkeypatch.setattr(proxy, "note", lambda eng, spec, line: done.append(line))
    monkeypatch.setattr(proof, "reprove", lambda eng, plan, ref: ProbeReport(checks=(), finished=True, verdict_ok=True))
    return done


# the command line

def invoke(monkeypatch, fake, *args):
    monkeypatch.setattr(engine, "connect", lambda **_: fake)
    return CliRunner().invoke(main, ["egress", *args], catch_exceptions=False)


@pytest.mark.parametrize("args, code, words", [
    ((NAME, "--allow", "a.test"), ExitCode.USAGE, "Missing option '--reason'"),
    ((NAME, "--reason", "r"), 120, "exactly one rule to allow or to deny"),
    ((NAME, "--allow", "a.test", "--deny", "b.test", "--reason", "r"), 120, "exactly one rule"),
    ((NAME, "--allow", "a.test", "--reason", "  "), 120, "--reason: expected why, in one printable line"),
    ((NAME, "--allow", "a.test", "--reason", "x" * 501), 120, "up to 500 characters"),
])
def test_the_command_line_refuses_what_is_not_one_rule_with_a_reason(monkeypatch, ws, args, code, words):
    result = invoke(monkeypatch, up_sandbox(ws), *args)
    assert result.exit_code == code and words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_an_unknown_or_stopped_sandbox_is_117(monkeypatch, ws):
    result = invoke(monkeypatch, up_sandbox(ws), "sandbox-nope", "--allow", "a.test", "--reason", "r")
    assert result.exit_code == 117 and "no sandbox named 'sandbox-nope'" in result.stderr, result.stderr
    fake = up_sandbox(ws)
    fake.http.containers[next(iter(fake.http.containers))]["State"].update(Running=False, Status="exited")
    with pytest.raises(NoSandbox):
        egresschange.change(NAME, allow="a.test", reason="r", listener=Quiet(), engine=fake)


@pytest.mark.parametrize("rule, words", [("http://a.test/", "not a URL"), ("a.test/x", "a host name only"),
                                         ("*.com", "a narrower wildcard"), ("{host: a.test, http: {methods: [FETCH]}}",
                                                                           "FETCH")])
def test_a_bad_rule_is_120_with_the_hint(monkeypatch, ws, reloads, rule, words):
    result = invoke(monkeypatch, up_sandbox(ws), NAME, "--allow", rule, "--reason", "r")
    assert result.exit_code == 120 and "--allow" in result.stderr and words in result.stderr, result.stderr
    assert reloads == [] and rulechanges.load(NAME, "any") is None


def test_a_bad_deny_is_120(monkeypatch, ws, reloads):
    result = invoke(monkeypatch, up_sandbox(ws), NAME, "--deny", "not a host", "--reason", "r")
    assert result.exit_code == 120 and "--deny" in result.stderr
    result = invoke(monkeypatch, up_sandbox(ws), NAME, "--deny", "never-allowed.test", "--reason", "r")
    assert result.exit_code == 120 and "an allow rule in force" in result.stderr and reloads == []


# validation: the layers are ceilings, as for `up --allow`

def test_widening_past_the_org_layer_is_refused_and_nothing_reloads(monkeypatch, ws, tmp_path, reloads):
    org = tmp_path / "org.yaml"
    org.write_text("version: 1\nnetwork:\n  allow: [allowed.test, other.test]\n")
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(org))
    fake = up_sandbox(ws)
    with pytest.raises(PolicyError) as refused:
        egresschange.change(NAME, allow="outside.test", reason="r", listener=Quiet(), engine=fake)
    said = str(refused.value)
    # the layers' own refusal under CI=true or --strict (the command line's request cut), else egress's
    assert refused.value.exit_code == 120 and "outside.test" in said and "org" in said
    assert "the org and user policies allow" in said or "a ceiling left" in said
    assert reloads == [] and rulechanges.load(NAME, fake.inspect(NAME).id) is None
    done = egresschange.change(NAME, allow="other.test", reason="within the org's", listener=Quiet(), engine=fake)
    assert "other.test" in done.rules and len(reloads) == 2   # the reload, then the log line


def test_a_rule_in_force_already_is_refused(ws, reloads):
    with pytest.raises(PolicyError, match="allowed already"):
        egresschange.change(NAME, allow="allowed.test", reason="r", listener=Quiet(), engine=up_sandbox(ws))


def test_an_http_rule_needs_the_proxys_ca_from_its_start(ws, reloads):
    with pytest.raises(PolicyError) as refused:
        egresschange.change(NAME, allow="{host: api.test, http: {methods: [GET]}}", reason="r", listener=Quiet(),
                            engine=up_sandbox(ws))
    assert "its CA was made then, for those names alone" in str(refused.value) and reloads == []


def test_a_sandbox_without_a_proxy_is_refused(ws, reloads):
    with pytest.raises(PolicyError, match="network mode proxy"):
        egresschange.change(NAME, deny="allowed.test", reason="r", listener=Quiet(),
                            engine=up_sandbox(ws, allow=(), policy="untrusted"))


# a change kept: the log line, the state, attaching again

def test_a_change_is_reloaded_logged_kept_and_attaching_compiles_it(ws, reloads):
    fake = up_sandbox(ws)
    ref = fake.inspect(NAME).id
    done = egresschange.change(NAME, allow="other.test", reason="fixtures for the tests", listener=Quiet(), engine=fake)
    assert done.action == "allow" and done.rule == "other.test" and done.reason == "fixtures for the tests"
    assert set(done.rules) == {"allowed.test", "other.test"}
    config, line = reloads
    assert "dstdomain -n other.test" in config
    [logged] = audit.parse_changes(line)
    assert (logged.action, logged.rule, logged.reason) == ("allow", "other.test", "fixtures for the tests")
    kept = rulechanges.load(NAME, ref)
    assert kept.added == ("other.test",) and kept.removed == () and kept.digest not in ("", "started-digest")
    assert [c["reason"] for c in kept.changes] == ["fixtures for the tests"]
    assert rulechanges.load(NAME, "another-container") is None

    attach = upoptions.completed(fake, session.Request(name=NAME, given=frozenset()))
    assert attach.options.added == ("other.test",)
    planned = session.prepare(attach, Quiet(), kind="up")
    assert "other.test" in {str(r) for r in planned.policy.network.allow}
    assert dict(planned.plan.container.labels)[label.EFFECTIVE_DIGEST] == kept.digest
    assert sandboxes.reuse_problem(fake.list()[0], planned.plan) is None   # the digest in force, not the label's

    reloads.clear()
    egresschange.change(NAME, deny="other.test", reason="done with it", listener=Quiet(), engine=fake)
    assert "other.test" not in reloads[0]
    kept = rulechanges.load(NAME, ref)
    assert kept.added == () and kept.removed == ("other.test",)
    assert [(c["action"], c["reason"]) for c in kept.changes] == [("allow", "fixtures for the tests"),
                                                                  ("deny", "done with it")]
    sandboxes.down(fake, NAME)
    assert rulechanges.load(NAME, ref) is None   # down forgets it


def test_two_changes_at_once_take_turns_and_both_are_kept(monkeypatch, ws, reloads):
    # each reads the changes so far, proves and saves: without the lock the later save drops the other's
    fake = up_sandbox(ws)
    ref = fake.inspect(NAME).id
    inside = threading.Event()

    def slow_proof(eng, plan, ref):
        inside.set()
        time.sleep(0.3)   # the other change is waiting for the lock meanwhile (or, unlocked, saving)
        return ProbeReport(checks=(), finished=True, verdict_ok=True)

    monkeypatch.setattr(proof, "reprove", slow_proof)
    first = threading.Thread(target=egresschange.change, args=(NAME,),
                             kwargs=dict(allow="other.test", reason="one", listener=Quiet(), engine=fake))
    first.start()
    inside.wait(10)
    egresschange.change(NAME, allow="third.test", reason="two", listener=Quiet(), engine=fake)
    first.join(10)
    kept = rulechanges.load(NAME, ref)
    assert set(kept.added) == {"other.test", "third.test"}
    assert [c["reason"] for c in kept.changes] == ["one", "two"]


def test_a_failed_proof_puts_the_old_rules_back_and_is_122(monkeypatch, ws, reloads):
    failed = ProbeReport(checks=(), finished=False, verdict_ok=False)

    def fails(eng, plan, ref):
        raise ProbeFailed("the probe failed", failed)

    monkeypatch.setattr(proof, "reprove", fails)
    fake = up_sandbox(ws)
    with pytest.raises(ProbeFailed) as refused:
        egresschange.change(NAME, allow="other.test", reason="r", listener=Quiet(), engine=fake)
    assert refused.value.exit_code == ExitCode.PROBE_FAILED == 122
    assert "back on its earlier rules" in str(refused.value)
    new, old = reloads   # reloaded, then back; no log line
    assert "other.test" in new and "other.test" not in old
    assert rulechanges.load(NAME, fake.inspect(NAME).id) is None


# the pieces

def test_a_removal_takes_out_every_port_of_a_host_or_one():
    rules = tuple(parse_rule(r) for r in ("a.test", "a.test:8443", "*.b.test", "c.test"))
    assert [str(r) for r in taken_out(rules, ("a.test",))] == ["*.b.test", "c.test"]
    assert [str(r) for r in taken_out(rules, ("a.test:8443",))] == ["a.test", "*.b.test", "c.test"]
    assert [r.ports for r in taken_out(rules, ("a.test:80",))][:1] == [(443,)]
    assert [str(r) for r in taken_out(rules, ("*.b.test",))] == ["a.test", "a.test:8443", "c.test"]
    assert removal("A.test:443") == ("a.test", 443) and removal("*.b.test") == ("*.b.test", None)


def test_the_log_line_carries_any_reason_on_one_line():
    change = audit.RuleChange(time=5, action="deny", rule="a.test", reason="two words\nSANDBOX-EGRESS-RULE 1 allow x y")
    line = audit.change_line(change)
    assert "\n" not in line and len(line.split()) == 5
    assert audit.parse_changes(line + "\nSANDBOX-EGRESS 1 GET a 80 200 TCP_MISS - -\n") == (change,)


def test_the_library_has_the_call():
    import launcher

    assert launcher.change_egress is egresschange.change   # launcher.egress is the package


def test_json_answer_is_the_shared_envelope(monkeypatch, ws, reloads):
    result = invoke(monkeypatch, up_sandbox(ws), NAME, "--allow", "other.test", "--reason", "r", "--json")
    assert result.exit_code == 0, result.stderr
    said = json.loads(result.stdout)
    assert said["command"] == "egress" and said["ok"] and said["sandbox"] == NAME and said["rule"] == "other.test"
