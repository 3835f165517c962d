"""The shared flags (issue 26): --policy/-p and -w/--workspace wherever a command takes one (the
argument form kept; both at once is a usage error, exit 2), --json on every command with a
result (JSON alone on stdout, messages on stderr), selftest's --json and --output, down's --strict."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.engine import engine
from launcher.engine.enginefake import FakeEngine
from launcher.host import baseline
from launcher.launch import sandboxes
from launcher.selftest import runner as st


def invoke(*args, **env):
    return CliRunner(env=env or None).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")


def test_check_takes_the_base_as_policy_and_every_argument_as_a_layer_after_it():
    as_argument, as_flag = invoke("check", "ci", "untrusted", "--json"), invoke("check", "-p", "ci", "untrusted", "--json")
    assert as_flag.exit_code == as_argument.exit_code == 0, as_flag.stderr
    assert as_flag.stdout == as_argument.stdout
    assert invoke("check", "--policy", "ci", "--json").stdout == invoke("check", "ci", "--json").stdout
    assert invoke("check", "--policy", "ci", "--json").stdout != invoke("check", "--json").stdout   # untrusted


def test_explain_takes_policy_as_a_flag_or_an_argument_not_both():
    flag, argument = invoke("explain", "--policy", "ci", "--json"), invoke("explain", "ci", "--json")
    assert flag.exit_code == argument.exit_code == 0 and flag.stdout == argument.stdout
    assert json.loads(flag.stdout) != json.loads(invoke("explain", "--json").stdout)   # the default: untrusted
    both = invoke("explain", "ci", "-p", "ci")
    assert both.exit_code == 2 and "POLICY given twice" in both.stderr and not both.stdout


def test_devcontainer_takes_the_workspace_as_a_flag_or_an_argument(tmp_path):
    flag = tmp_path / "a"
    flag.mkdir()
    result = invoke("devcontainer", "-w", str(flag))
    assert result.exit_code == 0, result.stderr
    assert (flag / ".devcontainer" / "devcontainer.json").is_file() and not result.stdout
    same = invoke("devcontainer", str(flag), "--workspace", str(flag / "."), "--force")
    assert same.exit_code == 0, same.stderr
    other = tmp_path / "b"
    other.mkdir()
    both = invoke("devcontainer", str(other), "-w", str(flag))
    assert both.exit_code == 2 and "WORKSPACE given twice" in both.stderr
    assert not (other / ".devcontainer").exists()


def test_up_takes_the_workspace_as_a_flag_and_refuses_two_different_ones(tmp_path, no_engine):
    (tmp_path / "b").mkdir()
    both = invoke("up", str(tmp_path), "-w", str(tmp_path / "b"), "--no-shell")
    assert both.exit_code == 2 and "WORKSPACE given twice" in both.stderr
    for args in (("-w", str(tmp_path)), (str(tmp_path), "--workspace", str(tmp_path))):
        result = invoke("up", *args, "--no-shell")   # parsed and planned: stops only at the engine
        assert result.exit_code == 121, result.stderr
        assert "cannot reach the Docker engine" in result.stderr


@pytest.mark.parametrize("args", [("gc", "--json"), ("down", "x", "--json"), ("apply", "x", "--json"),
                                  ("down", "x", "--strict", "--purge", "--json")])
def test_the_json_flags_parse_before_the_engine_is_needed(args, no_engine):
    result = invoke(*args)
    assert result.exit_code == 121, result.stderr
    said = json.loads(result.stdout)   # the error, as the command's JSON object
    assert said["command"] == args[0] and said["exit_code"] == 121 and not said["ok"]
    assert "cannot reach the Docker engine" in said["error"] and said["hint"]


def test_a_usage_error_of_ours_exits_2():
    result = invoke("apply", "x", "--to", "b", "--allow-symlink", "link")
    assert result.exit_code == 2 and "--allow-symlink goes without --to" in result.stderr


def test_down_json_says_what_was_removed_and_kept(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    monkeypatch.setattr(sandboxes, "down", lambda eng, name, purge: sandboxes.Down(
        copy="c", changes=2, removed=("v1",), kept=("v2",)))
    monkeypatch.setattr(baseline, "take", lambda name: None)
    result = invoke("down", "box", "--json", "--purge")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"command": "down", "ok": True, "exit_code": 0, "error": "",
                                         "sandbox": "box", "removed": ["box", "v1"], "kept": ["v2"],
                                         "copy": {"name": "c", "changes": 2, "dropped": False},
                                         "workspace_changes": [], "attestation": None}   # no up --attest
    assert "sandbox: removed box, v1" in result.stderr and "copy c (2 changed)" in result.stderr


def test_gc_json_says_what_was_removed_and_which_copies_stay(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    monkeypatch.setattr(sandboxes, "gc", lambda eng, everything: ["old"])
    monkeypatch.setattr(sandboxes, "stale_probe_volumes", lambda eng, name: ["probe-v"])
    monkeypatch.setattr(sandboxes, "ls", lambda eng: [])
    monkeypatch.setattr(sandboxes, "gc_copies", lambda eng, force: [
        sandboxes.CopyVerdict(name="done", pending=0, removed=True),
        sandboxes.CopyVerdict(name="held", pending=3, removed=False)])
    monkeypatch.setattr(baseline, "names", lambda: ())
    result = invoke("gc", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "command": "gc", "ok": True, "exit_code": 0, "sandbox": None, "error": "",
        "removed": ["old", "probe-v", "done"], "workspace_changes": {},
        "copies": [{"name": "done", "removed": True, "unapplied": 0},
                   {"name": "held", "removed": False, "unapplied": 3}]}
    assert "kept the copy held: 3 changes" in result.stderr and "removed 3: old, probe-v, done" in result.stderr


def _selftest_result(monkeypatch):
    result = st.PresetResult(policy="p", mode="none", cases=(
        st.CaseResult(id="a", expected="x", observed="y", verdict=st.PASS),))
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    monkeypatch.setattr(st, "run", lambda eng, policies, status: (result,))
    return st.to_json((result,))


def test_selftest_json_is_the_report_alone_on_stdout_and_output_writes_it(monkeypatch, tmp_path):
    data = _selftest_result(monkeypatch)
    result = invoke("selftest", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == data
    assert "selftest passed (p: 1/1)" in result.stderr and "CASE" in result.stderr
    path = tmp_path / "report.json"
    result = invoke("selftest", "--output", str(path))
    assert result.exit_code == 0 and json.loads(path.read_text()) == data
    assert "selftest passed (p: 1/1)" in result.stdout and "CASE" in result.stdout


def test_selftest_json_no_longer_takes_a_file():
    result = invoke("selftest", "--json", "report.json")
    assert result.exit_code == 2 and "unexpected extra argument" in result.stderr


def test_down_says_what_its_own_strict_does():
    def strict(command):
        options = invoke(command, "--help").stdout.split("\nOptions:\n", 1)[1]
        return options.split("--strict", 1)[1].split("\n  --", 1)[0]

    assert "123" in strict("down") and "--allow" not in strict("down") and "--timeout" not in strict("down")
    assert "--timeout" in strict("run")
