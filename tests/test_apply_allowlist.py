"""`apply` is an allowlist (issue 24, cases 4, 5 and 10) without an engine: protection decided on
folded names, symlinks only by a per-path yes and only when they resolve inside on the final tree,
surfaces at any depth by a per-path yes, plain modes only, and every agent-made string escaped."""

from __future__ import annotations

import os

import pytest

from launcher import names
from launcher.copies import apply, review
from launcher.errors import CopyConflict, PolicyError
from tests.test_copy_review import PROTECTED, exported, file_state

pytestmark = pytest.mark.usefixtures("private_tempdir")   # their exports' spools go with the test

NOTHING = review.Allowed()


def added(path: str, new: dict | None = None) -> dict:
    return {"path": path, "status": "added", "old": None, "new": new or file_state(b"x")}


def link(path: str, target: str) -> dict:
    return added(path, {"type": "symlink", "target": target})


def verdicts(workspace, changes, allowed=NOTHING, protected=PROTECTED) -> dict[str, str]:
    return {c["path"]: c["refused"] for c in apply.judged(str(workspace), changes, protected, allowed)}


# -- names ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant, name", [
    (".GIT", ".git"), (".Git", ".git"), (".git\u200c", ".git"), ("\ufeff.git", ".git"), (".g\u200dit", ".git"),
    (".git\u202e", ".git"), (".git\u206f", ".git"), (".git.", ".git"), (".git . ", ".git"),
    (".git::$INDEX_ALLOCATION", ".git"), (".g\u0131t", ".git"),            # NTFS streams; dotless i upcases to I
    ("caf\u00e9", "cafe\u0301"), ("CAF\u00c9", "caf\u00e9"), ("\u212a", "k"), ("stra\u00dfe", "STRASSE"),
    ("a\\b", "a/b"),                                                       # a separator on Windows
])
def test_fold_maps_what_some_filesystem_treats_as_one_name_to_one_string(variant, name):
    assert names.fold(variant) == names.fold(name)


@pytest.mark.parametrize("one, other", [("caf\u00e9", "cafe"), ("a.txt", "b.txt"), (".git", ".gitx"), ("..", ".")])
def test_fold_keeps_different_names_apart(one, other):
    assert names.fold(one) != names.fold(other)


# -- case 4: protection on folded names ----------------------------------------------------------

@pytest.mark.parametrize("path, why", [
    (".GIT/hooks/pre-commit", "git directory"),
    (".Git/config", "git directory"),
    (".git\u200c/hooks/post-checkout", "git directory"),
    ("vendor/.GIT/config", "git directory"),
    ("sub/.Git", "git directory"),                        # a gitfile under another case
    (".git./hooks/x", "git directory"),
    (".git::$INDEX_ALLOCATION/hooks/x", "git directory"),
    ("GIT~1/hooks/x", "git directory"),                   # the NTFS short name of .git
    (".git\\hooks\\pre-commit", "git directory"),          # one name on Linux, a path on Windows
    (".Github/workflows/x.yml", "protected (.github"),
    (".github\u200d/workflows/x.yml", "protected (.github"),
    ("GITHUB~1/workflows/x.yml", "protected (.github"),
    (".ENVRC", "protected (.envrc"),
    (".VSCode/tasks.json", "protected (.vscode"),
    (".npmrc ", "protected (.npmrc"),
    ("a\\..\\..\\x", "not a plain workspace path"),
    ("...", "not a plain workspace path"),
    ("a/\u200c/b", "not a plain workspace path"),
])
def test_names_that_fold_onto_git_or_a_protected_path_are_refused(path, why):
    assert why in review.refusal(added(path), PROTECTED)


def test_a_protected_entry_is_matched_in_nfc_and_nfd_alike():
    for entry, path in (("caf\u00e9", "cafe\u0301/x"), ("cafe\u0301", "CAF\u00c9/x"), ("docs/Secret", "DOCS/secret")):
        assert "protected" in review.refusal(added(path), PROTECTED + (entry,)), (entry, path)


def test_changes_whose_names_fold_together_are_refused_deletions_aside():
    changes = [added("Notes.txt"), added("notes.txt"), added("Src/a.py"), added("src/b.py"), added("plain.py"),
               {"path": "README.md", "status": "deleted", "old": file_state(b"x"), "new": None}, added("readme.md")]
    found = {c["path"]: c["refused"] for c in review.annotated(changes, PROTECTED)}
    assert "one name on a case-insensitive" in found["Notes.txt"] and found["notes.txt"]
    assert found["Src/a.py"] and found["src/b.py"]
    assert found["plain.py"] == found["README.md"] == found["readme.md"] == ""


