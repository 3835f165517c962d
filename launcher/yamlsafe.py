"""YAML through a safe loader that rejects duplicate keys, aliases and oversized input."""

from __future__ import annotations

import yaml

from launcher.errors import PolicyError, Problem

MAX_BYTES = 256 * 1024


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and anchors/aliases (no alias bombs)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(None, None, "aliases (*name) are not allowed in policy files",
                                       event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.MarkedYAMLError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml(data: bytes, file: str):
    """Parse one YAML document; every failure is a PolicyError naming the file and line."""
    if len(data) > MAX_BYTES:
        raise PolicyError([Problem(file=file, path="", expected=f"at most {MAX_BYTES} bytes",
                                   found=f"{len(data)} bytes", hint="a policy is a short file")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError([Problem(file=file, path="", expected="UTF-8 text",
                                   found=f"invalid byte at offset {exc.start}")]) from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise PolicyError([Problem(file=file, path=where, expected="valid YAML",
                                   found=str(exc.problem))]) from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise PolicyError([Problem(file=file, path="", expected="valid YAML",
                                   found=type(exc).__name__)]) from None
