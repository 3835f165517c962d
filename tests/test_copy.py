"""Copy mode on the real engine: the agent works on a copy, the host tree is untouched until
`sandbox apply`, which carries back only what may come back, all or nothing."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
AGENT = ("bash", "-c", "echo more >> README.md && rm -f tests/test_app.py && echo new > new.txt && mkdir -p src/deep && "
         "echo deep > src/deep/file.py && chmod +x src/deep/file.py && mkdir -p .git/hooks && "
         "echo evil > .git/hooks/pre-commit && echo 'use flake' > .envrc && ln -s /etc/passwd out-link && "
         "mkfifo pipe && printf 'x' > \"$(printf 'esc\\033[31mred')\"")


def sandbox(*args, timeout=300, **kw):
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout, **kw)


def digest(path) -> str:
    """SHA-256 of a file's data runs and where they lie (SEEK_DATA/SEEK_HOLE): equal digests mean
    equal bytes, and a sparse gigabyte costs its few data blocks, not a gigabyte read and hashed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd, pos, size = f.fileno(), 0, os.fstat(f.fileno()).st_size
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:   # ENXIO: only a hole is left
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            h.update(f"{start}+{end - start}:".encode())
            f.seek(start)
            while start < end:
                chunk = f.read(min(end - start, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                start += len(chunk)
            pos = end
        h.update(f"size {size}".encode())
    return h.hexdigest()


def snapshot(root) -> dict:
    """Every entry below root: type, mode, owner and content (byte for byte)."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content = os.readlink(path) if os.path.islink(path) else (digest(path) if os.path.isfile(path) else "")
            found[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, content)
    return found


@pytest.fixture
def repo(workspace):
    """The example repository as a git checkout with one commit, owned by 1000."""
    return make_repo(workspace)


def make_repo(workspace):
    """`workspace` made a git checkout with one commit, owned by 1000, as the `repo` fixture does."""
    git = ["git", "-C", str(workspace), "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:5] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "start"], check=True)
    subprocess.run(["chown", "-R", "1000:1000", str(workspace)], check=True)
    return workspace


def run_copy(ws, name, *agent):
    return sandbox("run", "--workspace-mode", "copy", "--name", name, "-w", str(ws), "--", *(agent or AGENT))


def test_the_agent_changes_only_its_copy_and_diff_shows_what_apply_would_carry_back(engine, repo):
    before = snapshot(repo)
    result = run_copy(repo, "copy-t1")
    try:
        assert result.returncode == 0, result.stderr
        assert "probe passed" in result.stderr and "changes are in the copy copy-t1" in result.stderr
        assert snapshot(repo) == before                      # byte for byte: nothing reached the host
        shown = sandbox("diff", "copy-t1")
        assert shown.returncode == 0, shown.stderr
        assert "+more" in shown.stdout and "b/new.txt" in shown.stdout and "a/tests/test_app.py" in shown.stdout
        assert "\x1b" not in shown.stdout and "esc\\u001b[31mred" in shown.stdout   # the name cannot colour a terminal
        refused = {line.split()[1]: line for line in sandbox("diff", "copy-t1", "--stat").stdout.splitlines()
                   if "REFUSED" in line}
        assert set(refused) == {".git/hooks/pre-commit", ".envrc", "out-link", "pipe",   # a FIFO: no hang
                                "esc\\u001b[31mred"}, refused                         # a name with an escape
        data = json.loads(sandbox("diff", "copy-t1", "--json").stdout)
        status = {c["path"]: c["status"] for c in data["changes"]}
        assert status["README.md"] == "modified" and status["tests/test_app.py"] == "deleted"
        assert status["src/deep/file.py"] == "added"

        applied = sandbox("apply", "copy-t1")
        assert applied.returncode == 0, applied.stderr
        assert (repo / "README.md").read_text().endswith("more\n") and not (repo / "tests" / "test_app.py").exists()
        deep = repo / "src" / "deep" / "file.py"
        assert deep.read_text() == "deep\n" and os.stat(deep).st_mode & 0o777 == 0o755
        assert (os.stat(deep).st_uid, os.stat(deep).st_gid) == (1000, 1000)   # the workspace owner's
        for never in (".envrc", "out-link", ".git/hooks/pre-commit", "esc\x1b[31mred"):
            assert not os.path.lexists(repo / never), never
        again = sandbox("apply", "copy-t1")
        assert again.returncode == 0 and "applied 0 changes" in again.stderr, again.stderr
    finally:
        sandbox("discard", "--yes", "copy-t1")


def test_apply_refuses_when_the_host_changed_underneath_and_writes_nothing(engine, repo):
    assert run_copy(repo, "copy-t2").returncode == 0
    try:
        (repo / "README.md").write_text("the user edited this meanwhile\n")
        before = snapshot(repo)
        result = sandbox("apply", "copy-t2")
        assert result.returncode == 119, result.stderr
        assert "README.md: changed on the host since the copy was taken" in result.stderr
        assert snapshot(repo) == before
    finally:
        sandbox("discard", "--yes", "copy-t2")


def test_apply_never_follows_a_symlink_planted_in_the_host_tree(engine, repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    assert run_copy(repo, "copy-t3", "bash", "-c", "mkdir -p lib/deep && echo x > lib/deep/file.py").returncode == 0
    try:
        os.symlink(outside, repo / "lib")       # planted after the copy was taken
        result = sandbox("apply", "copy-t3")
        assert result.returncode == 119 and "lib on the host is not a directory" in result.stderr, result.stderr
        assert list(outside.iterdir()) == []
    finally:
        sandbox("discard", "--yes", "copy-t3")


def test_apply_to_a_branch_commits_without_touching_the_work_tree(engine, repo):
    assert run_copy(repo, "copy-t4").returncode == 0
    try:
        before = snapshot(repo)
        result = sandbox("apply", "copy-t4", "--to", "agent/work", "-m", "agent work")
        assert result.returncode == 0, result.stderr
        git = ["git", "-C", str(repo), "-c", "safe.directory=*"]
        files = subprocess.run(git + ["show", "--name-status", "--format=%s", "agent/work"], capture_output=True,
                               text=True, check=True).stdout
        assert "agent work" in files and "A\tnew.txt" in files and "D\ttests/test_app.py" in files and "M\tREADME.md" in files
        assert ".envrc" not in files and "out-link" not in files and "hooks" not in files
        assert {k: v for k, v in snapshot(repo).items() if not k.startswith(".git")} == \
               {k: v for k, v in before.items() if not k.startswith(".git")}
        assert sandbox("apply", "copy-t4", "--to", "agent/work").returncode == 120   # never overwrites a branch
    finally:
        sandbox("discard", "--yes", "copy-t4")


def test_checkpoints_and_rewind_and_a_second_run_continues_the_copy(engine, repo):
    assert run_copy(repo, "copy-t5", "bash", "-c", "echo one > one.txt").returncode == 0
    try:
        assert run_copy(repo, "copy-t5", "bash", "-c", "test -f one.txt && echo two > two.txt").returncode == 0
        listed = json.loads(sandbox("checkpoints", "copy-t5", "--json").stdout)
        assert [c["message"] for c in listed] == ["the copy was made", "run ended (exit 0)", "run ended (exit 0)"]
        assert sandbox("rewind", "copy-t5", "1").returncode == 0
        paths = {c["path"] for c in json.loads(sandbox("diff", "copy-t5", "--json").stdout)["changes"]}
        assert paths == {"one.txt"}
        assert sandbox("rewind", "copy-t5", "3").returncode == 0     # the checkpoint the rewind took
        paths = {c["path"] for c in json.loads(sandbox("diff", "copy-t5", "--json").stdout)["changes"]}
        assert paths == {"one.txt", "two.txt"}
    finally:
        sandbox("discard", "--yes", "copy-t5")


def test_a_root_owned_0700_workspace_works_in_copy_mode(engine, tmp_path):
    ws = tmp_path / "rootws"
    ws.mkdir(mode=0o700)
    (ws / "data.txt").write_text("root's\n")
    os.chmod(ws / "data.txt", 0o600)
    result = run_copy(ws, "copy-t6", "bash", "-c", "id -u && cat data.txt && echo done >> data.txt")
    try:
        assert result.returncode == 0, result.stderr
        assert "1000" in result.stdout and "root's" in result.stdout
        assert (ws / "data.txt").read_text() == "root's\n"
        assert sandbox("apply", "copy-t6").returncode == 0
        assert (ws / "data.txt").read_text() == "root's\ndone\n" and os.stat(ws / "data.txt").st_uid == 0
    finally:
        sandbox("discard", "--yes", "copy-t6")


@pytest.mark.exclusive
def test_an_interrupted_run_keeps_the_copy_and_gc_keeps_unapplied_work(engine, repo):
    proc = subprocess.Popen(SANDBOX + ["run", "--workspace-mode", "copy", "--name", "copy-t7", "-w", str(repo), "--",
                                       "bash", "-c", "echo work > work.txt; echo READY; sleep 300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        kept = sandbox("gc")
        assert kept.returncode == 0 and "kept the copy copy-t7: 1 changes not applied" in kept.stderr, kept.stderr
        assert "copy-t7" in sandbox("ls").stdout
        assert json.loads(sandbox("diff", "copy-t7", "--json").stdout)["changes"][0]["path"] == "work.txt"
        assert sandbox("apply", "copy-t7").returncode == 0
        gone = sandbox("gc")
        assert "copy-t7" in gone.stderr and "copy-t7" not in sandbox("ls").stdout   # applied: nothing to lose
    finally:
        proc.kill()
        sandbox("discard", "--yes", "copy-t7")


@pytest.mark.exclusive
def test_gc_leaves_a_container_someone_ran_from_our_image(engine):
    """It inherits the image's managed label but carries no kind of ours: it is not ours to remove."""
    name = f"users-own-{os.getpid()}"
    subprocess.run(["docker", "run", "-d", "--name", name, "--network", "none", "sandbox/agent:bookworm",
                    "sleep", "60"], check=True, capture_output=True)
    try:
        assert sandbox("gc").returncode == 0
        time.sleep(0.5)
        assert subprocess.run(["docker", "inspect", name], capture_output=True).returncode == 0
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_up_works_on_a_copy_that_down_keeps_and_a_second_up_continues(engine, repo):
    """And `down` drops a copy that holds no change; `up --fresh` starts on a new copy beside one
    that holds changes, which stays (and is said to)."""
    name = f"copy-up-{os.getpid()}"
    try:
        assert sandbox("up", str(repo), "--name", name, "--no-shell").returncode == 0
        clean = sandbox("down", name)
        assert clean.returncode == 0 and f"no changes: copy {name} dropped" in clean.stderr, clean.stderr
        assert engine.volume_info(f"{name}-upper") is None
        assert sandbox("up", str(repo), "--name", name, "--no-shell").returncode == 0
        assert sandbox("exec", name, "--", "sh", "-c", "echo from-up > up.txt").returncode == 0
        live = json.loads(sandbox("diff", name, "--json").stdout)          # while it runs
        assert [c["path"] for c in live["changes"]] == ["up.txt"]
        assert sandbox("checkpoint", name, "-m", "mid-way").returncode == 0
        down = sandbox("down", name)
        assert down.returncode == 0 and f"its work stays in the copy {name}" in down.stderr, down.stderr
        assert not (repo / "up.txt").exists()
        assert sandbox("up", str(repo), "--name", name, "--no-shell").returncode == 0
        seen = sandbox("exec", name, "--", "cat", "up.txt")
        assert seen.stdout == "from-up\n", seen.stderr
        assert sandbox("rewind", name, "0").returncode == 120           # in use: `down` first
        messages = [c["message"] for c in json.loads(sandbox("checkpoints", name, "--json").stdout)]
        assert messages == ["the copy was made", "shown by diff", "mid-way", "sandbox down"]   # diff froze what it showed
        assert sandbox("up", str(repo), "--name", name, "--fresh", "--no-shell").returncode == 120   # in use
        assert "(1 changed)" in sandbox("down", name).stderr
        fresh = sandbox("up", str(repo), "--name", name, "--fresh", "--no-shell")
        assert fresh.returncode == 0, fresh.stderr
        assert f"--fresh: the copy {name} holds 1 changes and stays" in fresh.stderr
        assert f"the new sandbox and its copy are {name}-2" in fresh.stderr
        assert sandbox("exec", f"{name}-2", "--", "test", "!", "-e", "up.txt").returncode == 0   # a new copy
        assert f"no changes: copy {name}-2 dropped" in sandbox("down", f"{name}-2").stderr
        assert json.loads(sandbox("diff", name, "--json").stdout)["changes"][0]["path"] == "up.txt"   # kept
    finally:
        for sandbox_name in (name, f"{name}-2"):
            sandbox("down", sandbox_name)
            sandbox("discard", "--yes", sandbox_name)


def test_excluded_paths_are_not_copied(engine, repo, tmp_path):
    (repo / "node_modules" / "big").mkdir(parents=True)
    (repo / "node_modules" / "big" / "index.js").write_text("x\n")
    (repo / "build.o").write_text("obj\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nname: excl\ndescription: d\nextends: [untrusted]\n"
                      "workspace: {access: read-write, mode: copy, exclude: [node_modules, '*.o']}\n")
    result = sandbox("run", "-p", str(policy), "--name", "copy-t8", "-w", str(repo), "--",
                     "sh", "-c", "ls -A; test ! -e node_modules && test ! -e build.o && test -e README.md")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no changes: copy copy-t8 dropped" in result.stderr   # left out is no deletion
    finally:
        sandbox("discard", "--yes", "copy-t8")


@pytest.mark.exclusive
def test_a_launcher_killed_while_copying_leaves_what_gc_removes(engine, repo):
    """kill -9 between the copy's volumes: an incomplete copy, never used, that gc takes."""
    from launcher import labels as label
    from launcher.engine.engine import connect

    eng, name = connect(), "copy-t9"
    labels = {label.MANAGED: "1", label.KIND: "copy", label.COPY: name, label.WORKSPACE: str(repo),
              label.OWNER_PID: "999999999"}
    eng.create_volume(f"{name}-base", labels)
    try:
        assert "copy-t9" in sandbox("ls").stdout
        assert sandbox("gc").returncode == 0
        assert eng.volume_info(f"{name}-base") is None and "copy-t9" not in sandbox("ls").stdout
    finally:
        if eng.volume_info(f"{name}-base") is not None:
            eng.remove_volume(f"{name}-base")
