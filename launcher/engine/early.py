"""The engine connected to and its facts asked on a thread while the launcher loads and compiles
the policy: Docker answers /version and /info only after running `runc --version` (and
docker-init's) for each, 15-30 ms apiece, and neither needs the plan."""

from __future__ import annotations

import threading
from typing import Callable

from launcher.host import engineid
from launcher.timings import timed


class Asked:
    """`connect()` and the engine's facts (engineid.asked), on a thread from now on. What went wrong
    there is raised where it was before, by `engine()` and `facts()`: after the policy's own errors."""

    def __init__(self, connect: Callable[[], object], listener=None):
        self.connect, self.listener, self.got = connect, listener, {}
        self.thread = threading.Thread(target=self._ask, daemon=True)
        self.thread.start()

    def _ask(self) -> None:
        try:
            self.got["engine"] = self.connect()
            with timed(self.listener, "engine facts"):
                self.got["facts"] = engineid.asked(self.got["engine"])
        except BaseException as exc:   # noqa: BLE001 - raised in the launch's own thread, in its turn
            self.got["error"] = exc

    def _value(self, key: str):
        if self.thread.is_alive():
            with timed(self.listener, "engine wait"):   # what of the two the launcher's own work did not hide
                self.thread.join()
        if key not in self.got:
            raise self.got["error"]
        return self.got[key]

    def engine(self):
        return self._value("engine")

    def facts(self) -> engineid.EngineFacts:
        return self._value("facts")
