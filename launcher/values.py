"""How policy values are written for people (in notes, tables and errors): sizes, durations,
users, commands, list entries."""

from __future__ import annotations

import enum
import shlex

from launcher.model import Access


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
    if field == "limits.memory":
        return _size(value)
    if field == "limits.timeout":
        return _duration(value)
    if field == "limits.cpus":
        return f"{value:g}"
    if field == "user":
        return "auto" if value is None else f"{value[0]}:{value[1]}"
    if field == "command":
        return shlex.join(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(show_entry(field, v) for v in value) or "(none)"
    return str(value)


def show_entry(field: str, entry) -> str:
    if field == "mounts":
        return f"{entry.source}:{entry.target}:{'rw' if entry.access is Access.READ_WRITE else 'ro'}"
    if field == "tmpfs":
        return f"{entry.target} ({_size(entry.size_bytes)})"
    if field == "env.set":
        return f"{entry[0]}={entry[1]}"
    if field == "secrets":   # where the value comes from is shown, never the value
        ca = f", CA {entry.ca_file}" if entry.ca_file else ""
        return f"{entry.name} ({'$' + entry.env if entry.env else entry.file} -> {entry.upstream}{ca})"
    return str(entry)
