"""Bind-mode git discovery, end to end (issue 24 cases 1-3): every git directory, config file,
hooks path and program the host's git could use from any directory of the workspace is read-only
in the sandbox, and what the agent may still plant (a new .git anywhere) is reported. One sandbox
run tries every attack; the host's own git then runs as the workspace owner (uid 1000)."""

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
FSMONITOR = '[core]\n\tfsmonitor = "touch {canary}; false"\n\tpager = "touch {canary}; cat"\n'
HOOK = "#!/bin/sh\ntouch {canary}\n"


def as_owner(args: list[str], cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    """A command on the host as the workspace owner, with a clean environment (plus `env`)."""
    base = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C",
            "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@example.invalid", "GIT_COMMITTER_NAME": "u",
            "GIT_COMMITTER_EMAIL": "u@example.invalid"}
    return subprocess.run(["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups", *args],
                          cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60)


def git(cwd: Path, home: Path, *args: str, **env: str) -> str:
    done = as_owner(["git", "-c", "protocol.file.allow=always", *args], cwd, home, **env)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def _own(top: Path) -> None:
    for base, dirs, files in os.walk(top):
        for name in [base, *(os.path.join(base, n) for n in dirs + files)]:
            os.lchown(name, OWNER, OWNER)


@pytest.fixture
def layout(engine):
    """A workspace owned by uid 1000 with every kind of git directory and include the issue names.
    Not below pytest's 0700 tmp_path: uid 1000 runs git."""
    top = Path(tempfile.mkdtemp(prefix="sandbox-git-disc-"))
    ws, home, canary = top / "repo", top / "home", top / "PWNED"
    for d in (ws, home, ws / ".githooks", ws / "tools", ws / "deep" / "er", ws / "vendor", ws / "lnk", ws / ".repos"):
        d.mkdir(parents=True)
    (ws / "a").write_text("hello\n")
    (ws / ".githooks" / "README").write_text("shared hooks\n")
    (ws / "tools" / "clean.sh").write_text("#!/bin/sh\ncat\n")
    # Case 2: .git/config includes a file of the tree that sets the hooks path; an includeIf whose
    # condition is false now names another; the environment names two more.
    (ws / ".gitconfig-shared").write_text('[core]\n\thooksPath = .githooks\n[filter "lint"]\n\tclean = ./tools/clean.sh\n')
    (ws / ".gitconfig-cond").write_text("[core]\n\thooksPath = .hooks-cond\n\tfsmonitor = tools/fsmon.sh\n")
    (top / "global.gitconfig").write_text("[core]\n\thooksPath = .hooks-global\n")
    _own(top)
    git(ws, home, "init", "-q", "-b", "main")
    with open(ws / ".git" / "config", "a") as out:
        out.write('[include]\n\tpath = ../.gitconfig-shared\n[includeIf "onbranch:no-such-branch"]\n\tpath = ../.gitconfig-cond\n')
    git(ws, home, "add", "a", ".githooks", "tools", ".gitconfig-shared", ".gitconfig-cond")
    git(ws, home, "commit", "-qm", "start")
    # Case 1: sub/.git is a relative gitfile; deep/er/sub2/.git an absolute one; lnk/.git a symlink;
    # wtree/ a linked work tree of sub (worktrees/ and commondir); vendor/lib.git a bare repository
    # whose objects the alternates of sub2 borrow. Outside the workspace: ext/'s git directory.
    git(ws, home, "init", "-q", f"--separate-git-dir={ws}/.repos/sub", "sub")
    (ws / "sub" / ".git").write_text("gitdir: ../.repos/sub\n")
    (ws / "sub" / "f").write_text("sub\n")
    git(ws / "sub", home, "add", "f")
    git(ws / "sub", home, "commit", "-qm", "sub")
    git(ws, home, "init", "-q", f"--separate-git-dir={ws}/.repos/sub2", "deep/er/sub2")
    git(ws, home, "init", "-q", "--bare", "vendor/lib.git")
    (ws / ".repos" / "sub2" / "objects" / "info" / "alternates").write_text("../../../vendor/lib.git/objects\n")
    git(ws, home, "init", "-q", f"--separate-git-dir={ws}/.repos/lnk-git", "lnk-tmp")
    shutil.rmtree(ws / "lnk-tmp")
    os.symlink("../.repos/lnk-git", ws / "lnk" / ".git")
    git(ws / "sub", home, "worktree", "add", "-q", "../wtree")
    git(top, home, "init", "-q", f"--separate-git-dir={top}/outside-git", "ext-tmp")
    (ws / "ext").mkdir()
    (ws / "ext" / ".git").write_text("gitdir: ../../outside-git\n")
    shutil.rmtree(top / "ext-tmp")
    _own(top)
    yield ws, home, canary
    shutil.rmtree(top, ignore_errors=True)


