"""How policy values are written for people (in notes, tables and errors): sizes, durations,
users, commands, list entries, and text from a file or an agent made safe for a terminal."""

from __future__ import annotations

import enum
import shlex
import unicodedata


def _size(n: int) -> str:
    for unit, factor in (("g", 1024 ** 3), ("m", 1024 ** 2), ("k", 1024)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _duration(n: int) -> str:
    for unit, factor in (("h", 3600), ("m", 60)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}s"


def show(field: str, value) -> str:
    """A value as a person writes it in a policy file."""
    if field in ("limits.memory", "home.size"):
        return _size(value)
    if field in ("limits.timeout", "limits.session", "limits.idle"):
        return _duration(value)
    if field == "limits.cpus":
        return f"{value:g}"
    if field == "user":
        return "auto" if value is None else f"{value[0]}:{value[1]}"
    if field == "command":
        return shlex.join(value)
    if field == "build":   # as a policy file writes it
        parts = [f"dockerfile: {value.dockerfile}", f"context: {value.context}"] if value.dockerfile else \
            [f"devcontainer: {value.devcontainer}"] if value.devcontainer else []
        return "{" + ", ".join(parts) + "}" if parts else "(none)"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(show_entry(field, v) for v in value) or "(none)"
    return str(value)


def show_entry(field: str, entry) -> str:
    if field == "mounts":
        return f"{entry.source}:{entry.target}:{'rw' if entry.access.value == 'read-write' else 'ro'}"
    if field == "tmpfs":
        return f"{entry.target} ({_size(entry.size_bytes)}, {entry.mode:04o})"
    if field == "env.set":
        return f"{entry[0]}={entry[1]}"
    if field == "secrets":   # where the value comes from is shown, never the value
        ca = f", CA {entry.ca_file}" if entry.ca_file else ""
        where = f"placeholder in {entry.bind}" if entry.bind else entry.upstream
        return f"{entry.name} ({'$' + entry.env if entry.env else entry.file} -> {where}{ca})"
    return str(entry)


def visible(text: str, keep_lines: bool = True) -> str:
    """Control and bidirectional-override characters made visible, so a file cannot hide lines
    from the person reading it (terminal escapes, carriage returns, Trojan Source); without
    `keep_lines` line breaks and tabs too (a file name that would forge a line of a report)."""
    out = []
    for char in text:
        if keep_lines and char in "\n\t":
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs"):   # Cs: an undecodable byte of a name
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)
