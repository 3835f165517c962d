"""An interactive command in a running sandbox: the user's terminal, in raw mode, relayed to a
terminal of the command's own (Engine.exec_tty) and resized with it. Keys pass as bytes, so Ctrl-C
interrupts the command in the sandbox, never the launcher. No docker import: the engine's socket."""

from __future__ import annotations

import os
import select
import signal
import termios
import threading
import time
import tty
from contextlib import suppress
from typing import Callable

from launcher.engine.engineproto import Engine
from launcher.errors import EngineError

# What `sandbox shell` runs: the image's bash, as `up` opens it, or its sh when it has none.
SHELL = ("sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash; exec sh")


def size(fd: int) -> tuple[int, int]:
    """The terminal's rows and columns (0, 0 when `fd` has none)."""
    try:
        columns, rows = os.get_terminal_size(fd)
    except OSError:
        return 0, 0
    return rows, columns


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def relay(sock, resize: Callable[[int, int], None], stdin: int = 0, stdout: int = 1) -> None:
    """Relay `stdin` (a terminal, put in raw mode until the end) to `sock` and `sock` to `stdout`
    until the command's side closes; `resize(rows, columns)` at the start and on each SIGWINCH."""
    wake_read, wake_write = os.pipe()
    ended = threading.Event()

    def output() -> None:
        try:
            while data := sock.recv(1 << 16):
                _write_all(stdout, data)
        except OSError:   # the connection broke, or the terminal went away: the command's side is over
            pass
        finally:
            ended.set()
            with suppress(OSError):
                os.write(wake_write, b"e")

    def on_winch(signum, frame) -> None:   # the resize is an engine request: made in the loop, not here
        with suppress(OSError):
            os.write(wake_write, b"w")

    saved = termios.tcgetattr(stdin)
    previous = signal.signal(signal.SIGWINCH, on_winch)
    reader = threading.Thread(target=output, name="terminal-output", daemon=True)
    try:
        tty.setraw(stdin, termios.TCSANOW)
        reader.start()
        _resize(resize, stdin, first=True)
        inputs = [stdin, wake_read]
        while not ended.is_set():
            ready = select.select(inputs, [], [])[0]
            if wake_read in ready and b"w" in os.read(wake_read, 512):
                _resize(resize, stdin)
            if stdin in ready:
                if data := os.read(stdin, 1 << 16):
                    try:
                        sock.send(data)
                    except OSError:   # the command ended meanwhile
                        break
                else:   # the user's side closed; the command's output still comes until it ends
                    inputs.remove(stdin)
    finally:
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, signal.SIG_DFL if previous is None else previous)   # None: set outside Python
        sock.shutdown()
        reader.join(timeout=2)
        os.close(wake_read)
        os.close(wake_write)


def _resize(resize: Callable[[int, int], None], fd: int, first: bool = False) -> None:
    """Pass the terminal's size on. The first may come before the engine has started the command:
    tried a few times, as `docker exec` does; a late one for a command that ended is no matter."""
    rows, columns = size(fd)
    if not rows or not columns:
        return
    for attempt in range(10 if first else 1):
        try:
            return resize(rows, columns)
        except EngineError:
            time.sleep(0.01 * (attempt + 1))


# Engines before API 1.42 (Docker 20.10) ignore an exec's ConsoleSize: its terminal is 0x0 until the
# first resize, which races the command's start. The command waits for it (at most 2 s; none when
# the image has no stty, whose `stty size` then prints nothing).
_WAIT_FOR_SIZE = ('i=0; while [ "$(stty size 2>/dev/null)" = "0 0" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); '
                  'done; exec "$@"')


def sized(argv: list[str]) -> list[str]:
    """`argv`, started once its terminal has the size the launcher sends."""
    return ["sh", "-c", _WAIT_FOR_SIZE, "sh", *argv]


def attach(engine: Engine, ref: str, argv: list[str], stdin: int = 0, stdout: int = 1) -> int:
    """Run `argv` in the running container `ref` on a terminal (its user, working directory and
    environment) relayed to the user's; its exit code."""
    rows_columns = size(stdin)
    exec_id, sock = engine.exec_tty(ref, sized(list(argv)) if all(rows_columns) else list(argv), rows_columns)
    try:
        relay(sock, lambda rows, columns: engine.exec_resize(exec_id, rows, columns), stdin, stdout)
    finally:
        sock.close()
    for _ in range(50):   # the stream ends as the command does; the engine may record its code just after
        if not engine.exec_running(exec_id):
            break
        time.sleep(0.1)
    return engine.exec_exit_code(exec_id)