def test_a_new_name_folding_onto_one_the_host_keeps_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("x")
    (tmp_path / "src").mkdir()
    (tmp_path / "old.txt").write_text("x")
    changes = [added("readme.md"), added("SRC/new.py"), added("docs/fine.py"), added("OLD.txt"),
               {"path": "old.txt", "status": "deleted", "old": file_state(b"x"), "new": None}]
    found = verdicts(tmp_path, changes)
    assert "README.md" in found["readme.md"] and "src" in found["SRC/new.py"]
    assert found["docs/fine.py"] == found["OLD.txt"] == found["old.txt"] == ""   # old.txt goes: no collision


# -- case 5: symlinks ----------------------------------------------------------------------------

CHAIN = [link("s9", "a")] + [link(f"s{i}", f"s{i + 1}/..") for i in range(9)] + [link("passwd_link", "s0/etc/passwd")]
ALL_LINKS = review.Allowed(symlinks=frozenset(c["path"] for c in CHAIN) | {"docs", "x", "y", "into", "up"})


def test_a_symlink_is_refused_without_a_per_path_yes(tmp_path):
    found = verdicts(tmp_path, [link("docs/readme", "../README.md")])
    assert "--allow-symlink docs/readme" in found["docs/readme"]


def test_the_chain_of_case_5_is_refused_even_with_a_yes_for_every_link(tmp_path):
    found = verdicts(tmp_path, CHAIN, ALL_LINKS)
    assert found["s9"] == "" and found["s8"] == ""                # a (missing), the workspace root: inside
    for i in range(8):
        assert "resolves outside the workspace" in found[f"s{i}"], (i, found[f"s{i}"])
    assert "through s0" in found["passwd_link"], found["passwd_link"]


def test_links_are_resolved_with_the_host_links_and_every_other_new_one(tmp_path):
    os.symlink("/etc", tmp_path / "vendor")                     # the user's own link, outside
    (tmp_path / "lib").mkdir()
    changes = [link("x", "vendor/passwd"), link("y", "lib/../vendor"), link("into", "y/../.git/hooks"),
               link("up", "lib/../../outside")]
    found = verdicts(tmp_path, changes, ALL_LINKS)
    assert "outside the workspace" in found["x"] and "outside the workspace" in found["y"]
    assert found["into"] and "leaving the workspace" in found["up"]    # lexically already


def test_a_link_into_git_or_a_protected_path_is_refused_whatever_the_case(tmp_path):
    for target in (".GIT/hooks", "./.Github/workflows", "sub/../.git\u200c/config", "packages/x/.npmrc"):
        found = verdicts(tmp_path, [link("x", target)], ALL_LINKS)
        assert found["x"], target


