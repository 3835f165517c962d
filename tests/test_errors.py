"""One error handler for every command: stable exit codes, one line for a bug (the traceback only
with --debug), 130/143 for signals, and a clean-up failure never masking the primary error."""

from __future__ import annotations

import json
import os

import click
import pytest
from click.testing import CliRunner

from launcher import launch, pipeline
from launcher.cli import main
from launcher.errors import EngineError, ExitCode, PolicyError, ProbeFailed, Problem, Terminated, also_failed


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("raised, code", [
    (RuntimeError("boom"), ExitCode.INTERNAL),
    (KeyboardInterrupt(), 130),
    (Terminated(), 143),
    (PolicyError([Problem(file="f", path="p", expected="e", found="x")]), ExitCode.POLICY_INVALID),
    (EngineError("no engine"), ExitCode.ENGINE),
])
@pytest.mark.parametrize("command", [["compile"], ["explain"], ["check"], ["devcontainer", "."]])
def test_every_command_maps_errors_and_signals_to_their_codes(monkeypatch, tmp_path, raised, code, command):
    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(pipeline, "layered", fail)
    monkeypatch.setattr("launcher.lintstack.check", fail)
    monkeypatch.chdir(tmp_path)
    result = invoke(*command)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if code == ExitCode.INTERNAL:
        assert result.stderr.strip().splitlines() == [
            "sandbox: error: internal error: RuntimeError: boom (run with --debug for the traceback)"]


def test_debug_shows_the_traceback_of_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.setattr(pipeline, "layered", lambda *a, **k: 1 / 0)
    result = invoke("--debug", "compile", "-w", str(tmp_path))
    assert result.exit_code == ExitCode.INTERNAL and "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_run_report_and_exit_code_agree_on_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.setattr(pipeline, "compiled", lambda *a, **k: {}["missing"])
    report = tmp_path / "report.json"
    result = invoke("run", "-w", str(tmp_path), "--report", str(report), "--", "true")
    data = json.loads(report.read_text())
    assert result.exit_code == data["exit_code"] == ExitCode.INTERNAL
    assert data["status"] == "error" and "KeyError" in data["error"]


def test_a_clean_up_failure_is_reported_beside_the_primary_error(monkeypatch):
    from conftest import fake_facts
    from launcher.compiler import compile_policy
    from launcher.enginefake import FakeEngine
    from conftest import preset

    plan = compile_policy(preset("untrusted"), fake_facts())
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, env, podman=False: ["ReadonlyRootfs: expected True, found False"])
    with pytest.raises(ProbeFailed) as info:
        launch.create_verified(FakeEngine(fail={"DELETE /containers/": "the engine went away"}), plan)
    assert info.value.exit_code == ExitCode.PROBE_FAILED

    @click.command()
    def boom():
        raise info.value

    main.add_command(boom)
    try:
        result = invoke("boom")
    finally:
        main.commands.pop("boom")
    assert result.exit_code == ExitCode.PROBE_FAILED
    assert "does not match the plan" in result.stderr and "also: removing" in result.stderr
    assert "the engine went away" in result.stderr


def test_also_failed_keeps_every_message():
    error = KeyboardInterrupt()
    also_failed(error, "one")
    also_failed(error, "two")
    from launcher.errors import secondary_failures

    assert secondary_failures(error) == ["one", "two"] and secondary_failures(None) == []


def test_version_names_the_commit_of_a_checkout():
    import re
    from pathlib import Path

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("sandbox 0.")
    if (Path(__file__).resolve().parent.parent / ".git").is_dir():
        assert re.search(r"\(commit [0-9a-f]{12}(-dirty)?\)$", result.stdout.strip()), result.stdout


# The CLI refuses before it reaches an engine (moved from tests/test_engine.py: no engine needed).
def sandbox(*args, **kwargs):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_engine_unavailable_has_its_exit_code_and_a_hint(workspace, tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/nothing.sock")
    result = sandbox("run", "-w", str(workspace), "--", "true", env=env)
    assert result.returncode == ExitCode.ENGINE and "cannot reach the Docker engine" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_policy_has_its_exit_code_and_no_traceback(workspace, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: bad\ndescription: x\nnetwork: {mode: host}\n")
    result = sandbox("run", "-p", str(bad), "-w", str(workspace), "--", "true")
    assert result.returncode == ExitCode.POLICY_INVALID
    assert f"{bad}: network.mode: expected one of 'none'" in result.stderr and "Traceback" not in result.stderr
