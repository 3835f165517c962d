"""The way back on the real engine, frozen and bounded: `apply` writes the checkpoint `diff` showed
(not what a process the agent left running changed afterwards), and a huge or sparse file in the
copy costs the launcher little memory, and one over the size cap is refused with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from test_copy import SANDBOX, repo, run_copy, sandbox, snapshot  # noqa: F401 - repo: a fixture

pytestmark = pytest.mark.engine

# The agent's work, as overlay markers: a deletion (a whiteout), a directory of the copy replaced by
# a new one (an opaque directory), a new file; then a writer that waits until the review is over.
WORK = ("rm tests/test_app.py && rm -rf src && mkdir src && echo only > src/only.py && echo reviewed > notes.txt && "
        "(while [ ! -e /tmp/go ]; do sleep 0.1; done; echo late > notes.txt; echo late > src/late.py; "
        "rm src/only.py; echo done > /tmp/done) >/dev/null 2>&1 &")


def discard(name: str) -> None:
    """`sandbox discard`, again while another launcher's tools container holds the copy (a `gc` of a
    parallel session reads every copy)."""
    for _ in range(30):
        done = sandbox("discard", "--yes", name)
        if done.returncode == 0 or "no copy named" in done.stderr:
            return
        time.sleep(2)


def test_apply_takes_the_checkpoint_diff_showed_not_what_a_process_left_running_changed_later(engine, repo):
    name = f"frozen-{os.getpid()}"
    try:
        assert sandbox("up", str(repo), "--name", name, "--no-shell").returncode == 0
        assert sandbox("exec", name, "--", "sh", "-c", WORK).returncode == 0
        shown = sandbox("diff", name, "--json")
        assert shown.returncode == 0, shown.stderr
        status = {c["path"]: c["status"] for c in json.loads(shown.stdout)["changes"]}
        assert status == {"tests/test_app.py": "deleted", "src/app.py": "deleted", "src/only.py": "added",
                          "notes.txt": "added"}, status
        late = sandbox("exec", name, "--", "sh", "-c", "touch /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.1; done")
        assert late.returncode == 0, late.stderr

        reviewed = json.loads(shown.stdout)["checkpoint"]
        before = snapshot(repo)
        moved = sandbox("apply", name)                                      # the copy is no longer what was reviewed
        assert moved.returncode == 120 and f"sandbox diff {name}" in moved.stderr, moved.stderr
        assert f"checkpoint {reviewed}" in moved.stderr and "nothing was written" in moved.stderr, moved.stderr
        assert snapshot(repo) == before

        applied = sandbox("apply", name, "--checkpoint", str(reviewed))     # what was reviewed, on purpose
        assert applied.returncode == 0, applied.stderr
        assert (repo / "notes.txt").read_text() == "reviewed\n"           # not "late": written after the review
        assert (repo / "src" / "only.py").read_text() == "only\n" and not (repo / "src" / "late.py").exists()
        assert not (repo / "src" / "app.py").exists() and not (repo / "tests" / "test_app.py").exists()

        assert f"checkpoint {reviewed}" in applied.stderr, applied.stderr
        again = sandbox("diff", name, "--stat")                             # a new review freezes the new state
        assert again.returncode == 0 and "src/late.py" in again.stdout, again.stdout
        newer = json.loads(sandbox("diff", name, "--json").stdout)["checkpoint"]
        assert newer > reviewed and f"at checkpoint {newer}" in again.stderr, again.stderr   # unchanged: reused
        old = sandbox("apply", name, "--checkpoint", str(reviewed))
        assert old.returncode == 0 and "applied 0 changes" in old.stderr, old.stderr
    finally:
        sandbox("down", name)
        discard(name)


def _apply_measured(name: str) -> tuple[subprocess.CompletedProcess, int]:
    """`sandbox apply NAME` as the only child of a fresh process: its exit, output and peak RSS (bytes)."""
    probe = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stderr.write(done.stderr); sys.exit(print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) "
             "or done.returncode)")
    done = subprocess.run([sys.executable, "-c", probe, *SANDBOX, "apply", name], capture_output=True, text=True,
                          timeout=600)
    return done, int(done.stdout.split()[-1]) * 1024


def test_a_sparse_gigabyte_applies_in_little_memory_and_a_file_over_the_cap_is_refused(engine, repo):
    name = f"bounded-{os.getpid()}"
    big = "truncate -s 1G big.bin && printf data | dd of=big.bin bs=1 seek=536870912 conv=notrunc status=none"
    try:
        assert run_copy(repo, name, "sh", "-c", big + " && echo hi > small.txt").returncode == 0
        started = time.monotonic()
        applied, peak = _apply_measured(name)
        assert applied.returncode == 0, applied.stderr
        assert peak < 300 << 20, f"apply peaked at {peak >> 20} MiB for a 1 GiB sparse file"
        st = os.stat(repo / "big.bin")
        assert st.st_size == 1 << 30 and st.st_blocks * 512 < 1 << 20    # written sparse on the host too
        with open(repo / "big.bin", "rb") as data:
            data.seek(512 << 20)
            assert data.read(4) == b"data"
        print(f"apply of a 1 GiB sparse file: {peak >> 20} MiB peak, {time.monotonic() - started:.1f} s")

        # The upper volume has no size limit the engine could enforce here: a checkpoint (it copies the
        # changes) refuses changes over the copy's cap on disk.
        capped = sandbox("checkpoint", name, "--max-copy-size", "4k")
        assert capped.returncode == 120 and "no checkpoint was taken" in capped.stderr, capped.stderr

        assert run_copy(repo, name, "sh", "-c", "truncate -s 2G huge.bin && echo more >> small.txt").returncode == 0
        shown = sandbox("diff", name, "--stat")
        assert shown.returncode == 0 and "apply will refuse: huge.bin: 2.0 GiB" in shown.stderr, shown.stderr
        before = snapshot(repo)
        refused, peak = _apply_measured(name)
        assert refused.returncode == 120, refused.stderr
        assert "huge.bin" in refused.stderr and "2.0 GiB" in refused.stderr and "1.0 GiB" in refused.stderr
        assert "--max-file-size" in refused.stderr, refused.stderr
        assert snapshot(repo) == before and peak < 300 << 20                # nothing written, nothing buffered
    finally:
        discard(name)


def test_a_tools_container_that_overruns_its_time_is_killed_and_removed(engine):
    from launcher.engine.tools import run_tool
    from launcher.errors import EngineError

    name = f"slow-{os.getpid()}"
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"sleeping timed out after 2 s"):
        run_tool(engine, name=name, entrypoint=("sleep", "60"), argv=[], mounts=[], caps=(), labels={},
                 what="sleeping", timeout=2)
    assert time.monotonic() - started < 30
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}-tool-"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


@pytest.mark.exclusive
def test_gc_removes_a_checkpoint_view_a_killed_launcher_left_and_keeps_a_live_ones(engine):
    from launcher import labels as label

    names = {f"gone-{os.getpid()}-view-dead00": "999999999", f"live-{os.getpid()}-view-live00": str(os.getpid())}
    for name, pid in names.items():
        engine.create_volume(name, {label.MANAGED: "1", label.KIND: "copy-view", label.COPY: name.split("-view")[0],
                                    label.OWNER_PID: pid})
    try:
        assert sandbox("gc").returncode == 0
        dead, live = names
        assert engine.volume_info(dead) is None and engine.volume_info(live) is not None
    finally:
        for name in names:
            if engine.volume_info(name) is not None:
                engine.remove_volume(name)
