"""`sandbox trust list|approve|revoke`: the approvals `run` records, shown, made and removed from
the command line; without a terminal nothing is approved unless --yes or the digest says so."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.policy import trust
from test_trust import NARROW, SANDBOX, compile_, env, in_terminal, pids, repo, store  # noqa: F401 - env, repo: fixtures

DIGEST = trust.sha256(NARROW)


def cli(*args: str):
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


def approvals() -> list[dict]:
    result = cli("trust", "list", "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_without_a_terminal_approve_needs_yes_or_the_digest_and_records_nothing_else(repo):
    result = cli("trust", "approve", "-w", str(repo))
    assert result.exit_code == 2 and f"--sha256 {DIGEST}" in result.stderr
    assert "  | limits: {pids: 64}" in result.stderr   # the file was shown, with its digest
    assert approvals() == []
    wrong = cli("trust", "approve", "-w", str(repo), "--sha256", "0" * 64)
    assert wrong.exit_code == 120 and f"found sha256 {DIGEST}" in wrong.stderr and approvals() == []
    assert cli("trust", "approve", "-w", str(repo), "--sha256", "nothex").exit_code == 2


@pytest.mark.parametrize("flags", [["--yes"], ["--sha256", DIGEST], ["--sha256", f"sha256:{DIGEST.upper()}"]])
def test_approve_records_what_run_then_applies_and_revoke_removes_it(repo, flags):
    env = dict(os.environ)   # the launcher in another process, with the state directory of these commands
    result = cli("trust", "approve", "-w", str(repo), *flags)
    assert result.exit_code == 0, result.stderr
    assert f"approved {repo}/.sandbox.yaml (sha256 {DIGEST})" in result.stderr
    listed = approvals()
    assert [(a["workspace"], a["sha256"], a["state"]) for a in listed] == [(str(repo), DIGEST, "current")]
    assert pids(compile_(repo, env)) == 64
    again = cli("trust", "approve", "-w", str(repo), "--yes")
    assert again.exit_code == 0 and "approved already" in again.stderr
    text = cli("trust", "list")
    assert text.exit_code == 0 and text.stdout.startswith(f"{repo}  sha256 {DIGEST}")
    gone = cli("trust", "revoke", "-w", str(repo))
    assert gone.exit_code == 0 and f"revoked the approval of {repo}/.sandbox.yaml" in gone.stderr
    assert approvals() == [] and compile_(repo, env).returncode == 120


def test_list_says_when_the_file_changed_or_went(repo):
    assert cli("trust", "approve", "-w", str(repo), "--yes").exit_code == 0
    (repo / ".sandbox.yaml").write_bytes(NARROW + b"# more\n")
    assert approvals()[0]["state"] == "changed since"
    (repo / ".sandbox.yaml").unlink()
    assert approvals()[0]["state"] == "no .sandbox.yaml now"
    (repo / ".sandbox.yaml").symlink_to("/etc/hostname")
    assert approvals()[0]["state"] == "unreadable now: a symbolic link"
    (repo / ".sandbox.yaml").unlink()
    empty = cli("trust", "revoke", "-w", str(repo))   # revoking needs no file
    assert empty.exit_code == 0 and approvals() == []


def test_errors_in_words(repo, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    missing = cli("trust", "approve", "-w", str(bare), "--yes")
    assert missing.exit_code == 120 and f"{bare}/.sandbox.yaml: expected a repository policy to approve, " \
                                          "found no such file" in missing.stderr
    nothing = cli("trust", "revoke", "-w", str(repo))
    assert nothing.exit_code == 120 and "found none recorded" in nothing.stderr and "sandbox trust list" in nothing.stderr
    (repo / ".sandbox.yaml").write_text("version: 1\nlimits: {pidz: 64}\n")
    invalid = cli("trust", "approve", "-w", str(repo), "--yes")
    assert invalid.exit_code == 120 and "pidz" in invalid.stderr and approvals() == []
    empty = cli("trust", "list")
    assert empty.exit_code == 0 and empty.stdout == "" and "no repository policy is approved" in empty.stderr


def test_a_trust_store_inside_the_workspace_is_refused(repo, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(repo / "state"))
    result = cli("trust", "approve", "-w", str(repo), "--yes")
    assert result.exit_code == 120 and "a trust store outside the workspace" in result.stderr
    assert not (repo / "state").exists()


def test_in_a_terminal_approve_asks_and_no_records_nothing(repo, env):
    code, screen = in_terminal(["trust", "approve", "-w", str(repo)], env, b"n\n")
    assert code == 120 and "[y/N]" in screen and store(env) == {}
    code, screen = in_terminal(["trust", "approve", "-w", str(repo)], env, b"y\n")
    assert code == 0 and "  | limits: {pids: 64}" in screen and store(env)[str(repo)]["sha256"] == DIGEST


def test_the_refusal_names_the_command_that_approves(repo, env):
    result = compile_(repo, env)
    assert result.returncode == 120 and f"`sandbox trust approve -w {repo}`" in result.stderr
    assert "in a terminal" not in result.stderr
    check = subprocess.run(SANDBOX + ["check", "-w", str(repo)], capture_output=True, text=True, env=env, timeout=60)
    assert f"sandbox trust approve -w {repo}" in check.stdout + check.stderr