# What the agent tries, each a path it appends to (EROFS expected) or plants (reported afterwards).
APPEND = {
    "case1.relative_gitfile": ".repos/sub/config",
    "case1.absolute_gitfile": ".repos/sub2/config",
    "case1.symlinked_git": ".repos/lnk-git/config",
    "case1.worktree": ".repos/sub/worktrees/wtree/config.worktree",
    "case1.alternates_target": "vendor/lib.git/config",
    "case1.bare_repository": "vendor/lib.git/hooks/post-checkout",
    "case1.gitfile_itself": "sub/.git",
    "case2.included_config": ".gitconfig-shared",
    "case2.hooks_path_of_include": ".githooks/pre-commit",
    "case2.filter_program": "tools/clean.sh",
    "case2.includeif_config": ".gitconfig-cond",
    "case2.includeif_hooks_path": ".hooks-cond/pre-commit",
    "case2.includeif_fsmonitor": "tools/fsmon.sh",
    "case2.global_hooks_path": ".hooks-global/pre-commit",
    "case2.env_hooks_path": ".hooks-env/pre-commit",
}
PLANT = {"item4.gitfile": "n1/.git", "item4.symlink": "n2/.git", "item4.case_variant": "n3/.GIT",
         "item4.bare_repository": "evil"}


def _agent(canary: Path) -> str:
    lines = [f"payload='{FSMONITOR.format(canary=canary)}'"]
    for case, path in APPEND.items():
        lines.append(f'mkdir -p "$(dirname "/workspace/{path}")" 2>/dev/null; '
                     f'err="$( {{ printf %s "$payload" >> "/workspace/{path}"; }} 2>&1 )" && echo "WROTE {case}" '
                     f'|| echo "REFUSED {case}: $err"')
    lines += ["cd /workspace && mkdir -p evil/objects evil/refs n1 n2 n3/.GIT && echo 'ref: refs/heads/main' > evil/HEAD",
              'printf %s "$payload" > evil/config && echo "gitdir: ../evil" > n1/.git && ln -s ../evil n2/.git',
              'printf %s "$payload" > n3/.GIT/config && echo PLANTED']
    return "\n".join(lines)


