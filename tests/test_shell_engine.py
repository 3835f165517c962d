"""`sandbox shell` and `sandbox exec -it` against a real sandbox, through a real pty (the launcher's
controlling terminal, so a resize reaches it as SIGWINCH): keys in, output out, Ctrl-C to the
command in the sandbox and not the launcher, the size, the user, directory, environment and hostname."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import BIND, read_until

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
NAME = "sandbox-test-shell"


def sandbox(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300, **kwargs)


def on_a_pty(argv: list[str], cwd: str, rows: int = 40, columns: int = 120) -> tuple[int, int]:
    """`sandbox …` with a new pty as its controlling terminal, from `cwd`: (pid, the pty's fd)."""
    pid, fd = pty.fork()
    if pid == 0:   # pragma: no cover - the child
        os.chdir(cwd)
        os.execvp(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    return pid, fd


def exit_code(pid: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the launcher did not end")


def reap(pid: int) -> None:
    """Kill the launcher if a failed assertion left it running."""
    try:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    except ChildProcessError:   # already reaped
        pass


@pytest.fixture
def up(engine, workspace):
    result = sandbox("up", *BIND, str(workspace), "--name", NAME, "--no-shell")
    assert result.returncode == 0, result.stderr
    try:
        yield workspace
    finally:
        assert sandbox("down", NAME).returncode == 0


def test_shell_types_interrupts_resizes_and_returns_the_shells_code(up):
    pid, fd = on_a_pty(SANDBOX + ["shell"], str(up / "scripts") if (up / "scripts").is_dir() else str(up))
    try:
        prompt = read_until(fd, b"$ ", 60)
        assert f"@{NAME}:".encode() in prompt, prompt   # the hostname, so the prompt says which sandbox
        assert b"last proven" in prompt
        os.write(fd, b"echo U=$(id -u) W=$(pwd) H=$(hostname) P=$PATH T=$(tty)\n")
        seen = read_until(fd, b"T=/dev/pts/", 30)
        assert f"U=1000 W=/workspace H={NAME} P=".encode() in seen, seen
        path = seen.split(b"P=")[-1].split(b" T=")[0].decode()
        assert path == sandbox("exec", NAME, "--", "printenv", "PATH").stdout.splitlines()[-1]   # exec's environment
        os.write(fd, b"stty size\n")
        assert b"40 120" in read_until(fd, b"40 120", 30)

        started = time.monotonic()
        os.write(fd, b"sleep 60\n")
        time.sleep(1)
        os.write(fd, b"\x03")   # Ctrl-C: to the sleep in the sandbox, the shell and the launcher stay
        os.write(fd, b"echo ALIVE=$?\n")
        seen = read_until(fd, b"ALIVE=130", 30)
        assert b"ALIVE=130" in seen and time.monotonic() - started < 20, seen
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)

        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))   # SIGWINCH to the launcher
        time.sleep(0.5)
        os.write(fd, b"stty size\n")
        assert b"50 160" in read_until(fd, b"50 160", 30)

        os.write(fd, b"exit 5\n")
        assert exit_code(pid) == 5
    finally:
        reap(pid)
        os.close(fd)


def test_exec_it_runs_a_command_on_a_terminal_and_returns_its_code(up):
    pid, fd = on_a_pty(SANDBOX + ["exec", "-it", NAME, "--", "sh", "-c", "stty size; tty; read line; echo got=$line; exit 4"],
                       str(up), rows=33, columns=99)
    try:
        seen = read_until(fd, b"/dev/pts/", 60)
        assert b"33 99" in seen, seen
        os.write(fd, b"hello\n")
        assert b"got=hello" in read_until(fd, b"got=hello", 30)
        assert exit_code(pid) == 4
    finally:
        reap(pid)
        os.close(fd)
