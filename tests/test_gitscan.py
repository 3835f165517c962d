"""Bind-mode git discovery without an engine: what gitscan finds and decides (read-only, outside,
refused), what the surface report sees changing, and what the compiler makes of it. The real
engine and the real host git as the owner: tests/test_git_discovery.py."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import fake_facts, untrusted_bind
from launcher.errors import PolicyError
from launcher.host import gitgraph, gitscan, scan
from launcher.host.gitdirs import GitFacts
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import MountKind
from launcher.policy.model import BUILTIN_PROTECTED
from launcher.policy.surfaces import compare, named

GIT = ["git", "-c", "user.name=u", "-c", "user.email=u@example.invalid", "-c", "protocol.file.allow=always"]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(GIT + list(args), cwd=cwd, check=True, capture_output=True)


def discover(ws: Path, writable_git: bool = False) -> GitFacts:
    return gitscan.discover(str(ws), scan.snapshot(str(ws)), writable_git=writable_git, owner=None)


@pytest.fixture
def ws(tmp_path) -> Path:
    """A repository with the nested layouts of issue 24 case 1, and one outside the workspace."""
    ws = tmp_path / "ws"
    (ws / ".repos").mkdir(parents=True)
    git(ws, "init", "-q")
    git(ws, "init", "-q", f"--separate-git-dir={ws}/.repos/sub", "sub")
    (ws / "sub" / ".git").write_text("gitdir: ../.repos/sub\n")                       # relative
    git(ws / "sub", "commit", "-q", "--allow-empty", "-m", "x")
    git(ws, "init", "-q", f"--separate-git-dir={ws}/.repos/sub2", "deep/er/sub2")  # absolute, at depth
    git(ws, "init", "-q", "--bare", "vendor/lib.git")
    (ws / ".repos" / "sub2" / "objects" / "info" / "alternates").write_text("../../../vendor/lib.git/objects\n")
    git(ws, "init", "-q", f"--separate-git-dir={ws}/.repos/lnk-git", "lnk-tmp")
    subprocess.run(["rm", "-rf", str(ws / "lnk-tmp")], check=True)
    (ws / "lnk").mkdir()
    os.symlink("../.repos/lnk-git", ws / "lnk" / ".git")
    git(ws / "sub", "worktree", "add", "-q", "../wtree")
    git(tmp_path, "init", "-q", f"--separate-git-dir={tmp_path}/outside-git", "ext-tmp")
    (ws / "ext").mkdir()
    (ws / "ext" / ".git").write_text("gitdir: ../../outside-git\n")
    return ws


def test_every_git_directory_of_any_layout_is_found_and_kept_read_only(ws, tmp_path):
    found = discover(ws)
    assert set(found.protect) == {".git", ".repos/sub", ".repos/sub2", ".repos/lnk-git", "vendor/lib.git", "sub/.git",
                                  "deep/er/sub2/.git", "wtree/.git", "ext/.git"}, found.protect
    assert str(tmp_path / "outside-git") in found.outside and not found.refusals
    assert any("outside-git" in n and "not reachable" in n for n in found.notes)
    assert any("lnk/.git is a symlink" in n for n in found.notes)


def test_with_a_writable_git_the_control_files_of_every_git_directory_stay_read_only(tmp_path):
    src, ws = tmp_path / "libsrc", tmp_path / "ws"
    git(tmp_path, "init", "-q", str(src))
    git(src, "commit", "-q", "--allow-empty", "-m", "lib")
    git(tmp_path, "init", "-q", str(ws))
    git(ws, "commit", "-q", "--allow-empty", "-m", "start")
    git(ws, "submodule", "add", "-q", "../libsrc", "lib")
    git(ws, "worktree", "add", "-q", "wt2")
    protect = set(discover(ws, writable_git=True).protect)
    assert {".git/modules/lib/config", ".git/modules/lib/hooks", ".git/modules/lib/info", ".git/worktrees/wt2/commondir",
            ".git/worktrees/wt2/gitdir", ".git/worktrees/wt2/hooks", "lib/.git", "wt2/.git", ".git/config"} <= protect
    assert not {".git", ".git/modules/lib", ".git/modules/lib/objects", ".git/worktrees/wt2/config.worktree"} & protect


def test_the_include_graph_is_read_through_git_including_conditions_false_now(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    git(tmp_path, "init", "-q", str(ws))
    with open(ws / ".git" / "config", "a") as out:
        out.write('[include]\n\tpath = ../.gitconfig-shared\n[includeIf "onbranch:never"]\n\tpath = ../.gitconfig-cond\n'
                  '[includeIf "gitdir:/nowhere/"]\n\tpath = ../.gitconfig-missing\n')
    (ws / ".gitconfig-shared").write_text('[core]\n\thooksPath = .githooks\n[filter "x"]\n\tclean = ./tools/clean.sh %f\n')
    (ws / ".gitconfig-cond").write_text('[include]\n\tpath = .gitconfig-deeper\n[core]\n\tfsmonitor = "tools/fsmon.sh"\n')
    (ws / ".gitconfig-deeper").write_text("[core]\n\thooksPath = .hooks-deeper\n[alias]\n\tt = !sh -c './t.sh x'\n")
    (tmp_path / "global").write_text("[core]\n\thooksPath = .hooks-global\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", ".hooks-env")
    found = discover(ws)
    assert {".gitconfig-shared", ".githooks", "tools/clean.sh", ".gitconfig-cond", "tools/fsmon.sh", ".gitconfig-deeper",
            ".hooks-deeper", "t.sh", ".gitconfig-missing", ".hooks-global", ".hooks-env"} <= set(found.protect), found.protect
    assert {".gitconfig-shared", ".gitconfig-cond", ".gitconfig-deeper", ".gitconfig-missing"} <= set(found.files)
    assert {".gitconfig-shared", ".gitconfig-cond"} <= set(found.fingerprint)
    assert str(tmp_path / "global") in found.outside and not found.refusals


def test_a_nested_repository_has_its_include_graph_too(tmp_path):
    ws = tmp_path / "ws"
    git(tmp_path, "init", "-q", str(ws))
    git(ws, "init", "-q", "pkg")
    with open(ws / "pkg" / ".git" / "config", "a") as out:
        out.write("[include]\n\tpath = ../../shared.gitconfig\n")
    (ws / "shared.gitconfig").write_text("[core]\n\thooksPath = hooks\n\tsshCommand = ssh -F ./ssh.cfg\n")
    found = discover(ws)
    assert {"pkg/.git", "shared.gitconfig", "pkg/hooks", "pkg/ssh.cfg"} <= set(found.protect), found.protect


def test_what_no_mount_can_protect_is_refused(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    git(tmp_path, "init", "-q", str(ws))
    git(ws, "init", "-q", "pkg")
    subprocess.run(["git", "-C", str(ws / "pkg"), "config", "core.hooksPath", ".."], check=True)
    assert any("core.hookspath = .. in" in r and "holds the workspace root" in r for r in discover(ws).refusals)
    subprocess.run(["git", "-C", str(ws / "pkg"), "config", "--unset", "core.hooksPath"], check=True)
    (ws / "odd").mkdir()
    (ws / "odd" / ".git").write_text("gitdir: ..\n")    # the workspace root as a git directory
    assert any("that is or holds the workspace root" in r for r in discover(ws).refusals)
    (ws / "odd" / ".git").unlink()
    monkeypatch.setattr(gitscan, "MAX_PROTECTED", 1)
    assert any("more than 1 mounts" in r for r in discover(ws).refusals)


def test_the_report_sees_a_change_in_any_git_directory_and_every_new_git_entry(ws):
    before = scan.snapshot(str(ws))
    assert {".repos/sub", ".repos/sub2", ".repos/lnk-git", "vendor/lib.git"} <= set(before)
    with open(ws / ".repos" / "sub" / "config", "a") as out:
        out.write('[core]\n\tfsmonitor = "touch pwned; false"\n')
    (ws / ".repos" / "sub" / "worktrees" / "wtree" / "config.worktree").write_text("[core]\n")
    (ws / "evil" / "objects").mkdir(parents=True)
    (ws / "evil" / "refs").mkdir()
    (ws / "evil" / "HEAD").write_text("ref: refs/heads/main\n")
    for name in ("n1", "n2", "n3/.GIT", "n4", "n5"):
        (ws / name).mkdir(parents=True)
    (ws / "n1" / ".git").write_text("gitdir: ../evil\n")
    os.symlink("../evil", ws / "n2" / ".git")
    (ws / "n3" / ".GIT" / "config").write_text("[core]\n")
    (ws / "n4" / ".g\u200cit").write_text("gitdir: ../evil\n")        # .git on HFS+
    (ws / "n5" / "GIT~1").write_text("gitdir: ../evil\n")             # .git's short name on NTFS
    changes = {c.path: c for c in compare(before, scan.snapshot(str(ws)))}
    assert set(changes) == {".repos/sub", "evil", "n1/.git", "n2/.git", "n3/.GIT", "n4/.g\u200cit",
                            "n5/GIT~1"}, changes
    assert changes[".repos/sub"].what == "changed"
    assert "config (changed)" in changes[".repos/sub"].detail and "worktrees/wtree/config.worktree (new)" in \
        changes[".repos/sub"].detail


def test_a_file_only_the_include_graph_names_is_fingerprinted_before_and_after(tmp_path):
    (tmp_path / ".myhooks").mkdir()
    (tmp_path / ".myhooks" / "README").write_text("x\n")
    before = scan.snapshot(str(tmp_path), extra=(".myhooks", ".hooks-missing"))
    assert before[".myhooks"].startswith("git:") and ".hooks-missing" not in before
    (tmp_path / ".myhooks" / "pre-commit").write_text("#!/bin/sh\n")
    (tmp_path / ".hooks-missing").mkdir()   # empty: a placeholder, nothing runs from it
    after = scan.snapshot(str(tmp_path), extra=tuple(p for p, f in before.items() if f.startswith("git:")))
    assert [(c.path, c.what, c.surface) for c in compare(before, after)] == [(".myhooks", "changed", "git")]


def test_surface_names_are_folded_the_most_permissive_way():
    assert all(named(n).name == ".git" for n in (".GIT", ".Git.", ".g\u200dit", ".git ", "GIT~1"))
    assert named(".Github").name == ".github" and named("readme") is None


def test_the_compiler_mounts_discovered_paths_read_only_and_a_missing_config_file_as_an_empty_one():
    extra = (".repos/sub", ".gitconfig-local", ".githooks")
    facts = fake_facts(protected_kind="dir", protect=(".git",) + BUILTIN_PROTECTED + extra,
                       git=GitFacts(protect=extra, files=(".gitconfig-local",), placeholder="/state/empty.gitconfig",
                                    notes=("git directory /x is outside the workspace: not reachable",)))
    facts = replace(facts, protected=tuple(replace(a, kind="missing") if a.given in extra[1:] else a
                                           for a in facts.protected))
    plan = compile_policy(untrusted_bind(), facts)
    mounts = {m.target: m for m in plan.container.mounts}
    assert mounts["/workspace/.repos/sub"].read_only and mounts["/workspace/.repos/sub"].kind is MountKind.BIND
    assert mounts["/workspace/.gitconfig-local"].source == "/state/empty.gitconfig" and \
        mounts["/workspace/.gitconfig-local"].read_only
    assert mounts["/workspace/.githooks"].kind is MountKind.TMPFS and mounts["/workspace/.githooks"].read_only
    assert {"/workspace/.repos/sub", "/workspace/.gitconfig-local"} <= set(plan.probe.protected)
    assert any("not reachable" in w for w in plan.warnings)


def test_the_compiler_refuses_what_discovery_could_not_protect_with_copy_mode_as_the_way_out():
    facts = fake_facts(git=GitFacts(refusals=("/w/.repos is a git directory that is or holds the workspace root",)))
    with pytest.raises(PolicyError, match="--workspace-mode copy") as err:
        compile_policy(untrusted_bind(), facts)
    assert "holds the workspace root" in str(err.value)


def test_program_words_are_paths_with_a_slash_or_files_of_the_work_tree(tmp_path):
    (tmp_path / "lint.sh").write_text("")
    entry = lambda key, value: gitgraph.ConfigEntry(scope="local", origin="file:/x/config", key=key, value=value)
    named = lambda key, value: [p.path for p in gitgraph._named(entry(key, value), str(tmp_path), "/home/u")]
    assert named("core.fsmonitor", "true") == [] and named("core.pager", "less -R") == []
    assert named("filter.x.process", "lint.sh --mode=./cfg") == [str(tmp_path / "lint.sh"), str(tmp_path / "cfg")]
    assert named("alias.t", "!sh -c '~/bin/t ./run'") == ["/home/u/bin/t", str(tmp_path / "run")]
    assert named("submodule.lib.path", "lib") == [] and named("remote.origin.url", "../other") == []
    assert named("include.path", "x.cfg") == ["/x/x.cfg"]


def test_a_workspace_inside_a_repository_gets_that_repositorys_graph(tmp_path):
    git(tmp_path, "init", "-q", str(tmp_path / "mono"))
    subprocess.run(["git", "-C", str(tmp_path / "mono"), "config", "core.hooksPath", "pkg/hooks"], check=True)
    (tmp_path / "mono" / "pkg").mkdir()
    found = discover(tmp_path / "mono" / "pkg")
    assert "hooks" in found.protect and str(tmp_path / "mono" / ".git" / "config") in found.outside


def test_a_workspace_that_is_or_lies_in_a_git_directory_is_refused(tmp_path):
    git(tmp_path, "init", "-q", "--bare", str(tmp_path / "bare.git"))
    assert any("the workspace is the git directory" in r for r in discover(tmp_path / "bare.git").refusals)
    assert any("the workspace is inside the git directory" in r for r in discover(tmp_path / "bare.git" / "hooks").refusals)
