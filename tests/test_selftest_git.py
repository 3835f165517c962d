"""`sandbox selftest` and .git: the cases for every inventory surface, the scratch workspace as a
real repository, and the outside judgments of host git and the surface report, fed what an escape
leaves (they fail) and what a held line leaves (they pass)."""

from __future__ import annotations

import os
import shutil

from launcher.host import baseline, scan
from launcher.policy import surfaces
from launcher.selftest import scratch
from launcher.selftest import runner as st
from launcher.selftest import cases as sc


def test_every_inventory_surface_has_a_case():
    ids = {c.id for c in sc.IN_SANDBOX}
    bodies = "\n".join(c.body for c in sc.IN_SANDBOX if c.id.startswith("protect."))
    for name in surfaces.PROTECTED:
        assert f'"$WS/{name}' in bodies, name
    # the scratch workspace's hooks path is protected there (git.include_hooks_path proves it read-only)
    assert set(sc.PLANTED.values()) >= {s.example for s in surfaces.INVENTORY if not s.protect} - {scratch.HOOKS_PATH} \
        | {"src/.git", "report-link"}
    assert "git.include_hooks_path" in ids
    assert set(sc.PLANTED) == {c.id for c in sc.PLANTS} and not set(sc.PLANTED) & ids
    # The first ids stay what they were.
    for old in ("protect.git", "protect.sandbox_yaml", "protect.github", "protect.envrc", "protect.vscode",
                "protect.claude", "protect.git_config", "protect.rename_git"):
        assert old in ids
    assert {"git.commondir", "git.skip_worktree", "git.writes"} <= ids
    assert {"outside.surfaces_reported", "outside.host_git"} <= set(sc.OUTSIDE)


def test_the_scratch_workspace_is_a_clean_repository_of_uid_1000(tmp_path):
    ws = scratch.scratch_workspace("sandbox-test-scratch-")
    try:
        assert scratch.host_git(ws, "status", "--porcelain", "--untracked-files=all") == (0, "")
        assert scratch.host_git(ws, "ls-files")[1].split() == ["README.md", scratch.TRACKED]
        assert scratch.modified(ws) == ()
        if os.geteuid() == 0:
            assert {os.lstat(os.path.join(b, n)).st_uid for b, d, f in os.walk(ws) for n in d + f} == {1000}
    finally:
        scratch.remove_tree(ws.rsplit("/", 1)[0])


def _attack(ws: str, canary: str) -> None:
    """What the two escapes leave when .git is writable (as the weakened run does it, on the host)."""
    with open(os.path.join(ws, scratch.TRACKED), "a") as out:
        out.write("changed\n")
    assert scratch.host_git(ws, "update-index", "--skip-worktree", scratch.TRACKED)[0] == 0
    evil = os.path.join(ws, "evil")
    os.makedirs(evil)
    shutil.copytree(os.path.join(ws, ".git", "objects"), os.path.join(evil, "objects"))
    shutil.copytree(os.path.join(ws, ".git", "refs"), os.path.join(evil, "refs"))
    shutil.copy(os.path.join(ws, ".git", "HEAD"), evil)
    with open(os.path.join(evil, "config"), "w") as out:
        out.write(f'[core]\n\tfsmonitor = "touch {canary}; false"\n')
    with open(os.path.join(ws, ".git", "commondir"), "w") as out:
        out.write("../evil\n")


def test_host_git_fails_on_what_the_escapes_leave_and_passes_on_a_held_line():
    ws, canary_dir = scratch.scratch_workspace("sandbox-test-git-"), scratch.scratch_workspace("sandbox-test-git-")
    canary = os.path.join(canary_dir, "git-canary")
    try:
        before = scan.snapshot(ws)
        # Held: the change is only in the work tree, and nothing planted runs.
        with open(os.path.join(ws, scratch.TRACKED), "a") as out:
            out.write("changed\n")
        judged = {r.id: r for r in st.git_judgments(ws, before, canary)}
        assert judged["outside.host_git"].verdict == st.PASS, judged["outside.host_git"].observed
        # nothing was planted in this writable workspace: no surface was judged, which is no pass
        assert judged["outside.surfaces_reported"].verdict == st.FAIL
        _attack(ws, canary)
        judged = {r.id: r for r in st.git_judgments(ws, before, canary)}
        assert os.path.exists(canary), "the planted fsmonitor should have run"
        assert judged["outside.host_git"].verdict == st.FAIL
        assert "canary" in judged["outside.host_git"].observed and scratch.TRACKED in judged["outside.host_git"].observed
    finally:
        scratch.remove_tree(ws.rsplit("/", 1)[0])
        scratch.remove_tree(canary_dir.rsplit("/", 1)[0])


def test_judge_host_git():
    status, diff = " M tracked.txt\n", "diff --git a/tracked.txt b/tracked.txt\n+changed\n"
    assert st.judge_host_git(False, ("tracked.txt",), status, diff).verdict == st.PASS
    assert st.judge_host_git(False, (), "", "").verdict == st.PASS            # a read-only workspace: nothing changed
    assert st.judge_host_git(True, ("tracked.txt",), status, diff).verdict == st.FAIL      # the canary appeared
    assert st.judge_host_git(False, ("tracked.txt",), "", "").verdict == st.FAIL           # skip-worktree hid it
    assert st.judge_host_git(False, ("tracked.txt",), status, "").verdict == st.FAIL       # not in git diff
    assert st.judge_host_git(False, ("tracked.txt",), "fatal: not a git repository\n", "").verdict == st.FAIL


def test_judge_surfaces_reported():
    planted = tuple(sc.PLANTED.values())
    assert st.judge_surfaces_reported(planted, planted + (".git",)).verdict == st.PASS
    assert st.judge_surfaces_reported((), (), writable=False).verdict == st.PASS   # nothing could be planted
    assert st.judge_surfaces_reported(planted[:1], (), writable=False).verdict == st.FAIL
    # a writable workspace where a plant did not happen: that surface was never judged
    nothing = st.judge_surfaces_reported((), ())
    assert nothing.verdict == st.FAIL and "not planted" in nothing.observed
    partly = st.judge_surfaces_reported(planted[1:], planted)
    assert partly.verdict == st.FAIL and planted[0] in partly.observed
    result = st.judge_surfaces_reported(planted, planted[1:])
    assert result.verdict == st.FAIL and planted[0] in result.observed


def test_the_report_lists_what_the_report_cases_plant(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".gitlab-ci.yml").write_text(f"include:\n  - local: '/{scratch.INCLUDED_DIR}/*.yml'\n")   # as scratch has it
    before = scan.snapshot(str(ws))
    for path in sc.PLANTED.values():
        if path == "report-link":
            os.symlink(str(tmp_path), ws / path)
        else:
            (ws / path).parent.mkdir(parents=True, exist_ok=True)
            (ws / path).write_text("# planted\n") if path != "src/.git" else (ws / path).mkdir()
    reported = tuple(c.path for c in baseline.changes(str(ws), before))
    assert st.judge_surfaces_reported(tuple(sc.PLANTED.values()), reported).verdict == st.PASS
    scratch.remove_planted(str(ws), tuple(sc.PLANTED.values()))
    assert os.listdir(ws) == [".gitlab-ci.yml"]
