"""`sandbox up`'s stored options (issue 43, items 2 and 3) without an engine: what a sandbox keeps of
the command line that started it, `up` with none of them attaching with those (proven again), other
options refused with both ways on, `--new` a second sandbox under a name and copy of its own, and
what the terminal runs (a shell, the agent's CLI, a command). tests/test_up_engine.py drives a real
sandbox through a pty."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fakes import Recorder
from launcher import labels as label
from launcher.cli import main
from launcher.engine import engine as engine_module
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import Check, ProbeReport
from launcher.errors import ExitCode, PolicyError
from launcher.launch import launch, proof, session, upoptions
from launcher.launch.ports import parse_spec
from launcher.pipeline.pipeline import AgentChoice, LayerOptions

PASSED = ProbeReport(checks=(Check(id="identity.uid", ok=True, expected="1000", observed="1000"),),
                     finished=True, verdict_ok=True)
ALL = frozenset(upoptions.FIELDS)


@pytest.fixture
def started(monkeypatch):
    """session.up with images ready, launch.up making the sandbox in the fake engine and a re-probe
    that passes: (the plans started, the re-probes)."""
    plans, reproved = [], []

    def fake_up(engine, plan, listener):
        plans.append(plan)
        engine.http.add_container(plan.container.name, dict(plan.container.labels))
        return PASSED

    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "up", fake_up)
    monkeypatch.setattr(proof, "reprove", lambda engine, plan, ref: reproved.append(plan) or PASSED)
    return plans, reproved


def up(engine, workspace, given=frozenset(), **how) -> session.UpResult:
    return session.up(session.Request(workspace=str(workspace), given=given, **how), Recorder(), engine=engine)


CI = {"policy": "ci", "options": LayerOptions(allow=("pypi.org", {"host": "git.internal", "private": True}),
                                              session="2h", idle="30m")}


def test_the_label_reads_back_and_says_the_command_line(tmp_path):
    request = session.Request(workspace=str(tmp_path), ports=(parse_spec("3000"),),
                              options=LayerOptions(allow=("pypi.org",), agent=AgentChoice(name="codex", key_env="K")),
                              policy="./mine.yaml")
    options = upoptions.of_request(request)
    assert options.policy == str(tmp_path.cwd() / "mine.yaml") and options.ports == ("3000:3000",)
    assert upoptions.parse(upoptions.label_value(options)) == options
    assert upoptions.shown(options) == (f"--policy {options.policy} --allow pypi.org --port 3000:3000 --agent codex "
                                        "--model-key-env K --model-key-kind api-key")   # the kind as recognised
    assert json.loads(upoptions.label_value(upoptions.UpOptions())) == {"v": 1, "policy": "untrusted"}
    for text in ("", "{", "[]", '{"v": 2, "policy": "ci"}', '{"v": 1, "policy": 3}', '{"v": 1, "allow": [1]}',
                 '{"v": 1, "surprise": true}'):
        assert upoptions.parse(text) is None, text


@pytest.mark.parametrize("options, said", [
    (upoptions.UpOptions(upstream="https://user:pw@gateway.example"), "a URL with credentials in it"),
    (upoptions.UpOptions(allow=("sk-ant-api03-" + "x" * 40,)), "a secret-shaped value"),
    (upoptions.UpOptions(allow=tuple(f"host-{n}.example.com" for n in range(300))), "options that fit 4096"),
])
def test_nothing_secret_or_overlong_is_stored(options, said):
    with pytest.raises(PolicyError, match=said) as refused:
        upoptions.label_value(options)
    assert refused.value.exit_code == ExitCode.POLICY_INVALID


def test_up_with_no_options_attaches_with_the_stored_ones_and_proves_it_again(tmp_path, started):
    plans, reproved = started
    engine = FakeEngine()
    first = up(engine, tmp_path, given=ALL, **CI)
    assert not first.reused and first.options.policy == "ci" and first.options.allow_private == ("git.internal",)
    stored = json.loads(dict(plans[0].container.labels)[label.UP_OPTIONS])
    assert stored == {"v": 1, "policy": "ci", "allow": ["pypi.org"], "allow_private": ["git.internal"],
                      "session": "2h", "idle": "30m"}
    again = up(engine, tmp_path)   # the command line gave nothing: the stored options decide
    assert again.reused and again.sandbox == first.sandbox and len(plans) == 1 and len(reproved) == 1
    assert again.planned.policy.name == "ci" and again.planned.plan.timeout_seconds == 7200
    assert again.options == first.options and again.runs == tuple(again.planned.policy.command)
    same = up(engine, tmp_path, given=frozenset({"policy", "idle"}), policy="ci", options=LayerOptions(idle="30m"))
    assert same.reused and len(reproved) == 2   # what it gives agrees with the stored: attached


def test_up_with_other_options_is_refused_showing_the_stored_ones_and_both_ways_on(tmp_path, started):
    engine = FakeEngine()
    first = up(engine, tmp_path, given=ALL, **CI)
    with pytest.raises(PolicyError) as refused:
        up(engine, tmp_path, given=frozenset({"policy", "agent"}), policy="untrusted",
           options=LayerOptions(agent=AgentChoice(name="codex")))
    said = str(refused.value)
    assert refused.value.exit_code == ExitCode.POLICY_INVALID
    assert "command line: --policy, --agent: expected the options " in said, said
    assert (f"{first.sandbox} was started with: --policy ci --allow pypi.org --allow-private git.internal "
            "--timeout 2h --idle 30m, found --policy untrusted --agent codex") in said, said
    assert "`sandbox up` with none of these options attaches to" in said and "`sandbox up --new …` starts a second" in said
    assert len(started[1]) == 0   # nothing proven, nothing opened


def test_new_starts_a_second_with_a_name_and_copy_of_its_own_and_up_then_asks_which(tmp_path, started):
    plans, _ = started
    engine = FakeEngine()
    first = up(engine, tmp_path, given=ALL)   # untrusted: copy mode
    engine.http._volume_create({"Name": f"{first.sandbox}-2-base"})   # a kept copy of an earlier second: never taken over
    second = up(engine, tmp_path, new=True)
    assert not second.reused and second.sandbox == f"{first.sandbox}-3" and len(plans) == 2
    assert plans[1].copy.name == second.sandbox != plans[0].copy.name
    with pytest.raises(PolicyError, match=f"2 running for .*: {first.sandbox}, {second.sandbox}") as several:
        up(engine, tmp_path)
    assert "give --name NAME" in str(several.value) and "--new" in str(several.value)
    assert up(engine, tmp_path, name=second.sandbox).reused
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert up(engine, elsewhere, name=second.sandbox).planned.facts.workspace.real == str(tmp_path)   # its own
    with pytest.raises(PolicyError, match="--name: expected a sandbox with policy untrusted"):   # a workspace given
        up(engine, elsewhere, name=second.sandbox, given=frozenset({"workspace"}))
    with pytest.raises(PolicyError, match=f"found {first.sandbox} exists"):
        up(engine, tmp_path, new=True, name=first.sandbox)


def test_the_terminal_runs_the_command_the_agents_cli_or_the_shell(tmp_path, started):
    engine = FakeEngine()
    agent = LayerOptions(agent=AgentChoice(name="claude-code"))
    first = up(engine, tmp_path, given=ALL, policy="read-only", options=agent, command=("make", "test"))
    # behind the agent's start-up wrapper (its variables and home files), as `run` runs a command
    assert first.runs[-3:] == ("claude-code", "make", "test") and first.options.agent == "claude-code"
    assert first.runs[:2] == ("/.sandbox/probe/busybox", "sh")
    assert "make" not in " ".join(started[0][0].container.command)   # per terminal, not the plan's
    shell = up(engine, tmp_path)
    assert shell.reused and shell.runs == tuple(shell.planned.policy.command)   # the agent stored, its CLI not asked for
    cli = up(engine, tmp_path, given=frozenset({"agent"}), options=agent)
    assert cli.reused and cli.runs[-2:] == ("claude", "--dangerously-skip-permissions"), cli.runs


def test_the_command_line_attaches_with_none_of_the_options_and_opens_no_terminal_in_a_script(
        tmp_path, started, monkeypatch):
    engine = FakeEngine()
    monkeypatch.setattr(engine_module, "connect", lambda **_: engine)
    result = CliRunner().invoke(main, ["up", str(tmp_path), "-p", "ci", "--idle", "30m", "--no-shell"])
    assert result.exit_code == 0, result.output
    again = CliRunner().invoke(main, ["up", str(tmp_path), "--json", "--", "sh", "-c", "exit 3"])
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert data["reused"] and data["options"] == {"policy": "ci", "idle": "30m"} and data["agent"] is None
    assert data["runs"] == ["sh", "-c", "exit 3"]
    assert "no terminal for sh -c 'exit 3'; use `sandbox exec" in again.stderr
    other = CliRunner().invoke(main, ["up", str(tmp_path), "--idle", "10m", "--no-shell"])
    assert other.exit_code == ExitCode.POLICY_INVALID and "--policy ci --idle 30m, found --policy ci --idle 10m" \
        in other.stderr, other.stderr
    both = CliRunner().invoke(main, ["up", str(tmp_path), "--no-shell", "--", "true"])
    assert both.exit_code == ExitCode.USAGE and "give one or the other" in both.stderr


def test_attaching_needs_no_key_the_kind_it_was_recognised_as_is_stored(tmp_path, started, monkeypatch):
    """A subscription token's kind is told by its shape at the start; a later `up` from a shell
    without the variable wires the agent the same way (the proxy holds the token already)."""
    engine = FakeEngine()
    monkeypatch.setenv("TOKEN_VAR", "sk-ant-oat01-" + "a" * 40)
    agent = LayerOptions(agent=AgentChoice(name="claude-code", key_env="TOKEN_VAR"))
    first = up(engine, tmp_path, given=ALL, policy="read-only", options=agent)
    assert first.options.kind == "oauth" and "sk-ant" not in dict(started[0][0].container.labels)[label.UP_OPTIONS]
    monkeypatch.delenv("TOKEN_VAR")
    again = up(engine, tmp_path)
    digest = dict(started[0][0].container.labels)[label.EFFECTIVE_DIGEST]
    assert again.reused and dict(again.planned.plan.container.labels)[label.EFFECTIVE_DIGEST] == digest
