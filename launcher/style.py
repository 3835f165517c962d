"""What a word means, not how it looks: renderers mark words good, warn or bad (and a diff's lines
added, removed, header or hunk) and the CLI decides whether that becomes colour (so reports, files
and --json never carry escape sequences)."""

from __future__ import annotations

from typing import Callable

GOOD, WARN, BAD = "good", "warn", "bad"
ADDED, REMOVED, HEADER, HUNK = "added", "removed", "header", "hunk"

Mark = Callable[[str, str], str]   # (text, kind) -> text as it will be shown


def plain(text: str, kind: str) -> str:
    """The default mark: the text unchanged."""
    return text
