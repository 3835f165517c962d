"""diff and apply on a real copy, on a real terminal (issue 44, item 6): the diff coloured and
paged there and plain on a pipe, git's own records in .git not listed while what the agent
planted there is, and `apply -i` writing only the paths answered yes."""

from __future__ import annotations

import json
import os

import pytest

from conftest import owned_workspace
from test_copy import SANDBOX, repo, run_copy, sandbox, snapshot  # noqa: F401 - repo: a fixture
from test_copy_view import ESC, on_pty, pager  # noqa: F401 - pager: a fixture
from test_copy_wayback import tree

pytestmark = pytest.mark.engine
RED_BOLD = f"{ESC}31m{ESC}1m"


@pytest.fixture
def terminal(tmp_path):
    """The test's environment (its engine, state and config) on a colour terminal, no NO_COLOR or CI;
    TMPDIR of its own, so that what apply spools can be seen gone."""
    values = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "PAGER", "LESS")}
    (tmp_path / "tmp").mkdir()
    return values | {"TERM": "xterm-256color", "PYTHONPATH": os.path.dirname(os.path.dirname(__file__)),
                     "TMPDIR": str(tmp_path / "tmp")}


def test_diff_is_coloured_and_paged_on_a_terminal_and_plain_on_a_pipe(engine, tmp_path, terminal, pager):
    ws, name = owned_workspace(tmp_path), f"paged-{os.getpid()}"
    tree(ws, {"a.txt": "one\ntwo\n"})
    log, paged = tmp_path / "pager.log", tmp_path / "paged.txt"
    try:
        assert run_copy(ws, name, "bash", "-c", "echo three >> a.txt && echo evil > .envrc").returncode == 0
        code, shown, _ = on_pty(SANDBOX + ["diff", name], terminal | {"PAGER": str(pager)}, tmp_path)
        assert code == 0 and f"changes of {name} at checkpoint" in shown and "three" not in shown, shown
        text = paged.read_text()
        assert f"{ESC}32m+three{ESC}0m" in text and f"{RED_BOLD}REFUSED: protected (.envrc" in text, text
        assert f"{ESC}1mdiff --sandbox a/a.txt b/a.txt{ESC}0m" in text and log.read_text().startswith("ran ")
        on_pty(SANDBOX + ["diff", name, "--stat"], terminal | {"PAGER": str(pager)}, tmp_path)
        assert " a.txt  " in paged.read_text() and len(log.read_text().splitlines()) == 2
        log.unlink()

        code, shown, _ = on_pty(SANDBOX + ["diff", name, "--no-pager"], terminal | {"PAGER": str(pager)}, tmp_path)
        assert code == 0 and f"{ESC}32m+three" in shown and not log.exists()
        code, shown, _ = on_pty(SANDBOX + ["diff", name, "--no-pager"], terminal | {"NO_COLOR": "1"}, tmp_path)
        assert code == 0 and "+three" in shown and ESC not in shown
        code, shown, piped = on_pty(SANDBOX + ["diff", name], terminal | {"PAGER": str(pager)}, tmp_path,
                                    stdout_is_tty=False)
        assert code == 0 and "+three" in piped and "REFUSED" in piped and ESC not in piped and not log.exists()
        code, shown, _ = on_pty(SANDBOX + ["diff", name, "--json"], terminal | {"PAGER": str(pager)}, tmp_path)
        assert code == 0 and not log.exists() and ESC not in shown
        assert json.loads(shown[shown.index("{"):])["changes"][0]["path"] == ".envrc"
    finally:
        sandbox("discard", "--yes", name)


GIT = ["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com"]


def test_git_s_own_records_are_not_listed_but_what_the_agent_planted_in_git_is(engine, repo):
    name = f"records-{os.getpid()}"
    git_before = {k: v for k, v in snapshot(repo).items() if k.startswith(".git")}
    agent = (f"git status >/dev/null && echo more >> README.md && {' '.join(GIT)} commit -qam agent && "
             "echo evil > .git/hooks/pre-commit")
    try:
        ran = run_copy(repo, name, "bash", "-c", agent)
        assert ran.returncode == 0, ran.stderr
        found = {c["path"]: c for c in json.loads(sandbox("diff", name, "--json").stdout)["changes"]}
        records = [p for p in found if p.startswith((".git/index", ".git/objects/", ".git/logs/", ".git/COMMIT"))]
        assert ".git/index" in records and len(records) >= 5 and all(found[p]["refused"] for p in records)
        stat = sandbox("diff", name, "--stat")
        assert ".git/hooks/pre-commit" in stat.stdout and "REFUSED" in stat.stdout and "README.md" in stat.stdout
        assert ".git/refs/heads/" in stat.stdout                     # the agent's commit is not carried back
        assert not any(p in stat.stdout for p in records), stat.stdout
        assert f"not listed: {len(records)} changes git made to its own records in .git (" in stat.stderr
        patch = sandbox("diff", name)
        assert "b/.git/hooks/pre-commit" in patch.stdout and not any(p in patch.stdout for p in records)

        applied = sandbox("apply", name, "--json")
        assert applied.returncode == 0, applied.stderr
        assert "not applied: .git/hooks/pre-commit" in applied.stderr and ".git/index" not in applied.stderr
        assert set(records) <= set(json.loads(applied.stdout)["refused"])
        assert {k: v for k, v in snapshot(repo).items() if k.startswith(".git")} == git_before
        assert (repo / "README.md").read_text().endswith("more\n")
    finally:
        sandbox("discard", "--yes", name)


