"""Colour only where a person reads it: on a terminal (driven through a real pseudo-terminal here),
never with NO_COLOR set or TERM=dumb, never in --json, pipes, reports or step summaries."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from launcher.cli import output as cli_output
from launcher.doctor import doctor
from launcher.style import BAD, GOOD, WARN

SANDBOX = [sys.executable, "-m", "launcher"]
ROOT = str(Path(__file__).resolve().parent.parent)
ESC = "\x1b["
RED_ERROR = click.style("error:", fg="red", bold=True)


@pytest.fixture
def env(tmp_path_factory):
    """No colour settings, org, user or CI of the machine running the tests; a real terminal type.
    Its directories are beside the workspace (tmp_path), never in it: the launcher refuses that."""
    host = tmp_path_factory.mktemp("host")
    (host / "org.yaml").write_text("version: 1\n")
    values = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "CI")}
    values.update(TERM="xterm-256color", PYTHONPATH=ROOT, XDG_CONFIG_HOME=str(host / "config"),
                  XDG_STATE_HOME=str(host / "state"), SANDBOX_ORG_POLICY=str(host / "org.yaml"),
                  DOCKER_HOST="unix:///nonexistent/docker.sock")   # no test here may reach an engine
    return values


@pytest.fixture
def policies(tmp_path):
    """bad.yaml has lint errors; warn.yaml is valid with one warning (a wildcard allow entry)."""
    (tmp_path / "bad.yaml").write_text("version: 2\n")
    ci = (Path(ROOT) / "policies" / "ci.yaml").read_text()
    (tmp_path / "warn.yaml").write_text(ci.replace("allow: []", 'allow: ["*.example.com"]'))
    return tmp_path


def in_terminal(args: list[str], env: dict, cwd: Path, stdout_is_tty: bool = True) -> tuple[int, str, str]:
    """Run the CLI with stdin and stderr (and stdout unless piped) on a pseudo-terminal.
    Returns (exit code, what the terminal showed, what went to the stdout pipe)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(SANDBOX + args, stdin=slave, stdout=slave if stdout_is_tty else subprocess.PIPE,
                            stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    shown, deadline = b"", time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:   # EIO: the last writer closed the terminal (the process ended)
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        piped = proc.stdout.read() if proc.stdout else b""
        proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, shown.decode(errors="replace"), piped.decode(errors="replace")


def test_an_error_is_red_on_a_terminal(env, tmp_path):
    code, shown, _ = in_terminal(["compile", "-p", "no-such-policy.yaml"], env, tmp_path)
    assert code == 120 and f"sandbox: {RED_ERROR} " in shown


def test_lint_findings_are_coloured_on_a_terminal(env, policies):
    code, shown, _ = in_terminal(["check", "bad.yaml", "-w", str(policies)], env, policies)
    assert code == 120 and f"bad.yaml:1: {RED_ERROR} version" in shown
    code, shown, _ = in_terminal(["check", "warn.yaml", "-w", str(policies)], env, policies)
    line = next(i for i, text in enumerate((policies / "warn.yaml").read_text().splitlines(), 1) if "*.example.com" in text)
    assert code == 0 and f"warn.yaml:{line}: {click.style('warning:', fg='yellow')} network.allow[0]" in shown


def test_doctor_statuses_are_coloured_on_a_terminal(env, tmp_path):
    code, shown, _ = in_terminal(["doctor"], env, tmp_path)
    assert code == 121 and shown.startswith(click.style("fail", fg="red", bold=True) + "  engine  ")


@pytest.mark.parametrize("args", [["compile", "-p", "no-such-policy.yaml"], ["check", "bad.yaml"],
                                  ["check", "warn.yaml"], ["doctor"]])
@pytest.mark.parametrize("setting", [{"NO_COLOR": "1"}, {"NO_COLOR": "yes please"}, {"TERM": "dumb"}])
def test_no_color_or_a_dumb_terminal_means_no_escapes(env, policies, args, setting):
    code, shown, _ = in_terminal(args, {**env, **setting}, policies)
    assert code in (0, 120, 121) and ("error" in shown or "warning" in shown or "fail" in shown)
    assert ESC not in shown


def test_an_empty_no_color_does_not_turn_colour_off(env, tmp_path):
    # no-color.org: only a non-empty value counts.
    code, shown, _ = in_terminal(["compile", "-p", "no-such-policy.yaml"], {**env, "NO_COLOR": ""}, tmp_path)
    assert RED_ERROR in shown


def test_a_pipe_gets_no_colour_while_the_terminal_beside_it_does(env, policies):
    code, shown, piped = in_terminal(["check", "bad.yaml"], env, policies, stdout_is_tty=False)
    assert code == 120 and "bad.yaml:1: error: version" in piped and ESC not in piped
    code, shown, piped = in_terminal(["compile", "-p", "no-such-policy.yaml"], env, policies, stdout_is_tty=False)
    assert RED_ERROR in shown and piped == ""


def test_without_a_terminal_there_is_no_colour(env, policies):
    for args in (["check", "bad.yaml"], ["compile", "-p", "no-such-policy.yaml"], ["doctor"]):
        result = subprocess.run(SANDBOX + args, capture_output=True, text=True, env=env, cwd=policies)
        assert result.returncode in (120, 121) and ESC not in result.stdout + result.stderr


@pytest.mark.parametrize("args", [["check", "bad.yaml", "--json"], ["doctor", "--json"],
                                  ["explain", "untrusted", "--json"]])
def test_json_on_a_terminal_is_never_coloured(env, policies, args):
    _, shown, _ = in_terminal(args, env, policies)
    assert ESC not in shown
    json.loads(shown)


def test_reports_and_step_summaries_are_plain_while_the_terminal_is_coloured(env, policies):
    summary = policies / "summary.md"
    code, shown, _ = in_terminal(["run", "-p", "bad.yaml", "--report", "report.json", "--", "true"],
                                 {**env, "GITHUB_STEP_SUMMARY": str(summary)}, policies)
    assert code == 120 and RED_ERROR in shown
    report = (policies / "report.json").read_text()
    assert json.loads(report)["status"] == "policy-invalid" and "version" in report and ESC not in report
    assert summary.read_text() and ESC not in summary.read_text()


def test_sandbox_help_says_how_to_turn_colour_off(env, tmp_path):
    _, shown, _ = in_terminal(["--help"], env, tmp_path)
    assert "NO_COLOR" in shown


def colour(text: str, kind: str) -> str:
    return f"<{kind}>{text}</{kind}>"


def test_doctor_marks_each_status_and_keeps_the_columns():
    findings = [doctor.Finding(status=s, check="c", detail="d", fix="f") for s in doctor.Status]
    assert doctor.render(findings, colour).splitlines()[:4] == [
        "<good>ok</good>    c                   d", "<warn>warn</warn>  c                   d",
        "                          fix: f", "<bad>fail</bad>  c                   d"]
    assert doctor.render(findings) == doctor.render(findings, lambda text, kind: text)


def test_the_selftest_verdict_column_is_marked_and_nothing_else():
    from launcher.selftest import runner as st

    result = st.PresetResult(policy="untrusted", mode="none", probe_checks=40, seconds=9.0, cases=(
        st.CaseResult(id="write-outside", expected="blocked", observed="pass FAIL", verdict=st.PASS),
        st.CaseResult(id="FAIL", expected="blocked", observed="written", verdict=st.FAIL),
        st.CaseResult(id="net", expected="blocked", observed="no verdict", verdict=st.ERROR)))
    assert [line.split("  blocked")[0] for line in st.table(result, colour).splitlines()[2:]] == [
        "write-outside  <good>pass</good>   ", "FAIL           <bad>FAIL</bad>   ", "net            <bad>ERROR</bad>  "]
    assert st.table(result) == st.table(result, lambda text, kind: text)


def test_status_lines_colour_only_their_opening_verdict(monkeypatch, capsys):
    monkeypatch.setattr(cli_output, "marker", lambda err=False: colour)
    for message in ("probe passed: 40 checks", "warning: wide", "creating x (policy error:)", "built a in 3 s"):
        cli_output.status(message)
    assert capsys.readouterr().err.splitlines() == [
        f"sandbox: <{GOOD}>probe passed</{GOOD}>: 40 checks", f"sandbox: <{WARN}>warning:</{WARN}> wide",
        "sandbox: creating x (policy error:)", f"sandbox: <{GOOD}>built</{GOOD}> a in 3 s"]
    cli_output.error("boom")
    assert capsys.readouterr().err == f"sandbox: <{BAD}>error:</{BAD}> boom\n"
