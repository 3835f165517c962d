"""The inventory of host-executed surfaces, the workspace scan and the before/after comparison."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from launcher import gitscan, scan
from launcher.surfaces import BY_NAME, INVENTORY, PROTECTED, compare

ROOT = Path(__file__).resolve().parent.parent


def test_the_inventory_is_one_list_of_names_each_with_a_reason_and_the_docs_table_matches():
    names = [s.name for s in INVENTORY]
    assert len(names) == len(set(names)) and all("/" not in n and n for n in names)
    assert all(s.tools and s.why for s in INVENTORY)
    page = (ROOT / "docs" / "security.md").read_text()   # "What the agent leaves behind"
    table = page[page.index("| surface | tools"):]
    table = table[:table.index("\n\n")]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \|[^|]*\| (protected|reported)", table, re.M)}
    assert rows == {s.name: "protected" if s.protect else "reported" for s in INVENTORY}


def test_compare_reports_new_changed_and_removed_surfaces_and_new_links_out():
    before = {".envrc": "file:1", "a/.gitignore": "file:1", "old": "link-out:/etc", "gone/.vscode": "dir:1"}
    after = {".envrc": "file:2", "a/.gitignore": "file:2", "b/.gitignore": "file:3", "old": "link-out:/etc",
             "new": "link-out:/home/u/.ssh/id_rsa", "src/.git": "dir:9"}
    got = {(c.path, c.what) for c in compare(before, after)}
    assert got == {(".envrc", "changed"), ("b/.gitignore", "new"), ("new", "link-out"), ("src/.git", "new"),
                   ("gone/.vscode", "removed")}   # a changed .gitignore shows in `git diff`: not repeated


def test_snapshot_finds_surfaces_at_any_depth_and_ignores_placeholders(tmp_path):
    (tmp_path / ".npmrc").mkdir()                      # an empty protected name at the root: a mount point
    (tmp_path / "src" / ".git").mkdir(parents=True)
    (tmp_path / "src" / ".git" / "config").write_text("[core]\n")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / ".envrc").write_text("x\n")
    (tmp_path / "key").symlink_to("/etc/passwd")
    (tmp_path / "inside").symlink_to(tmp_path / "src")
    snap = scan.snapshot(str(tmp_path))
    assert set(snap) == {"src/.git", "deep/er/.envrc", "key"}
    assert snap["key"] == "link-out:/etc/passwd"


def test_a_git_fingerprint_covers_config_and_hooks_but_not_objects(tmp_path):
    git = tmp_path / ".git"
    (git / "objects").mkdir(parents=True)
    (git / "config").write_text("[core]\n")
    first = scan.snapshot(str(tmp_path))[".git"]
    (git / "objects" / "ab").write_text("blob")
    assert scan.snapshot(str(tmp_path))[".git"] == first
    (git / "config").write_text('[core]\n\tfsmonitor = "touch /tmp/x"\n')
    assert scan.snapshot(str(tmp_path))[".git"] != first


def test_git_dirs_follow_a_worktree_gitfile_out_and_a_submodule_gitfile_in(tmp_path):
    git = ["git", "-c", "user.name=u", "-c", "user.email=u@example.invalid"]
    main = tmp_path / "main"
    subprocess.run(git + ["init", "-q", str(main)], check=True)
    subprocess.run(git + ["-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run(git + ["-C", str(main), "worktree", "add", "-q", str(tmp_path / "wt")], check=True)
    wt = str(tmp_path / "wt")
    found = gitscan.discover(wt, scan.snapshot(wt), writable_git=False, owner=None)
    assert found.protect == () and found.outside[:2] == (str(main / ".git" / "worktrees" / "wt"), str(main / ".git"))
    assert any("not reachable from the sandbox" in n for n in found.notes)
    (tmp_path / "wt" / "meta").mkdir()
    (tmp_path / "wt" / ".git").unlink()
    (tmp_path / "wt" / ".git").write_text("gitdir: meta\n")
    (tmp_path / "wt" / "lib" / ".git").mkdir(parents=True)
    assert gitscan.discover(wt, scan.snapshot(wt), writable_git=False, owner=None).protect == ("lib/.git", "meta")


def test_every_protected_name_is_in_the_inventory():
    assert set(PROTECTED) <= set(BY_NAME) and ".git" not in PROTECTED   # .git follows workspace.git


def test_empty_mount_points_of_other_sandboxes_are_not_changes(tmp_path):
    before = scan.snapshot(str(tmp_path))
    (tmp_path / ".git").mkdir()           # another sandbox's placeholder for a missing .git
    (tmp_path / ".github").mkdir()
    assert scan.snapshot(str(tmp_path)) == before
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / ".git" / "info").mkdir()   # empty: nothing in it runs
    first = scan.snapshot(str(tmp_path))
    (tmp_path / ".git" / "info").rmdir()
    assert scan.snapshot(str(tmp_path)) == first


def test_the_scan_never_blocks_on_a_fifo_nor_follows_a_swapped_symlink(tmp_path):
    """A downloaded repository may hold a gitfile whose target's commondir is a FIFO; another
    sandbox's agent may swap a surface for one. Opening either by path would hang the launcher."""
    (tmp_path / "meta").mkdir()
    os.mkfifo(tmp_path / "meta" / "commondir")
    (tmp_path / ".git").write_text("gitdir: meta\n")
    os.mkfifo(tmp_path / ".envrc")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".npmrc").symlink_to("/etc/shadow")
    snap = scan.snapshot(str(tmp_path))
    found = gitscan.discover(str(tmp_path), snap, writable_git=False, owner=None)
    assert "meta" in found.protect and any("meta/commondir is neither" in r for r in found.refusals)
    assert snap[".envrc"].startswith("other:") and snap["sub/.npmrc"] == "link:/etc/shadow"
    assert scan._open_regular(str(tmp_path / ".envrc")) is None
    assert scan._open_regular(str(tmp_path / "sub" / ".npmrc")) is None


def test_a_path_the_agent_chose_never_reaches_the_terminal_raw():
    """A directory named with a terminal escape or a line break could rewrite the user's screen
    or forge a line of the report."""
    from launcher.surfaces import render

    lines = render(compare({}, {"a\x1b]0;owned\x07\nnew b/.git": "dir:1"}))
    assert len(lines) == 2 and "\x1b" not in lines[1] and "\n" not in lines[1]
    assert lines[1].startswith("  new a\\u001b]0;owned\\u0007\\u000anew b/.git: git")