def test_a_link_lexically_inside_that_resolves_into_git_through_a_host_link_is_refused(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    os.symlink(".git/hooks", tmp_path / "h")                    # the user's own link
    (tmp_path / ".git" / "info").mkdir()
    (tmp_path / "d" / "e").mkdir(parents=True)
    os.symlink("../../.git/info", tmp_path / "d" / "e" / "w")
    (tmp_path / "sub" / "inner").mkdir(parents=True)
    changes = [link("x", "h"), link("v", "sub/inner"), link("y", "d/e/w/../hooks")]   # lexically d/e/hooks
    found = verdicts(tmp_path, changes, review.Allowed(symlinks=frozenset({"x", "v", "y"})))
    assert "resolves to .git/hooks" in found["x"] and found["v"] == ""
    assert "resolves to .git/hooks" in found["y"], found["y"]       # `..` after a link is taken physically


def test_a_new_link_that_would_send_a_link_the_host_has_outside_is_refused(tmp_path):
    """Yes by yes over two applies: s0 -> s1/.. was harmless while s1 was missing; s1 -> x/.. is
    harmless alone, and together they are s0 -> the parent of the workspace."""
    os.symlink("s1/..", tmp_path / "s0")
    os.symlink("README.md", tmp_path / "fine")
    found = verdicts(tmp_path, [link("s1", "x/.."), link("other", "fine")], review.Allowed(symlinks=frozenset({"s1", "other"})))
    assert "the host's symlink s0" in found["s1"] and "outside the workspace" in found["s1"], found["s1"]
    assert found["other"] == ""


def test_a_loop_of_links_is_refused(tmp_path):
    found = verdicts(tmp_path, [link("a", "b/x"), link("b", "a")], review.Allowed(symlinks=frozenset({"a", "b"})))
    assert "loop" in found["a"] and "loop" in found["b"]


def test_a_link_through_one_refused_for_replacing_a_directory_is_refused(tmp_path):
    (tmp_path / "lib").mkdir()
    found = verdicts(tmp_path, [link("lib", "src"), link("x", "lib/main.py")], review.Allowed(symlinks=frozenset({"lib", "x"})))
    assert "directory" in found["lib"] and "through lib" in found["x"]


def test_what_a_hostile_tree_of_links_costs_is_bounded(tmp_path):
    import time

    deep = link("deep", "/".join(["a"] * 2000))                   # 4000 bytes: under PATH_MAX
    chain = [link(f"l{i}", f"l{i + 1}") for i in range(5000)]      # each one more than 40 links from the end
    allowed = review.Allowed(symlinks=frozenset(c["path"] for c in chain) | {"deep"})
    started = time.monotonic()
    found = verdicts(tmp_path, [deep] + chain, allowed)
    assert time.monotonic() - started < 20
    assert found["deep"] and "loop" in found["l0"] and found["l4990"] == ""
    assert "deeper than" in review.refusal(added("/".join(["d"] * 300) + "/x"), PROTECTED)


def test_a_directory_is_never_replaced_by_a_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("guide\n")
    changes = [{"path": "docs/guide.md", "status": "deleted", "old": file_state(b"guide\n"), "new": None},
               link("docs", "lib")]
    found = verdicts(tmp_path, changes, ALL_LINKS)
    assert "directory" in found["docs"] and found["docs/guide.md"] == ""


def test_an_allowed_link_that_resolves_inside_is_written(tmp_path):
    (tmp_path / "README.md").write_text("x")
    changes = [link("docs/readme", "../README.md")]
    data = apply.reviewed(str(tmp_path), exported(changes, {}), PROTECTED,
                          review.Allowed(symlinks=frozenset({"docs/readme"})))
    assert apply.apply_to_tree(str(tmp_path), data) == (1, 0)
    assert os.readlink(tmp_path / "docs" / "readme") == "../README.md"


def test_a_yes_that_cannot_be_honoured_is_an_error_and_writes_nothing(tmp_path):
    changes = CHAIN + [added("fine.txt")]
    with pytest.raises(PolicyError) as info:
        apply.reviewed(str(tmp_path), exported(changes, {"fine.txt": b"x"}), PROTECTED, ALL_LINKS)
    assert "s0" in str(info.value) and info.value.exit_code == 120
    for allowed in (review.Allowed(symlinks=frozenset({"nope"})), review.Allowed(surfaces=frozenset({".npmrc"}))):
        with pytest.raises(PolicyError, match="no change|never"):
            apply.reviewed(str(tmp_path), exported([added(".npmrc")], {".npmrc": b"x"}), PROTECTED, allowed)
    assert os.listdir(tmp_path) == []


# -- plain modes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1644, 0o6755])
def test_setuid_setgid_and_sticky_files_are_refused(mode):
    new = {**file_state(b"x", True), "mode": mode}
    assert "mode" in review.refusal(added("tool", new), PROTECTED)


def test_plain_modes_are_applied_as_0644_or_0755():
    for mode in (0o644, 0o755, 0o600, 0o775):
        assert review.refusal(added("tool", {**file_state(b"x", bool(mode & 0o100)), "mode": mode}), PROTECTED) == ""


# -- case 10: surfaces at any depth --------------------------------------------------------------

@pytest.mark.parametrize("path", ["packages/x/.npmrc", "packages/y/.yarnrc.yml", "a/b/c/.envrc", "pkg/.VSCode/tasks.json",
                                  "pkg/.NPMRC", "pkg/.npmrc\u200c", "pkg/.gitignore", "AGENTS.md", "sub/.env"])
def test_surfaces_at_any_depth_need_a_per_path_yes(tmp_path, path):
    found = verdicts(tmp_path, [added(path)])
    assert f"--allow-surface {path}" in found[path], found[path]
    assert verdicts(tmp_path, [added(path)], review.Allowed(surfaces=frozenset({path})))[path] == ""


def test_a_yes_for_a_surface_directory_covers_what_is_below_it_and_nothing_else(tmp_path):
    allowed = review.Allowed(surfaces=frozenset({"pkg/.vscode"}))
    found = verdicts(tmp_path, [added("pkg/.vscode/tasks.json"), added("pkg/.vscode/settings.json")], allowed)
    assert set(found.values()) == {""}
    with pytest.raises(PolicyError):    # "pkg" is no surface: a yes is per path, never for a whole tree
        apply.reviewed(str(tmp_path), exported([added("pkg/.npmrc")], {"pkg/.npmrc": b"x"}), PROTECTED,
                       review.Allowed(surfaces=frozenset({"pkg"})))


def test_a_changed_gitignore_needs_a_yes_like_a_new_one(tmp_path):
    """A changed tracked .gitignore can hide a file from the review after apply (issue 40 item 3)."""
    changed = {"path": "sub/.gitignore", "status": "modified", "old": file_state(b"a"), "new": file_state(b"b")}
    assert "--allow-surface sub/.gitignore" in verdicts(tmp_path, [changed])["sub/.gitignore"]
    assert verdicts(tmp_path, [added("sub/.gitignore")])["sub/.gitignore"]
    assert "--allow-surface a/x.code-workspace" in verdicts(tmp_path, [added("a/x.code-workspace")])["a/x.code-workspace"]


def test_root_protected_surfaces_are_never_applicable():
    assert "protected" in review.refusal(added(".npmrc"), PROTECTED)
    assert "protected" in review.refusal(added(".yarnrc.yml"), PROTECTED)


# -- diff shows it all, escaped ------------------------------------------------------------------

def test_stat_shows_link_targets_modes_sizes_and_what_each_change_needs(tmp_path):
    changes = apply.judged(str(tmp_path), [link("s0", "s1/.."), added("new.sh", {**file_state(b"#!/bin/sh\n", True),
                                           "mode": 0o755}), added("pkg/.npmrc"), added(".GIT/config")],
                           PROTECTED, NOTHING, preview=True)
    lines = {line.split()[1]: line for line in review.stat_lines(changes)[:-1]}
    assert "-> s1/.." in lines["s0"] and "NEEDS --allow-symlink" in lines["s0"]
    assert "100755" in lines["new.sh"] and "10 bytes" in lines["new.sh"]
    assert "NEEDS --allow-surface" in lines["pkg/.npmrc"] and "REFUSED" in lines[".GIT/config"]


def test_refusals_and_link_targets_shown_are_escaped(tmp_path):
    evil = "\x1b]52;c;ZXZpbA==\x07\x1b[2K\rsandbox: applied 0 changes"
    changes = apply.judged(str(tmp_path), [link("x", f"/{evil}"), link(f"y{evil}", "a"), added(f"p/{evil}/.npmrc")],
                           PROTECTED, NOTHING, preview=True)
    text = "\n".join(review.stat_lines(changes) + review.patch_lines(changes) + review.refusal_lines(changes))
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text


def test_conflict_messages_are_escaped(tmp_path):
    """A name with control bytes never gets this far (refused); one with a bidi override does."""
    evil = "f\u202eexe.txt\u2066"
    (tmp_path / evil).write_text("the user's\n")
    changes = [{"path": evil, "status": "modified", "old": file_state(b"base\n"), "new": file_state(b"agent\n")}]
    with pytest.raises(CopyConflict) as info:
        apply.apply_to_tree(str(tmp_path), exported(changes, {evil: b"agent\n"}))
    assert "\u202e" not in str(info.value) and "\u2066" not in str(info.value) and "\\u202e" in str(info.value)


def test_gc_counts_a_change_that_needs_a_yes_as_work_to_keep(tmp_path):
    data = exported([added("packages/x/.npmrc")], {"packages/x/.npmrc": b"x"})
    assert data.applicable == () and apply.pending(str(tmp_path), data) == 1
    (tmp_path / "packages" / "x").mkdir(parents=True)
    (tmp_path / "packages" / "x" / ".npmrc").write_bytes(b"x")      # applied with its yes: nothing left
    assert apply.pending(str(tmp_path), data) == 0


def test_changes_inside_a_git_directory_of_any_name_are_refused(tmp_path):
    """Found by the bind-mode discovery work: `sub/.git` is a gitfile to `.repos/sub`, so that
    directory's config runs on the host's next `git status` in sub/ — whatever its name. A bare
    repository the agent assembles (HEAD, objects, refs) is one too, on the final tree."""
    ws = tmp_path / "ws"
    (ws / ".repos" / "sub" / "objects").mkdir(parents=True)
    (ws / ".repos" / "sub" / "refs").mkdir()
    (ws / ".repos" / "sub" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".git").write_text("gitdir: ../.repos/sub\n")
    (ws / "mods" / "x").mkdir(parents=True)
    (ws / "mods" / "x" / "HEAD").write_text("x\n")
    changes = [{"path": ".repos/sub/config", "status": "modified", "old": file_state(b""), "new": file_state(b"y")},
               added("mods/x/commondir"), added("mods/x/config"),
               added("bare/HEAD"), added("bare/objects/keep"), added("bare/REFS/keep"), added("bare/config"),
               added("plain/HEAD"), added("plain/notes.txt")]
    found = verdicts(ws, changes)
    assert {p for p, why in found.items() if "a git directory" in why} == {
        ".repos/sub/config", "mods/x/commondir", "mods/x/config",
        "bare/HEAD", "bare/objects/keep", "bare/REFS/keep", "bare/config"}
    assert found["plain/HEAD"] == found["plain/notes.txt"] == ""
