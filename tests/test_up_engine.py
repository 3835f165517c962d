"""`sandbox up` on a real engine through a real pty (issue 43, items 2 and 3): `up -- CMD` runs CMD
on the terminal and returns its code while the sandbox stays; `up` again with no options attaches
with the stored ones, proven again; options that differ are refused; `up --new` starts a second
sandbox on the workspace with a name and a copy of its own. (`up --agent NAME` opening the agent's
own CLI against the stand-in model API: tests/test_agents_launcher.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import make_workspace, read_until
from launcher.errors import ExitCode
from test_shell_engine import exit_code, on_a_pty, reap

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300, cwd=cwd)


def running(name: str) -> bool:
    listing = json.loads(sandbox("ls", "--json").stdout)
    return any(i["name"] == name and i["state"] == "running" for i in listing)


def test_up_runs_a_command_on_the_terminal_attaches_with_its_options_and_new_starts_a_second(engine, tmp_path):
    workspace = tmp_path / f"upagent-{os.getpid()}"
    shutil.move(make_workspace(tmp_path), workspace)
    first, second = f"sandbox-test-up-{os.getpid()}", f"sandbox-upagent-{os.getpid()}"
    argv = SANDBOX + ["up", "--workspace-mode", "bind", "--idle", "30m", "--name", first, "--", "sh", "-c",
                      "echo hi from $(hostname); exit 3"]
    pid, fd = on_a_pty(argv, str(workspace))
    try:
        shown = read_until(fd, f"hi from {first}".encode(), 180)
        assert f"hi from {first}".encode() in shown, shown[-3000:].decode(errors="replace")
        assert b"probe passed" in shown and b"opening sh -c" in shown
        assert exit_code(pid) == 3   # the command's own code
        assert running(first)        # leaving it leaves the sandbox running

        again = sandbox("up", "--no-shell", "--json", cwd=str(workspace))   # no option at all: the stored ones
        data = json.loads(again.stdout)
        assert again.returncode == 0, again.stderr
        assert data["sandbox"] == first and data["reused"] and data["proven"]["how"] == "on attach", data
        assert data["options"] == {"policy": "untrusted", "workspace_mode": "bind", "idle": "30m"}
        assert "proving it again" in again.stderr and "probe passed again" in again.stderr

        other = sandbox("up", "--idle", "10m", "--no-shell", cwd=str(workspace))
        assert other.returncode == ExitCode.POLICY_INVALID, other.stderr
        assert f"{first} was started with: --policy untrusted --workspace-mode bind --idle 30m" in other.stderr
        assert "`sandbox up` with none of these options" in other.stderr and "--new" in other.stderr

        pid, fd2 = on_a_pty(SANDBOX + ["up", "--", "sh", "-c", "hostname; exit 4"], str(workspace))
        try:   # attached on a terminal: the same sandbox
            assert first.encode() in read_until(fd2, first.encode(), 120)
            assert exit_code(pid) == 4
        finally:
            reap(pid)
            os.close(fd2)

        new = sandbox("up", "--new", "--no-shell", "--json", cwd=str(workspace))   # untrusted: copy mode
        started = json.loads(new.stdout)
        assert new.returncode == 0, new.stderr
        assert started["sandbox"] == second and not started["reused"] and started["copy"] == second, started
        assert running(first) and running(second)
        several = sandbox("up", "--no-shell", cwd=str(workspace))
        assert several.returncode == ExitCode.POLICY_INVALID and f"{first}, {second}" in several.stderr
    finally:
        reap(pid)
        os.close(fd)
        for name in (first, second):
            sandbox("down", name)
            sandbox("discard", "--yes", name)
    assert not running(first) and not running(second)