def test_every_git_directory_include_and_hooks_path_is_read_only_and_new_ones_are_reported(layout, tmp_path):
    ws, home, canary = layout
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {
        "CI": "true", "GIT_CONFIG_GLOBAL": str(ws.parent / "global.gitconfig"),
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": ".hooks-env"}
    result = subprocess.run(SANDBOX + ["run", "--policy", "ci", *BIND, "-w", str(ws), "--report", str(report),
                                       "--", "bash", "-c", _agent(canary)],
                            capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout
    assert "PLANTED" in out, (out, result.stderr)
    for case in APPEND:   # a missing file is held by an empty read-only directory: "Is a directory"
        assert f"REFUSED {case}: " in out, (case, out, result.stderr)
        assert any(e in out.split(f"REFUSED {case}: ")[1].split("\n")[0] for e in ("Read-only file system",
                                                                                    "Is a directory")), (case, out)
    # The outside git directory is out of the sandbox's reach, and said so.
    assert "outside-git" in result.stderr and "not reachable" in result.stderr, result.stderr
    # What the agent could plant is reported, and in CI that is the exit code.
    assert result.returncode == ExitCode.SURFACES_CHANGED, result.stderr
    changes = {c["path"]: c["change"] for c in json.loads(report.read_text())["workspace_changes"]}
    for case, path in PLANT.items():
        assert changes.get(path) == "new", (case, changes)
    assert not [p for p in changes if p not in PLANT.values()], changes   # nothing protected changed
    # The host's git, as the owner, in every repository (case 1) and committing (case 2): no canary.
    for where in ("sub", "deep/er/sub2", "lnk", "wtree", "."):
        done = as_owner(["git", "status"], ws / where, home)
        assert done.returncode == 0, (where, done.stderr)
    assert as_owner(["git", "count-objects"], ws / "vendor" / "lib.git", home).returncode == 0
    for variant in ({}, {"GIT_CONFIG_GLOBAL": str(ws.parent / "global.gitconfig")},
                    {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": ".hooks-env"}):
        done = as_owner(["git", "commit", "-q", "--allow-empty", "-m", "user"], ws, home, **variant)
        assert done.returncode == 0, done.stderr
    assert not canary.exists()
    assert not (ws / ".hooks-cond").exists() and not (ws / "tools" / "fsmon.sh").exists()   # placeholders removed


@pytest.fixture
def superproject(engine):
    """A repository owned by uid 1000 with a submodule (lib: .git/modules/lib) and a linked work
    tree (wt2: .git/worktrees/wt2), for `workspace.git: read-write`."""
    top = Path(tempfile.mkdtemp(prefix="sandbox-git-rw-"))
    ws, home, src, canary = top / "repo", top / "home", top / "libsrc", top / "PWNED"
    for d in (ws, home, src):
        d.mkdir()
    (ws / "a").write_text("hello\n")
    (src / "l").write_text("lib\n")
    (top / "rw.yaml").write_text("version: 1\nname: ci-git-rw\ndescription: ci with a writable .git\n"
                                 "extends: [ci]\nworkspace: {git: read-write}\n")
    _own(top)
    for where, args in ((src, ("init", "-q", "-b", "main")), (src, ("add", "l")), (src, ("commit", "-qm", "lib")),
                        (ws, ("init", "-q", "-b", "main")), (ws, ("add", "a")), (ws, ("commit", "-qm", "start")),
                        (ws, ("submodule", "add", "-q", "../libsrc", "lib")), (ws, ("commit", "-qm", "lib")),
                        (ws, ("worktree", "add", "-q", "wt2"))):
        git(where, home, *args)
    _own(top)
    yield ws, home, canary, top / "rw.yaml"
    shutil.rmtree(top, ignore_errors=True)


def test_with_a_writable_git_the_submodule_and_worktree_control_files_stay_read_only(superproject, tmp_path):
    ws, home, canary, policy = superproject
    payload = FSMONITOR.format(canary=canary)
    attacks = {"modules_config": ".git/modules/lib/config", "modules_hook": ".git/modules/lib/hooks/post-checkout",
               "modules_info": ".git/modules/lib/info/attributes", "worktree_commondir": ".git/worktrees/wt2/commondir",
               "worktree_gitdir": ".git/worktrees/wt2/gitdir", "root_config": ".git/config"}
    script = [f"payload='{payload}'"] + [
        f'err="$( {{ printf %s "$payload" >> "/workspace/{p}"; }} 2>&1 )" && echo "WROTE {k}" || echo "REFUSED {k}: $err"'
        for k, p in attacks.items()] + [
        # What read-write allows (commits in the repository and in the submodule) still works...
        "cd /workspace && git -c safe.directory='*' -c user.name=a -c user.email=a@x commit -q --allow-empty -m agent "
        "&& cd lib && git -c safe.directory='*' -c user.name=a -c user.email=a@x commit -q --allow-empty -m agent "
        "&& echo COMMITTED",
        # ... and what it cannot protect (a missing file, a new submodule's git directory) is reported.
        'cd /workspace && printf %s "$payload" > .git/worktrees/wt2/config.worktree && mkdir -p .git/modules/evil '
        '&& printf %s "$payload" > .git/modules/evil/config && echo PLANTED']
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"CI": "true"}
    result = subprocess.run(SANDBOX + ["run", "--policy", str(policy), *BIND, "-w", str(ws), "--report", str(report),
                                       "--", "bash", "-c", "\n".join(script)],
                            capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout
    assert "COMMITTED" in out and "PLANTED" in out, (out, result.stderr)
    for case in attacks:
        assert f"REFUSED {case}: " in out and "Read-only file system" in out.split(f"REFUSED {case}: ")[1].split("\n")[0], \
            (case, out, result.stderr)
    assert result.returncode == ExitCode.SURFACES_CHANGED, result.stderr
    changes = json.loads(report.read_text())["workspace_changes"]
    details = " ".join(c["detail"] for c in changes if c["path"] == ".git")
    assert "worktrees/wt2/config.worktree" in details and "modules/evil/config" in details, changes
    for where in (".", "lib", "wt2"):
        assert as_owner(["git", "status"], ws / where, home).returncode == 0
    assert not canary.exists()