def test_only_git_s_records_changed_says_no_changes_apply_could_write(engine, repo):
    name = f"status-{os.getpid()}"
    try:
        assert run_copy(repo, name, "git", "status").returncode == 0
        shown = sandbox("diff", name)
        assert shown.returncode == 0 and shown.stdout == "", shown.stdout
        assert f"no changes in {name} that apply could write" in shown.stderr
        assert "not listed: 1 change git made to its own records in .git (index)" in shown.stderr, shown.stderr
    finally:
        sandbox("discard", "--yes", name)


AGENT = "echo A > a.txt && echo B > b.txt && echo new > c.txt && mkdir -p pkg && echo x=1 > pkg/.npmrc && echo e > .envrc"


def test_apply_i_writes_the_paths_answered_yes_and_leaves_the_rest_in_the_copy(engine, tmp_path, terminal):
    ws, name = owned_workspace(tmp_path), f"ask-{os.getpid()}"
    tree(ws, {"a.txt": "a\n", "b.txt": "b\n"})
    spool = tmp_path / "tmp"
    try:
        assert run_copy(ws, name, "bash", "-c", AGENT).returncode == 0
        before = snapshot(ws)
        # Ctrl-C at the second question (a SIGINT: the pty is the launcher's controlling terminal)
        code, shown, piped = on_pty(SANDBOX + ["apply", name, "-i", "--json"], terminal, tmp_path,
                                    answers=("y", "\x03"), stdout_is_tty=False)
        assert code == 130 and "interrupted: nothing was written" in shown and snapshot(ws) == before, shown
        assert json.loads(piped)["exit_code"] == 130 and not list(spool.iterdir())   # nothing half-written either
        # the end of input (Ctrl-D) is no answer: nothing is written
        code, shown, _ = on_pty(SANDBOX + ["apply", name, "-i"], terminal, tmp_path, answers=("y", "\x04"))
        assert code == 120 and "the end of input at change 2; nothing was written" in shown, shown
        assert snapshot(ws) == before and not list(spool.iterdir())

        # asked in path order: a.txt, b.txt, c.txt, pkg/.npmrc (.envrc is refused: never asked)
        code, shown, piped = on_pty(SANDBOX + ["apply", name, "-i", "--json"], terminal, tmp_path,
                                    answers=("y", "n", "n", "y"), stdout_is_tty=False)
        assert code == 0, shown
        assert shown.count("write it? [y/N/q]: ") == 4 and "NEEDS --allow-surface" in shown and ".envrc  " not in shown
        assert (ws / "a.txt").read_text() == "A\n" and (ws / "b.txt").read_text() == "b\n"
        assert not (ws / "c.txt").exists() and (ws / "pkg" / ".npmrc").read_text() == "x=1\n"
        assert not (ws / ".envrc").exists() and "not applied: .envrc" in shown
        last = shown.strip().splitlines()[-1]
        assert "applied 2 changes" in last and "2 answered no: work remains in the copy" in last, last
        assert json.loads(piped)["remaining"] == ["b.txt", "c.txt"] and not list(spool.iterdir())

        # q: that path and the rest stay in the copy; what was answered yes before it is written
        # (a.txt is asked again, though the host holds it now: a yes or no to it changes nothing)
        code, shown, _ = on_pty(SANDBOX + ["apply", name, "-i"], terminal, tmp_path, answers=("n", "y", "q"))
        assert code == 0 and shown.count("write it? [y/N/q]: ") == 3, shown
        assert (ws / "b.txt").read_text() == "B\n" and not (ws / "c.txt").exists()
        assert "q: this change and the 1 after it stay in the copy" in shown and "3 answered no" in shown, shown

        again = sandbox("apply", name)                                # what was answered no is still there
        assert again.returncode == 0 and (ws / "c.txt").read_text() == "new\n"
    finally:
        sandbox("discard", "--yes", name)

