"""Reads the few git config keys that point at code git runs: core.hooksPath and include paths.

A small parser of git's INI dialect (sections, quoted values, comments); it never runs git.
"""

from __future__ import annotations

import re

_SECTION = re.compile(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"(?:[^"\\]|\\.)*")?\s*\]')


def _value(text: str) -> str:
    """Unquote a value and drop a trailing comment, as git does."""
    out, quoted, i = [], False, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        if char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            break
        else:
            out.append(char)
        i += 1
    return "".join(out).strip()


def entries(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every variable, section and key lower-cased (git ignores case)."""
    found, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            match = _SECTION.match(line)
            # `[core.sub]` is the old spelling of a subsection: the section is the part before the dot
            section = match.group(1).split(".")[0].lower() if match else ""
            line = line[match.end():].strip() if match else ""
        if not line or line[0] in "#;" or not section:
            continue
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        if re.fullmatch(r"[a-z][a-z0-9-]*", key):
            found.append((section, key, _value(value) if sep else "true"))
    return found


def control_paths(text: str) -> list[tuple[str, str]]:
    """(key, value) of core.hooksPath and include/includeIf paths, in file order."""
    out = []
    for section, key, value in entries(text):
        if (section, key) == ("core", "hookspath"):
            out.append(("core.hooksPath", value))
        elif section in ("include", "includeif") and key == "path":
            out.append((f"{section}.path", value))
    return out
