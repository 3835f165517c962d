"""Host git runs inert (issue 24, case 7): `apply --to` never runs anything the repository
configures — hooks, fsmonitor, signing programs, filters, a promisor remote's lazy fetch — with the
real host git, as root applying a copy of a repository another user owns."""

from __future__ import annotations

import os
import subprocess

import pytest

from launcher.copies.apply import Exported
from launcher.copies.branch import commit_to_branch
from launcher.copies.export import spooled
from launcher.host import hostgit

pytestmark = pytest.mark.usefixtures("private_tempdir")   # their exports' spools go with the test

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"]


def _hostile_repo(tmp_path):
    """A repository whose config and hooks run `touch PWNED-<why>` by every mechanism we know."""
    ws = tmp_path / "repo"
    ws.mkdir()
    pwn = tmp_path / "pwned"
    pwn.mkdir()
    run = lambda *a: subprocess.run(GIT + ["-C", str(ws), *a], check=True, capture_output=True)
    run("init", "-q")
    (ws / "a.txt").write_text("a\n")
    (ws / "ghost.txt").write_text("a blob a partial clone has not fetched\n")
    run("add", "a.txt", "ghost.txt")
    run("commit", "-qm", "start")
    ghost = subprocess.run(GIT + ["-C", str(ws), "rev-parse", "HEAD:ghost.txt"], capture_output=True, text=True).stdout
    (ws / ".git" / "objects" / ghost[:2] / ghost.strip()[2:]).unlink()   # git would lazy-fetch it
    hook = lambda why: f"#!/bin/sh\ntouch {pwn}/{why}\n"
    for name in ("pre-commit", "post-commit", "reference-transaction", "post-index-change", "pre-auto-gc"):
        path = ws / ".git" / "hooks" / name
        path.write_text(hook(name))
        path.chmod(0o755)
    (ws / "evil.sh").write_text(hook("program"))
    (ws / "evil.sh").chmod(0o755)
    (ws / "inc.cfg").write_text(f"[core]\n\tfsmonitor = {ws}/evil.sh\n")
    with open(ws / ".git" / "config", "a") as cfg:
        cfg.write(f"""[core]
	fsmonitor = touch {pwn}/fsmonitor
	sshCommand = touch {pwn}/ssh
	pager = touch {pwn}/pager
	alternateRefsCommand = touch {pwn}/alternate-refs
	hooksPath = .git/hooks
[include]
	path = ../inc.cfg
[commit]
	gpgSign = true
[gpg]
	program = {ws}/evil.sh
[filter "x"]
	clean = touch {pwn}/clean
	smudge = touch {pwn}/smudge
	process = touch {pwn}/process
[remote "origin"]
	url = {tmp_path}/nowhere
	promisor = true
	uploadpack = touch {pwn}/uploadpack;
	partialclonefilter = blob:none
[extensions]
	partialClone = origin
[core]
	repositoryformatversion = 1
[alias]
	commit-tree = !touch {pwn}/alias
""")
    (ws / ".gitattributes").write_text("* filter=x\n")
    return ws, pwn


def _exported(head: str, changes: list[dict], data: dict[str, bytes]) -> Exported:
    return spooled(tuple({**c, "refused": ""} for c in changes), {"head": head}, data)


def test_apply_to_a_branch_runs_nothing_the_repository_configures(tmp_path):
    ws, pwn = _hostile_repo(tmp_path)
    head = subprocess.run(GIT + ["-C", str(ws), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "1000:1000", str(ws)], check=True)
    changes = [{"path": "new.txt", "status": "added", "old": None, "new": {"type": "file", "exec": False}},
               {"path": "a.txt", "status": "deleted", "old": {"type": "file"}, "new": None}]
    commit = commit_to_branch(str(ws), _exported(head, changes, {"new.txt": b"new\n"}), "agent/work", "m")
    assert list(pwn.iterdir()) == []
    shown = subprocess.run(GIT + ["-C", str(ws), "-c", "core.fsmonitor=false", "show", "--name-status",
                                  "--format=%s", commit], capture_output=True, text=True)
    assert "A\tnew.txt" in shown.stdout and "D\ta.txt" in shown.stdout, shown.stderr
    ref = ws / ".git" / "refs" / "heads" / "agent" / "work"
    assert ref.read_text().strip() == commit
    if os.geteuid() == 0:
        assert (ref.stat().st_uid, ref.stat().st_gid) == (1000, 1000)
    with pytest.raises(Exception, match="exists"):
        commit_to_branch(str(ws), _exported(head, changes, {"new.txt": b"new\n"}), "agent/work", "m")
    assert ref.read_text().strip() == commit


@pytest.mark.parametrize("name", [".GIT/hooks/pre-commit", ".git\u200c/hooks/x", "GIT~1/config", "a/.Git/config"])
def test_git_itself_refuses_a_path_that_is_git_on_a_mac_or_windows(tmp_path, name):
    ws, pwn = _hostile_repo(tmp_path)
    head = subprocess.run(GIT + ["-C", str(ws), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    changes = [{"path": name, "status": "added", "old": None, "new": {"type": "file", "exec": True}}]
    with pytest.raises(Exception, match="update-index"):
        commit_to_branch(str(ws), _exported(head, changes, {name: b"#!/bin/sh\n"}), "agent/x", "m")
    assert not (ws / ".git" / "refs" / "heads" / "agent").exists()


def test_config_entries_are_gits_own_reading_with_their_origin(tmp_path, monkeypatch):
    ws, _ = _hostile_repo(tmp_path)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "from-env")
    entries = hostgit.config_entries(str(ws), owner=(1000, 1000) if os.geteuid() == 0 else None)
    fsmonitors = {(e.origin, e.value) for e in entries if e.key == "core.fsmonitor"}
    assert (f"file:{ws}/inc.cfg", f"{ws}/evil.sh") in fsmonitors          # through include.path
    assert any(e.scope == "command" and e.value == "from-env" for e in entries)


def test_every_git_command_of_the_launcher_goes_through_hostgit():
    """One function family runs git on the host; the selftest's scratch repository plays the user's
    own git on purpose (it checks that the user's git runs nothing planted)."""
    import re
    from pathlib import Path

    package = Path(hostgit.__file__).parent.parent
    callers = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if re.search(r"""\[["']git["'],""", p.read_text())}   # an argv that starts with git
    assert callers == {"host/hostgit.py", "selftest/scratch.py"}
