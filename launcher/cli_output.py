"""Colour for the human-readable output, and only there: when the stream is a terminal, NO_COLOR
is unset or empty and TERM is not dumb. --json, reports, step summaries and pipes stay plain."""

from __future__ import annotations

import sys

import click

from launcher.style import BAD, GOOD, WARN, Mark, plain

_LOOK = {GOOD: {"fg": "green"}, WARN: {"fg": "yellow"}, BAD: {"fg": "red", "bold": True}}
# Status lines that open with a verdict; only that word is coloured, the message stays as it is.
_STATUS = (("probe passed", GOOD), ("error:", BAD), ("warning:", WARN), ("egress blocked", WARN),
           ("agent timed out", WARN), ("built", GOOD), ("created", GOOD))


def colour_on(err: bool = False) -> bool:
    """Whether stdout (stderr with `err`) may carry colour now."""
    from launcher import host

    isatty = getattr(sys.stderr if err else sys.stdout, "isatty", None)
    return bool(isatty and isatty()) and host.colour_allowed()


def marker(err: bool = False) -> Mark:
    """A Mark for renderers: colour for this stream when allowed, else the text unchanged."""
    if not colour_on(err):
        return plain
    return lambda text, kind: click.style(text, **_LOOK[kind])


def status(message: str) -> None:
    """`sandbox: MESSAGE` on stderr, its opening verdict word coloured on a terminal."""
    mark = marker(err=True)
    for word, kind in _STATUS:
        if message.startswith(word):
            message = mark(word, kind) + message[len(word):]
            break
    click.echo(f"sandbox: {message}", err=True)


def error(message: str) -> None:
    status(f"error: {message}")
