"""A short-lived container's attached output as the launcher reads it: stdout as a file, stderr
kept aside. No docker import: the engine passes in how its errors are mapped (`guard`)."""

from __future__ import annotations

import contextlib
import io
from typing import Callable, ContextManager, Iterator

Guard = Callable[[str], ContextManager[None]]


def _unguarded(action: str) -> ContextManager[None]:
    return contextlib.nullcontext()


class _Frames(io.RawIOBase):
    """An attached container's stdout as a file; its stderr is kept aside (the last 64 KiB)."""

    def __init__(self, frames: Iterator[tuple[bytes | None, bytes | None]], guard: Guard):
        self.frames, self.pending, self.stderr, self.guard = frames, memoryview(b""), bytearray(), guard

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            with self.guard("reading a container's output"):
                out, err = next(self.frames, (None, None))
            if out is None and err is None:
                return 0
            if err:
                self.stderr += err
                del self.stderr[:-65536]
            self.pending = memoryview(out or b"")
        count = min(len(buffer), len(self.pending))
        buffer[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count


class Attached:
    """A running short-lived container (Engine.run_attached): its stdout as a binary file."""

    def __init__(self, frames: Iterator[tuple[bytes | None, bytes | None]], guard: Guard = _unguarded):
        self._frames = _Frames(frames, guard)
        self.stdout = io.BufferedReader(self._frames, 1 << 20)
        self.exit_code: int | None = None
        self.timed_out = False      # set from the timer's thread when it killed the container

    @property
    def stderr(self) -> bytes:
        return bytes(self._frames.stderr)
