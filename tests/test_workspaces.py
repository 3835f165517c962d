"""Many sandboxes on one workspace at once: each passes its probe, none loses a protection when
another one ends, and the host tree is as it was once they are all gone (the placeholders Docker
creates for missing protected paths are shared, and removed only by the last one out)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BIND

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, timeout=300):
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def tree(path) -> list[str]:
    return sorted(f"{os.path.relpath(os.path.join(d, n), path)}:{os.lstat(os.path.join(d, n)).st_mode:o}"
                  for d, dirs, files in os.walk(path) for n in dirs + files)


@pytest.fixture
def bare(tmp_path):
    """A workspace with none of the protected paths, so every sandbox needs every placeholder."""
    ws = tmp_path / "bare"
    ws.mkdir()
    (ws / "README.md").write_text("x\n")
    for path in (ws, ws / "README.md"):
        os.chown(path, 1000, 1000)
    return ws


def test_ten_runs_at_once_on_one_workspace_all_pass_and_leave_the_tree_as_it_was(engine, bare):
    before = tree(bare)
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: sandbox("run", *BIND, "-w", str(bare), "--", "true"), range(10)))
    assert [r.returncode for r in results] == [0] * 10, [r.stderr[-800:] for r in results if r.returncode]
    assert tree(bare) == before
    assert engine.list(f"dev.sandbox.workspace={bare}") == []


def test_a_sandbox_keeps_its_protections_while_others_on_its_workspace_come_and_go(engine, bare):
    before, name = tree(bare), f"sandbox-test-shared-{os.getpid()}"
    assert sandbox("up", *BIND, str(bare), "--name", name, "--no-shell").returncode == 0
    try:
        with ThreadPoolExecutor(5) as pool:
            runs = list(pool.map(lambda _: sandbox("run", *BIND, "-w", str(bare), "--", "true"), range(5)))
        assert [r.returncode for r in runs] == [0] * 5, [r.stderr[-800:] for r in runs if r.returncode]
        # Had a finished run removed the shared mount points, the up sandbox's read-only mounts
        # there would be detached: .git and .github would be writable inside it now.
        attempt = sandbox("exec", name, "--", "bash", "-c",
                          "for p in .git/config .github/x .envrc; do : > /workspace/$p && echo WROTE-$p; done; true")
        assert "WROTE" not in attempt.stdout and "Read-only file system" in attempt.stderr + attempt.stdout, attempt
    finally:
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    assert tree(bare) == before


@pytest.mark.exclusive
def test_a_launcher_killed_mid_run_leaves_nothing_gc_does_not_remove(engine, bare):
    before = tree(bare)
    proc = subprocess.Popen(SANDBOX + ["run", *BIND, "-w", str(bare), "--", "sleep", "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "probe passed" not in proc.stderr.readline():
        pass
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert engine.list(f"dev.sandbox.workspace={bare}"), "the killed launcher's sandbox should still be there"
    assert sandbox("gc").returncode == 0
    assert engine.list(f"dev.sandbox.workspace={bare}") == [] and tree(bare) == before
