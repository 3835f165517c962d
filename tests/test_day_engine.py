"""docs/day.md's walkthrough of a day, run as written (issue 43): `up --agent` on a terminal with a
task done by the real Claude Code against our stand-in model API, leave it, `shell` back in with a
server reached through `--port`, `ls`, `extend`, `fork`, `diff`, `apply`, `down`, `discard`. The one
thing added to the page's commands is where the stand-in model API is (`--model-upstream` and the
network it is on); the page's own key variable carries the stand-in's key."""

from __future__ import annotations

import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, claude_tui_task, read_until
from launcher.engine import images

SANDBOX = [sys.executable, "-m", "launcher"]
UPSTREAM = "api.test"
DAY = ROOT / "docs" / "day.md"


def walkthrough() -> list[str]:
    """The commands of day.md's first sh block, comments dropped."""
    block = re.search(r"```sh\n(.*?)```", DAY.read_text(), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_the_page_holds_the_day_this_test_runs():
    """The steps below follow the page: a new or reordered line there fails here first."""
    assert [shlex.split(line)[:2] for line in walkthrough()] == [
        ["cd", "their-repo"], ["sandbox", "up"], ["sandbox", "shell"], ["sandbox", "ls"], ["sandbox", "extend"],
        ["sandbox", "fork"], ["sandbox", "diff"], ["sandbox", "apply"], ["sandbox", "down"], ["sandbox", "discard"]]


@pytest.fixture
def upstream(engine):
    """The stand-in model API as api.test on an internal network the proxy joins; (network, its key)."""
    from conftest import model_api_network

    images.build(engine, images.model_api_image(), lambda line: None)
    key = "real-" + uuid.uuid4().hex
    network = f"sandbox-test-day-{os.getpid()}"
    with model_api_network(network, UPSTREAM, "dev.sandbox.test=day", key) as (log, reset):
        yield network, key


def on_a_pty(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, int]:
    """(pid, fd) of `argv` on a 120x40 pty of its own (its controlling terminal)."""
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.environ.update(env)
        os.execvp(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return pid, fd


def ended(pid: int, fd: int, timeout: float) -> tuple[int, bytes]:
    """(exit code, what it still showed) of a pty's process, killed after `timeout`."""
    shown = read_until(fd, b"\x00never", timeout)
    for _ in range(50):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), shown
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9, shown


@pytest.mark.engine
def test_a_day_as_the_page_writes_it(engine, upstream, tmp_path):
    network, key = upstream
    lines = [shlex.split(line) for line in walkthrough()]
    workspace = tmp_path / lines[0][1]
    shutil.copytree(ROOT / "examples" / "untrusted-repo", workspace, symlinks=True)
    for path in [workspace, *workspace.rglob("*")]:
        os.lchown(path, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    name = f"sandbox-{workspace.name}"
    env = {"ANTHROPIC_API_KEY": key}

    def sandbox(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run(SANDBOX + argv[1:], cwd=workspace, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **env})
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
        return done

    up, shell, ls, extend, fork, diff, apply, down, discard = lines[1:]
    try:
        pid, fd = on_a_pty(SANDBOX + up[1:] + ["--model-upstream", f"http://{UPSTREAM}", "--egress-network", network],
                           workspace, env)
        try:
            shown = read_until(fd, b"is up until", 300)
            assert b"probe passed" in shown, shown[-3000:].decode(errors="replace")

            def marked() -> bool:   # in the copy: the tree gets it only by `sandbox apply`
                return subprocess.run(["docker", "exec", name, "test", "-f", "/workspace/marker-claude-code.txt"]
                                      ).returncode == 0
            claude_tui_task(fd, workspace, shown, marked, started=True)
            os.write(fd, b"/exit")
            time.sleep(1)
            os.write(fd, b"\r")
            code, _ = ended(pid, fd, 30)
        finally:
            os.close(fd)
        assert code == 0 and not (workspace / "marker-claude-code.txt").exists()
        assert subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True,
                              text=True).stdout.strip() == "true"   # leaving the agent left the sandbox

        pid, fd = on_a_pty(SANDBOX + shell[1:], workspace, {})
        try:
            assert b"$ " in read_until(fd, b"$ ", 60)
            # SERVING once the server listens, spelt so the terminal's echo of the line is not it: the
            # echo used to match at once, the request raced the server, and the forwarder, finding
            # nobody inside, closed the connection (a CI run on a loaded host)
            os.write(fd, b"python3 -m http.server 5173 --bind 127.0.0.1 >/dev/null 2>&1 & until python3 -c "
                         b"\"import socket; socket.create_connection(('127.0.0.1', 5173))\" 2>/dev/null; "
                         b"do sleep 0.2; done; echo SERV'ING'\r")
            assert b"SERVING" in read_until(fd, b"SERVING\r\n", 30)
            with urllib.request.urlopen("http://127.0.0.1:5173/README.md", timeout=30) as answer:
                assert answer.status == 200 and answer.read() == (workspace / "README.md").read_bytes()
            os.write(fd, b"kill %1; exit 0\r")
            code, _ = ended(pid, fd, 30)
        finally:
            os.close(fd)
        assert code == 0

        listed = sandbox(ls).stdout
        assert re.search(rf"^{re.escape(name)} .*5173->5173", listed, re.M), listed
        assert "now ends at" in sandbox(extend).stderr
        sandbox(fork)
        assert "marker-claude-code.txt" in sandbox(diff).stdout
        sandbox(apply)
        assert (workspace / "marker-claude-code.txt").is_file()
        sandbox(down)
        sandbox(discard)
    finally:
        for leftover in (name, "try-b"):
            subprocess.run(SANDBOX + ["down", leftover], capture_output=True, timeout=120)
            subprocess.run(SANDBOX + ["discard", "--yes", leftover], capture_output=True, timeout=120)
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}"], capture_output=True, text=True).stdout
    volumes = subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True).stdout.split()
    assert not left and not [v for v in volumes if v.startswith((name, "try-b"))], volumes
