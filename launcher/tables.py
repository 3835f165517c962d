"""Text tables that fit a width: the widest columns give way first, and a cell too wide for its
column wraps onto further lines of its row (never cut, so nothing is lost on a narrow terminal)."""

from __future__ import annotations

import textwrap

GAP = 2
NARROWEST = 8   # a column is never squeezed below this (nor below its own width)


def _widths(rows: list[tuple[str, ...]], width: int) -> list[int]:
    """Per column: its widest cell, less what it must give up, widest column first, and never
    narrower than its longest word while that can fit (a name is not split)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    room = width - GAP * (len(widths) - 1)
    floor = [min(w, max((len(word) for row in rows for word in row[i].split()), default=0))
             for i, w in enumerate(widths)]
    while sum(floor) > room and max(floor) > NARROWEST:   # the longest words give way first
        floor[floor.index(max(floor))] -= 1
    while sum(widths) > room:
        widest = max(range(len(widths)), key=lambda i: (widths[i] > floor[i], widths[i]))
        if widths[widest] <= floor[widest]:
            break   # narrower than every column's floor: let the lines run over
        widths[widest] -= 1
    return widths


def _cell(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def table(rows: list[tuple[str, ...]], width: int) -> list[str]:
    """The lines of `rows` (the first is the header) laid out in at most `width` columns."""
    widths = _widths(rows, width)
    lines = []
    for row in rows:
        cells = [_cell(text, w) for text, w in zip(row, widths)]
        for depth in range(max(len(c) for c in cells)):
            parts = [(c[depth] if depth < len(c) else "").ljust(w) for c, w in zip(cells, widths)]
            lines.append((" " * GAP).join(parts).rstrip())
    return lines


def paragraph(text: str, width: int) -> list[str]:
    """A line of prose wrapped to `width`, later lines indented."""
    return textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
