"""An `up` session's two ends on a real engine: limits.idle (no input or output on any terminal of
the sandbox) and limits.session; and a new `up` after either resumes the kept copy."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import BIND, read_until

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300)


def ended(engine, name: str, seconds: float) -> bool:
    """Whether the sandbox's container stops within `seconds`."""
    deadline = time.monotonic() + seconds
    while engine.inspect(name).running:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def terminal(name: str, script: str) -> tuple[subprocess.Popen, int]:
    """`docker exec -it NAME bash -c SCRIPT` on a pty of ours (as `sandbox up`'s shell is)."""
    primary, secondary = os.openpty()
    proc = subprocess.Popen(["docker", "exec", "-it", name, "bash", "-c", script], stdin=secondary,
                            stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    return proc, primary


def test_output_on_a_terminal_keeps_a_session_past_its_idle_time_and_silence_ends_it(engine, workspace):
    name = "sandbox-test-idle"
    try:
        started = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--idle", "20s")
        assert started.returncode == 0 and "20s without terminal input or output (limits.idle)" in started.stderr, \
            started.stderr
        busy, primary = terminal(name, "for i in $(seq 9); do echo working $i; sleep 4; done")
        try:
            assert b"working 9" in read_until(primary, b"working 9", 60)   # 36 s of output: past 20 s idle
            assert engine.inspect(name).running, "the session ended while its terminal had output"
            assert busy.wait(timeout=30) == 0
            quiet, quiet_fd = terminal(name, "sleep 120")   # attached, silent: idle all the same
            try:
                seen = read_until(quiet_fd, b"(limits.idle)", 30)
                assert b"without terminal input or output (limits.idle)" in seen, seen
                assert ended(engine, name, 30), "a silent sandbox outlived limits.idle"
            finally:
                quiet.kill()
                os.close(quiet_fd)
        finally:
            busy.kill()
            os.close(primary)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
        assert "the session ended: no terminal input or output for 20 s (limits.idle)" in logs, logs
        listed = sandbox("ls")
        assert f"{name}" in listed.stdout and "exited" in listed.stdout
    finally:
        sandbox("down", name)


def test_a_new_up_after_the_session_ended_takes_it_down_and_resumes_the_kept_copy(engine, workspace):
    name = "sandbox-test-resume"
    try:
        first = sandbox("up", str(workspace), "--name", name, "--no-shell", "--timeout", "6s")   # untrusted: copy mode
        assert first.returncode == 0, first.stderr
        wrote = subprocess.run(["docker", "exec", name, "sh", "-c", "echo day-one > /workspace/notes.txt"],
                               capture_output=True, text=True)
        assert wrote.returncode == 0, wrote.stderr
        assert ended(engine, name, 30)
        listed = sandbox("ls", "--json")
        assert listed.returncode == 0
        again = sandbox("up", str(workspace), "--name", name, "--no-shell")
        assert again.returncode == 0, again.stderr
        assert f"{name}'s session ended (exited); taking it down before a new one starts" in again.stderr
        assert f"its work stays in the copy {name}" in again.stderr   # what `down` says, said first
        read = subprocess.run(["docker", "exec", name, "cat", "/workspace/notes.txt"], capture_output=True, text=True)
        assert read.stdout == "day-one\n", (read.stdout, read.stderr)   # nothing of the day was lost
        assert not (workspace / "notes.txt").exists()   # still only in the copy
        ls = sandbox("ls")
        line = next(row for row in ls.stdout.splitlines() if row.startswith(name + " ") and " up " in row)
        assert "/1h " in line, line   # ENDS: its latest end and its idle limit
    finally:
        sandbox("down", name)
        sandbox("discard", name, "--yes")
