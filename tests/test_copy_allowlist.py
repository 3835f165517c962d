"""Issue 24, cases 4, 5 and 10 on the real engine, in one run: what an agent leaves in a copy under
names a case-insensitive or normalising filesystem folds onto .git or a protected path, a symlink
chain that climbs out one `..` at a time, a directory swapped for a link, nested surfaces, a
setuid file and a case collision. `apply` carries none of it back without a per-path yes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import make_workspace
from tests.test_copy import make_repo, run_copy, sandbox, snapshot

pytestmark = pytest.mark.engine
NAME = f"copy-allow-{os.getpid()}"
ESC = "\x1b]52;c;ZXZpbA==\x07\x1b[2K\rsandbox: applied 0 changes"   # OSC 52 and a forged line

HOSTILE = r"""
set -e
mkdir -p .GIT/hooks && printf '#!/bin/sh\ntouch /tmp/pwned\n' > .GIT/hooks/pre-commit && chmod +x .GIT/hooks/pre-commit
mkdir -p .Github/workflows && echo 'on: push' > .Github/workflows/x.yml
d="$(printf '.git\342\200\214')"; mkdir -p "$d/hooks" && echo evil > "$d/hooks/post-checkout"
mkdir a && ln -s a s9
for i in 8 7 6 5 4 3 2 1 0; do ln -s "s$((i + 1))/.." "s$i"; done
ln -s s0/etc/passwd passwd_link
rm -rf docs && ln -s /root/.ssh docs
mkdir -p packages/x packages/y && echo 'script-shell=/tmp/evil' > packages/x/.npmrc
echo 'yarnPath: ./evil.cjs' > packages/y/.yarnrc.yml
p="packages/$(printf "$ESC")"; mkdir -p "$p" && echo 'x' > "$p/.npmrc"
echo fine > fine.txt && echo 'x' > suid.sh && chmod 4755 suid.sh
echo one > Notes.txt && echo two > notes.txt
""".replace("$ESC", ESC.replace("\x1b", r"\033").replace("\x07", r"\007").replace("\r", r"\r"))

NEVER = (".GIT", ".Github", ".git\u200c", "s0", "s8", "s9", "passwd_link", "packages", "suid.sh",
         "Notes.txt", "notes.txt")


@pytest.fixture(scope="module")
def hostile_module(engine, tmp_path_factory):
    """One copy for the module (each run is a sandbox start); yields the workspace and a pristine
    copy of its host tree, which every test starts from (apply writes to the host tree only)."""
    repo = make_repo(make_workspace(tmp_path_factory.mktemp("allow")))
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("guide\n")
    os.chown(repo / "docs", 1000, 1000)
    os.chown(repo / "docs" / "guide.md", 1000, 1000)
    pristine = repo.parent / "pristine"
    shutil.copytree(repo, pristine, symlinks=True)
    result = run_copy(repo, NAME, "bash", "-c", HOSTILE)
    try:
        assert result.returncode == 0, result.stderr
        yield repo, pristine
    finally:   # another module may make a copy of the same name: this one must be gone
        for _ in range(10):
            done = sandbox("discard", "--yes", NAME)
            if done.returncode == 0 or "no copy named" in done.stderr:
                break
            time.sleep(1)
        assert done.returncode == 0 or "no copy named" in done.stderr, done.stderr


@pytest.fixture
def hostile_copy(hostile_module):
    """The host tree as it was when the copy was taken, whatever an earlier test applied to it."""
    repo, pristine = hostile_module
    shutil.rmtree(repo)
    shutil.copytree(pristine, repo, symlinks=True)
    subprocess.run(["chown", "-R", "1000:1000", str(repo)], check=True)
    yield repo


def test_diff_marks_folded_names_links_surfaces_and_modes(engine, hostile_copy):
    stat = sandbox("diff", NAME, "--stat")
    assert stat.returncode == 0, stat.stderr
    assert "\x1b" not in stat.stdout and "\x07" not in stat.stdout and "\r" not in stat.stdout
    lines = {line.split()[1]: line for line in stat.stdout.splitlines()[:-1]}
    for path in (".GIT/hooks/pre-commit", ".Github/workflows/x.yml", ".git\\u200c/hooks/post-checkout",
                 "s0", "s7", "passwd_link", "docs", "suid.sh", "Notes.txt", "notes.txt"):
        assert "REFUSED" in lines[path], (path, stat.stdout)
    for path in ("packages/x/.npmrc", "packages/y/.yarnrc.yml"):
        assert "NEEDS --allow-surface" in lines[path], lines[path]
    assert "-> s1/.." in lines["s0"] and "-> /root/.ssh" in lines["docs"] and "-> a" in lines["s9"]
    assert "NEEDS --allow-symlink" in lines["s9"] and "resolves outside the workspace" in lines["s7"]
    assert "100644" in lines["fine.txt"] and "5 bytes" in lines["fine.txt"]
    assert "104755" in lines["suid.sh"]
    patch = sandbox("diff", NAME)
    assert "\x1b" not in patch.stdout and "REFUSED" in patch.stdout and "symlink -> s1/.." in patch.stdout


def test_apply_writes_only_the_plain_file_and_says_why_for_the_rest(engine, hostile_copy):
    repo = hostile_copy
    before = snapshot(repo)
    applied = sandbox("apply", NAME)
    assert applied.returncode == 0, applied.stderr
    assert "\x1b" not in applied.stderr and "\x07" not in applied.stderr and "\r" not in applied.stderr
    assert "sandbox: applied 2 changes" in applied.stderr, applied.stderr   # fine.txt, docs/guide.md deleted
    for needle in ("not applied: .GIT/hooks/pre-commit", "not applied: .Github/workflows/x.yml",
                   "not applied: packages/x/.npmrc", "--allow-surface packages/x/.npmrc",
                   "not applied: s0", "not applied: docs", "not applied: Notes.txt"):
        assert needle in applied.stderr, (needle, applied.stderr)
    for never in NEVER:
        assert not os.path.lexists(repo / never), never
    assert (repo / "docs").is_dir() and not (repo / "docs").is_symlink()   # never replaced by the link
    assert (repo / "fine.txt").read_text() == "fine\n"
    changed = {k for k in set(before) | set(snapshot(repo)) if before.get(k) != snapshot(repo).get(k)}
    assert changed == {"fine.txt", "docs/guide.md"}, changed


def test_an_opt_in_that_cannot_be_honoured_writes_nothing(engine, hostile_copy):
    repo = hostile_copy
    before = snapshot(repo)
    links = [a for i in range(10) for a in ("--allow-symlink", f"s{i}")] + ["--allow-symlink", "passwd_link"]
    result = sandbox("apply", NAME, *links)
    assert result.returncode == 120, result.stderr
    assert "s0" in result.stderr and "outside the workspace" in result.stderr, result.stderr
    assert snapshot(repo) == before
    result = sandbox("apply", NAME, "--allow-symlink", "docs")
    assert result.returncode == 120 and "docs" in result.stderr, result.stderr
    assert snapshot(repo) == before
    result = sandbox("apply", NAME, "--allow-surface", "packages/nope/.npmrc")
    assert result.returncode == 120 and "no change" in result.stderr, result.stderr
    assert snapshot(repo) == before


def test_a_per_path_yes_writes_that_surface_and_that_link(engine, hostile_copy):
    repo = hostile_copy
    result = sandbox("apply", NAME, "--allow-surface", "packages/x/.npmrc", "--allow-symlink", "s9")
    assert result.returncode == 0, result.stderr
    assert (repo / "packages" / "x" / ".npmrc").read_text() == "script-shell=/tmp/evil\n"
    assert os.readlink(repo / "s9") == "a"      # dangling (an empty directory is no change), but inside
    assert not (repo / "packages" / "y").exists() and not os.path.lexists(repo / "s8")
    assert "sandbox: applied 4 changes" in result.stderr, result.stderr
    again = sandbox("apply", NAME, "--allow-surface", "packages/x/.npmrc", "--allow-symlink", "s9")
    assert again.returncode == 0 and "(4 were there already)" in again.stderr, again.stderr
    assert "sandbox: applied 0 changes" in again.stderr
