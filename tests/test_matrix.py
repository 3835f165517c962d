"""The enforcement matrix (field or protection x target): complete, every enforced cell proven by
a named test, every unenforced one said by explain, compile and check."""

from __future__ import annotations

import importlib
import json

import pytest
from click.testing import CliRunner

from conftest import BIND, fake_facts, untrusted_bind, preset
from fakes import Recorder
from launcher.check import explain
from launcher.cli import main
from launcher.engine.enginefake import FakeEngine
from launcher.errors import ProbeFailed
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.plan.enforcement import Component
from launcher.plan.lifetime import up_main
from launcher.policy.layers import FIELDS
from launcher.targets import FORMATS, TARGETS, protections

# (row, target) -> the test that fails without that enforcement
PROOF = {
    ("limits.timeout", "run"): "test_engine::test_timeout_stops_the_agent_with_its_own_exit_code",
    ("limits.timeout", "up"): "test_engine::test_up_stops_at_its_time_limit_whoever_is_attached_and_warns_the_shell_first",
    ("limits.timeout", "devcontainer"): "test_matrix::test_a_dev_container_ends_at_its_time_limit",
    ("docker inspect matches the plan", "run"): "test_verify::test_mismatch_refuses_the_start_and_removes_the_container",
    ("docker inspect matches the plan", "up"): "test_matrix::test_up_refuses_a_container_that_differs_from_the_plan",
    ("bind sources unchanged since compile", "run"): "test_verify::test_a_vanished_bind_source_refuses_the_start",
    ("bind sources unchanged since compile", "up"): "test_matrix::test_up_refuses_a_vanished_bind_source",
    ("surface report (files host tools run)", "run"):
        "test_git_escape::test_a_nested_repository_is_reported_and_ci_fails_with_its_own_code",
    ("surface report (files host tools run)", "up"):
        "test_git_escape::test_down_reports_what_the_agent_of_an_up_sandbox_planted",
}


def test_every_row_has_a_cell_for_every_target_and_the_targets_are_every_way_a_sandbox_starts():
    assert set(TARGETS) == {"run", "up", "devcontainer"} | {t.name for t in FORMATS.values() if t.external}
    assert {t.name for t in TARGETS.values() if not t.external} == {"run", "up"}
    assert tuple(protections.CELLS) == tuple(TARGETS)
    for target in TARGETS.values():
        assert tuple(target.cells) == tuple(protections.ROWS.values()), target.name
    policy = preset("ci")
    for target in TARGETS:   # every field resolves for every target, in every variant the presets have
        from launcher.policy.layers import effective, full_layer, LayerKind

        eff = effective(policy, [full_layer(LayerKind.BASE, policy)])
        assert [r.field for r in explain.rows(eff, target)] == list(FIELDS)


def test_every_enforced_cell_names_a_test_that_exists():
    enforced = {(row, t.name) for t in TARGETS.values() for row, e in t.cells.items()
                if e.component is not Component.NOTHING}
    assert enforced == set(PROOF)
    for module, name in (p.split("::") for p in PROOF.values()):
        assert callable(getattr(importlib.import_module(module), name)), name


@pytest.mark.parametrize("target", ["argv", "compose", "devcontainer"])
def test_explain_and_check_say_what_a_target_does_not_enforce(target):
    runner = CliRunner()
    # read-only: a bind workspace, which another tool can launch (a copy needs run or up: refused)
    text = runner.invoke(main, ["explain", "read-only", "--target", target, "-w", "."]).output
    data = json.loads(runner.invoke(main, ["explain", "read-only", "--target", target, "--json", "-w", "."]).output)
    for row, why in TARGETS[target].cannot():
        assert f"not enforced for {target} (`run` enforces it): {row}: {why}" in text
    assert {n["field"] for n in data["not_enforced_here"]} == {row for row, _ in TARGETS[target].cannot()}
    assert "limits.timeout" in {n["field"] for n in data["not_enforced_here"]} or target == "devcontainer"
    strict = runner.invoke(main, ["check", "read-only", "--target", target, "--strict", "-w", "."])
    assert strict.exit_code == 120 and "not enforced by" in strict.output
    assert runner.invoke(main, ["check", "read-only", "--target", target, "-w", "."]).exit_code == 0
    assert runner.invoke(main, ["check", "untrusted", "--target", target, "-w", "."]).exit_code == 120   # a copy


def test_run_and_up_enforce_everything_the_table_knows():
    assert TARGETS["run"].cannot() == TARGETS["up"].cannot() == []


@pytest.mark.parametrize("fmt", ["argv", "compose"])
def test_compile_warns_on_stderr_about_what_the_format_does_not_enforce(fmt, tmp_path):
    result = CliRunner().invoke(main, ["compile", "--format", fmt, *BIND, "-w", str(tmp_path)])
    assert result.exit_code == 0
    assert f"warning: {fmt} does not enforce limits.timeout" in result.output


def test_a_dev_container_ends_at_its_time_limit():
    from launcher.targets import devcontainer

    plan = compile_policy(preset("devcontainer"), fake_facts(), kind="up")
    dockerfile = devcontainer.files(plan)["Dockerfile"]
    assert json.dumps(list(up_main(12 * 3600, 12 * 3600))[-4:])[1:-1] in dockerfile   # the preset: 12h, idle 12h


def _up_plan(**facts):
    return compile_policy(untrusted_bind(), fake_facts(**facts), kind="up")


def test_up_refuses_a_container_that_differs_from_the_plan():
    engine = FakeEngine(tamper=lambda a: a["HostConfig"].update(Privileged=True))
    with pytest.raises(ProbeFailed, match="Privileged"):
        launch.up(engine, _up_plan(), Recorder())
    assert engine.calls == ["create", "remove"]


def test_up_refuses_a_vanished_bind_source():
    engine = FakeEngine()
    with pytest.raises(ProbeFailed, match="changed or vanished"):
        launch.up(engine, _up_plan(workspace="/nonexistent/repo"), Recorder())
    assert engine.calls == ["create", "remove"]
