"""Engine calls made at once where their order is not a safety property (see launch.py)."""

from __future__ import annotations

from typing import Callable, Iterable


def each(call: Callable, items: Iterable) -> None:
    """`call(item)` for every item at once. Returns only when every call has ended (so nothing is
    still being made or removed behind the caller's back), then raises the first failure in order."""
    items = list(items)
    if len(items) < 2:
        for item in items:
            call(item)
        return
    from concurrent.futures import ThreadPoolExecutor   # here: it imports logging, which none mode never needs

    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = [pool.submit(call, item) for item in items]
    for future in futures:
        future.result()
