"""Wall time per launch phase (`--timings`, SANDBOX_TIMINGS=1): the core records, the CLI prints.

Phases may overlap (proxy mode starts the proxy while it creates the agent's container), so each
entry keeps when it began as well as how long it took."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import ContextManager, Iterator

IMPORTED = time.perf_counter()   # the CLI imports this module first: its imports start about here
FIRST = "imports"   # the first phase's name: "helper" when the resident helper ran the command (from the client's start)


@dataclass(frozen=True, kw_only=True)
class Phase:
    name: str
    began: float     # seconds after the timeline's origin
    seconds: float


class Timeline:
    """Phases in the order they ended; safe to record into from several threads."""

    def __init__(self, origin: float | None = None):
        self.origin = time.perf_counter() if origin is None else origin
        self.phases: list[Phase] = []
        self._lock = threading.Lock()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, began, time.perf_counter() - began)

    def add(self, name: str, began: float, seconds: float) -> None:
        with self._lock:
            self.phases.append(Phase(name=name, began=began - self.origin, seconds=seconds))

    def since(self, name: str, began: float) -> None:
        """A phase that began at `began` (a perf_counter reading) and ends now."""
        self.add(name, began, time.perf_counter() - began)

    def total(self) -> float:
        return time.perf_counter() - self.origin


def timed(listener, name: str) -> ContextManager:
    """`listener.phase(name)` when the listener records phases (the CLI's does), else nothing."""
    phase = getattr(listener, "phase", None)
    return phase(name) if phase is not None else nullcontext()
