"""Host reads for `sandbox selftest`: a checkout-like scratch workspace, what is below it, host git
run in it as its owner, and the host's own addresses."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

OWNER = 1000                    # the scratch workspace's owner when we are root, as a developer's would be
TRACKED = "tracked.txt"         # a committed file the cases change (git diff must show it)
TRACKED_TEXT = "committed by the selftest\n"
NESTED_GIT_DIR = ".repos/sub"   # sub/.git says `gitdir: ../.repos/sub`
HOOKS_PATH = ".githooks"        # core.hooksPath of .gitconfig-shared, which .git/config includes
INCLUDED_DIR = "selftest-ci"     # .gitlab-ci.yml includes /selftest-ci/*.yml (none before the cases)


def _git_env(home: str) -> dict[str, str]:
    # Nothing of the calling user's git setup: no system or global config, a fresh HOME.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "selftest", "GIT_AUTHOR_EMAIL": "selftest@sandbox.invalid",
            "GIT_COMMITTER_NAME": "selftest", "GIT_COMMITTER_EMAIL": "selftest@sandbox.invalid"}


def scratch_workspace(prefix: str) -> str:
    """A fresh git repository (README.md and TRACKED committed, .git/hooks, .git/config), owned by
    uid 1000 when we are root, as a developer's checkout would be. Remove it with remove_tree."""
    ws = os.path.join(tempfile.mkdtemp(prefix=prefix), "repo")
    os.chmod(os.path.dirname(ws), 0o755)
    os.makedirs(os.path.join(ws, ".git", "hooks"))
    os.makedirs(os.path.join(ws, os.path.dirname(NESTED_GIT_DIR)))
    for name, text in (("README.md", "selftest scratch workspace\n"), (TRACKED, TRACKED_TEXT)):
        with open(os.path.join(ws, name), "w") as out:
            out.write(text)
    env = _git_env(os.path.dirname(ws))
    for args in (("init", "-q", "-b", "main"), ("add", "README.md", TRACKED), ("commit", "-q", "-m", "selftest"),
                 ("init", "-q", f"--separate-git-dir={ws}/{NESTED_GIT_DIR}", "sub")):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    # Layouts the host's git uses beyond .git (issue 24): a nested repository whose .git is a
    # relative gitfile, and hooks named by a config file .git/config includes. Excluded, so that
    # `git status` of the scratch workspace stays clean.
    # And a CI config that includes what may not exist yet (report.include plants one there).
    for name, text in (("sub/.git", f"gitdir: ../{NESTED_GIT_DIR}\n"),
                       (".git/info/exclude", "/sub/\n/.repos/\n/.gitconfig-shared\n/.gitlab-ci.yml\n"),
                       (".gitconfig-shared", f"[core]\n\thooksPath = {HOOKS_PATH}\n"),
                       (".gitlab-ci.yml", f"include:\n  - local: '/{INCLUDED_DIR}/*.yml'\n")):
        with open(os.path.join(ws, name), "w") as out:
            out.write(text)
    with open(os.path.join(ws, ".git", "config"), "a") as out:
        out.write("[include]\n\tpath = ../.gitconfig-shared\n")
    if os.geteuid() == 0:   # after git ran, so everything it wrote is the owner's too
        for base, dirs, files in os.walk(ws):
            for name in (base, *(os.path.join(base, n) for n in dirs + files)):
                os.lchown(name, OWNER, OWNER)
    return ws


def host_git(workspace: str, *args: str) -> tuple[int, str]:
    """`git ARGS` in the workspace as its owner would run it (uid 1000 when we are root, a minimal
    environment, a fresh HOME): (exit code, stdout and stderr)."""
    home = tempfile.mkdtemp(prefix="sandbox-selftest-home-")
    try:
        user = []
        if os.geteuid() == 0:
            os.chown(home, OWNER, OWNER)
            user = ["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups"]
        proc = subprocess.run([*user, "git", *args], cwd=workspace, env=_git_env(home), capture_output=True,
                              text=True, errors="replace", timeout=60)
        return proc.returncode, proc.stdout + proc.stderr
    finally:
        remove_tree(home)


def modified(workspace: str) -> tuple[str, ...]:
    """The committed files whose content is no longer what the selftest committed."""
    try:
        with open(os.path.join(workspace, TRACKED), errors="replace") as data:
            return () if data.read() == TRACKED_TEXT else (TRACKED,)
    except OSError:
        return (TRACKED,)


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def remove_planted(workspace: str, paths: tuple[str, ...]) -> None:
    """Remove what the cases planted on purpose (the first component of each path), so that
    outside.nothing_left judges only what the selftest itself may leave."""
    for top in dict.fromkeys(p.split("/", 1)[0] for p in paths):
        path = os.path.join(workspace, top)
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            remove_tree(path)


def tree_listing(path: str) -> tuple[str, ...]:
    """Every entry below `path` (symlinks not followed), to tell whether anything changed there."""
    return tuple(sorted(os.path.relpath(os.path.join(b, n), path) for b, d, f in os.walk(path) for n in d + f))


def ipv4_addresses() -> tuple[str, ...]:
    """The host's own IPv4 addresses but loopback (the LOCAL entries of the kernel's routing trie)."""
    found, last = set(), ""
    with open("/proc/net/fib_trie") as trie:
        for words in map(str.split, trie):
            last = words[1] if words[:1] == ["|--"] else last
            if "LOCAL" in words and not last.startswith("127."):
                found.add(last)
    return tuple(sorted(found))
