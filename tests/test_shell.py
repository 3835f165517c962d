"""`sandbox shell [NAME]` and `sandbox exec -it` (issue 43, item 2): which sandbox, the exit codes
that tell "no such sandbox" from "no engine", and the terminal relay on a real pty against a
played command (tests/test_shell_engine.py runs it against a real sandbox)."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
import threading
import time

import pytest
from click.testing import CliRunner

from launcher import labels as label
from launcher.cli import main
from launcher.engine import engine
from launcher.engine.enginefake import FakeEngine
from launcher.engine.execsocket import ExecSocket
from launcher.errors import EngineError, ExitCode, NoSandbox, PolicyError
from launcher.launch import sandboxes, terminal
from launcher.plan.compiler import hostname


class TerminalEngine(FakeEngine):
    """The fake engine whose exec_tty runs `program(argv, socket)` on the far end of a socket pair,
    in a thread (the command in the sandbox); its return value is the exit code."""

    def __init__(self, program, **knobs):
        super().__init__(**knobs)
        self.program, self.resizes, self.argvs = program, [], []

    def exec_tty(self, ref, argv, size=(0, 0)):
        import socket

        if not self.inspect(ref).running:
            raise EngineError(f"starting {argv[0]} in {ref}: not running")
        ours, theirs = socket.socketpair()
        exec_id = f"exec-{len(self.exec_codes) + 1}"
        self.exec_codes[exec_id], self.resizes = 0, [size]
        self.argvs.append(list(argv))

        def play():
            with theirs:   # closed once the code is known: the relay's end
                self.exec_codes[exec_id] = self.program(list(argv), theirs)
        threading.Thread(target=play, daemon=True).start()
        return exec_id, ExecSocket(ours)

    def exec_resize(self, exec_id, rows, columns):
        self.resizes.append((rows, columns))


def with_sandboxes(*items, program=None) -> TerminalEngine:
    """Sandboxes as (name, workspace, state, kind)."""
    fake = TerminalEngine(program or (lambda argv, sock: 0))
    for name, workspace, state, kind in items:
        fake.http.add_container(name, {label.MANAGED: "1", label.KIND: kind, label.WORKSPACE: workspace}, status=state)
    return fake


def invoke(fake, *args, cwd=None):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# which sandbox

def test_a_name_is_that_sandbox_when_it_runs_and_117_otherwise():
    fake = with_sandboxes(("box", "/w", "running", "up"), ("old", "/w", "exited", "up"))
    assert sandboxes.chosen(fake, "box", "/elsewhere").name == "box"
    for name, words in (("nope", "no sandbox named 'nope'"), ("old", "old is exited, not running")):
        with pytest.raises(NoSandbox, match=words) as missing:
            sandboxes.chosen(fake, name, "/w")
        assert missing.value.exit_code == ExitCode.NO_SANDBOX == 117


def test_without_a_name_the_one_running_for_the_workspace_that_holds_the_directory():
    fake = with_sandboxes(("mine", "/src/repo", "running", "up"), ("stopped", "/src/repo", "exited", "up"),
                          ("sibling", "/src/repo-2", "running", "up"), ("other", "/src/other", "running", "run"))
    assert sandboxes.chosen(fake, None, "/src/repo").name == "mine"
    assert sandboxes.chosen(fake, None, "/src/repo/lib/deep").name == "mine"
    assert sandboxes.chosen(fake, None, "/src/repo-2").name == "sibling"   # a prefix of a name is not a parent
    with pytest.raises(NoSandbox, match="no sandbox is running for /src") as none:
        sandboxes.chosen(fake, None, "/src")
    assert "`sandbox up`" in none.value.hint


def test_several_running_for_the_workspace_are_listed_and_a_name_asked_for():
    fake = with_sandboxes(("b-box", "/w", "running", "up"), ("a-box", "/w", "running", "up"))
    with pytest.raises(PolicyError, match="2 running for /w/sub: a-box, b-box") as several:
        sandboxes.chosen(fake, None, "/w/sub")
    assert several.value.exit_code == ExitCode.POLICY_INVALID and "give NAME" in str(several.value)


# the command line

def test_shell_with_no_sandbox_here_exits_117_with_a_hint_to_up(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "connect", lambda **_: with_sandboxes(("box", "/elsewhere", "running", "up")))
    monkeypatch.chdir(tmp_path)
    result = invoke(None, "shell")
    assert result.exit_code == ExitCode.NO_SANDBOX, result.stderr
    assert f"no sandbox is running for {os.path.realpath(tmp_path)}" in result.stderr and "`sandbox up`" in result.stderr


def test_shell_without_an_engine_exits_121_not_117(monkeypatch):
    def unreachable():
        raise EngineError("cannot reach the engine at /var/run/docker.sock: connection refused")
    monkeypatch.setattr(engine, "connect", unreachable)
    result = invoke(None, "shell")
    assert result.exit_code == ExitCode.ENGINE and "cannot reach the engine" in result.stderr


def test_shell_lists_several_and_needs_a_terminal_once_one_is_chosen(monkeypatch, tmp_path):
    here = os.path.realpath(tmp_path)
    monkeypatch.setattr(engine, "connect", lambda **_: with_sandboxes(("a", here, "running", "up"), ("b", here, "running", "up")))
    monkeypatch.chdir(tmp_path)
    several = invoke(None, "shell")
    assert several.exit_code == ExitCode.POLICY_INVALID and "a, b" in several.stderr
    no_terminal = invoke(None, "shell", "a")   # CliRunner's stdin is no terminal
    assert no_terminal.exit_code == ExitCode.USAGE and "needs a terminal" in no_terminal.stderr
    assert "sandbox exec a -- CMD" in no_terminal.stderr


@pytest.mark.parametrize("flags", [("-i",), ("-t",), ("-it", "--json")])
def test_exec_takes_i_and_t_together_and_without_json(monkeypatch, flags):
    monkeypatch.setattr(engine, "connect", lambda **_: with_sandboxes(("box", "/w", "running", "up")))
    result = invoke(None, "exec", *flags, "box", "--", "bash")
    assert result.exit_code == ExitCode.USAGE and "-i and -t go together" in result.stderr


def test_exec_it_of_a_missing_sandbox_is_117(monkeypatch):
    monkeypatch.setattr(engine, "connect", lambda **_: with_sandboxes(("box", "/w", "running", "up")))
    result = invoke(None, "exec", "-it", "nope", "--", "bash")
    assert result.exit_code == ExitCode.NO_SANDBOX and "no sandbox named 'nope'" in result.stderr


# the relay, on a real pty

def set_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def read_until(fd: int, needle: bytes, timeout: float = 5) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        try:
            seen += os.read(fd, 4096)
        except BlockingIOError:
            time.sleep(0.01)
    return seen


def echo(argv, sock) -> int:
    """The played command: says what it got; Ctrl-C is said and survived; `q` ends it with 7."""
    sock.sendall(b"ready> ")
    while data := sock.recv(1024):
        if b"\x03" in data:
            sock.sendall(b"^C seen, still here\r\n")
        elif b"q" in data:
            sock.sendall(b"bye\r\n")
            return 7
        else:
            sock.sendall(b"got " + data + b"\r\n")
    return 1


def test_the_relay_passes_keys_ctrl_c_and_the_size_and_returns_the_commands_code():
    fake = with_sandboxes(("box", "/w", "running", "up"), program=echo)
    main_fd, user_fd = os.openpty()   # user_fd: the user's terminal, as the launcher sees it
    set_size(user_fd, 30, 100)
    os.set_blocking(main_fd, False)
    before = termios.tcgetattr(user_fd)
    seen = {}

    def user():   # types into the terminal and reads what it shows
        seen["prompt"] = read_until(main_fd, b"ready> ")
        os.write(main_fd, b"hello")
        seen["echo"] = read_until(main_fd, b"got hello")
        os.write(main_fd, b"\x03")
        seen["interrupt"] = read_until(main_fd, b"still here")
        set_size(user_fd, 50, 160)
        os.kill(os.getpid(), signal.SIGWINCH)   # the pty's own would go to its foreground group: not this process
        deadline = time.monotonic() + 5
        while (50, 160) not in fake.resizes and time.monotonic() < deadline:
            time.sleep(0.01)
        os.write(main_fd, b"q")
        seen["end"] = read_until(main_fd, b"bye")
    typist = threading.Thread(target=user, daemon=True)
    typist.start()
    code = terminal.attach(fake, "box", list(terminal.SHELL), stdin=user_fd, stdout=user_fd)
    typist.join(5)
    try:
        assert code == 7
        assert b"ready> " in seen["prompt"] and b"got hello" in seen["echo"]
        assert b"^C seen, still here" in seen["interrupt"]   # a byte to the command: no KeyboardInterrupt here
        assert fake.resizes[0] == (30, 100) and (50, 160) in fake.resizes
        assert fake.argvs == [terminal.sized(list(terminal.SHELL))] and b"bye" in seen["end"]
        assert termios.tcgetattr(user_fd) == before   # raw mode undone
        assert signal.getsignal(signal.SIGWINCH) in (signal.SIG_DFL, None)
    finally:
        os.close(main_fd)
        os.close(user_fd)


def test_the_relay_ends_when_the_command_does_even_with_the_user_silent():
    fake = with_sandboxes(("box", "/w", "running", "up"), program=lambda argv, sock: sock.sendall(b"done\r\n") or 3)
    main_fd, user_fd = os.openpty()
    os.set_blocking(main_fd, False)
    try:
        assert terminal.attach(fake, "box", ["true"], stdin=user_fd, stdout=user_fd) == 3
        assert b"done" in read_until(main_fd, b"done")
    finally:
        os.close(main_fd)
        os.close(user_fd)


# the hostname

@pytest.mark.parametrize("name, expected", [
    ("sandbox-myrepo", "sandbox-myrepo"), ("My_Box.v2", "my-box-v2"), ("-x-", "x"), ("___", "sandbox"),
    ("a" * 80, "a" * 63), ("b" * 62 + "_c", "b" * 62),
])
def test_the_hostname_is_the_sandboxs_name_as_a_dns_label(name, expected):
    assert hostname(name) == expected
