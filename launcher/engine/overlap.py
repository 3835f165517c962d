"""Engine calls made at once where their order is not a safety property (see launch.py)."""

from __future__ import annotations

import threading
from typing import Callable, Iterable


def each(call: Callable, items: Iterable) -> None:
    """`call(item)` for every item at once. Returns only when every call has ended (so nothing is
    still being made or removed behind the caller's back), then raises the first failure in order."""
    items = list(items)
    failed: list[BaseException | None] = [None] * len(items)

    def one(index: int) -> None:
        try:
            call(items[index])
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failed[index] = exc

    if len(items) < 2:   # nothing to overlap
        for index in range(len(items)):
            one(index)
    else:   # plain threads, started in order: concurrent.futures imports logging (7 ms)
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(items))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for exc in failed:
        if exc is not None:
            raise exc
