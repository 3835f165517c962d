"""YAML through a safe loader that rejects duplicate keys, aliases and oversized input."""

from __future__ import annotations

import yaml

from launcher.errors import PolicyError, Problem
from launcher.policy.secrets import literals_in

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32          # a policy needs four or five levels


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and anchors/aliases (no alias bombs)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(None, None, "aliases (*name) are not allowed in policy files",
                                       event.start_mark)
        # Refuse deep nesting early: the composer recurses, and thousands of levels took seconds.
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(None, None, f"nesting deeper than {MAX_DEPTH} levels",
                                           self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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
    if _flow_depth(text) > MAX_DEPTH:
        raise PolicyError([Problem(file=file, path="", expected="valid YAML",
                                   found=f"brackets nested deeper than {MAX_DEPTH} levels")])
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        raise PolicyError([_yaml_problem(file, text, exc)]) from None
    except (yaml.YAMLError, RecursionError) as exc:
        detail = str(exc).splitlines()[0] if isinstance(exc, yaml.YAMLError) and str(exc) else ""
        raise PolicyError([Problem(file=file, path="", expected="valid YAML",
                                   found=f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)]) from None


# What the usual YAML mistakes look like to PyYAML, and their fix.
_FIXES = (("'\\t'", "YAML indents with spaces only: replace the tab"),
          ("mapping values are not allowed", "a value holding ': ' needs quotes, or the line is indented too far"),
          ("found character '@'", "a value starting with @ or ` needs quotes"),
          ("found character '`'", "a value starting with @ or ` needs quotes"),
          ("expected <block end>", "the keys of one mapping must line up: check this line's indentation"),
          ("could not find expected ':'", "each key needs ': ' after it; a value with a line break needs quotes"),
          ("duplicate key", "each key once per mapping"))


def _yaml_problem(file: str, text: str, exc: yaml.MarkedYAMLError) -> Problem:
    """The parser's complaint in words, the line with a caret under the place, the usual fix."""
    mark = exc.problem_mark
    problem = str(exc.problem or exc).removeprefix("found ")
    if mark is None:
        return Problem(file=file, path="", expected="valid YAML", found=problem)
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    shown = line.replace("\t", " ")[:120]
    hint = next((fix for needle, fix in _FIXES if needle in problem or needle in str(exc)),
                "check the indentation (spaces, keys lined up) and quote values with : # @ ` { } [ ] in them")
    return Problem(file=file, path=f"line {mark.line + 1}, column {mark.column + 1}", expected="valid YAML",
                   found=f"{problem}:\n      {shown}\n      {' ' * min(mark.column, 120)}^", hint=hint)


NO_SECRET = "no secret in a policy file"


def refuse_secret_literals(data: bytes, file: str) -> None:
    """Never a secret in a policy, not even in a comment (it is committed, copied and shown): every
    loader calls this once the document is otherwise valid, so a field's own check speaks first."""
    literals = literals_in(data.decode("utf-8", errors="replace"))
    if literals:
        raise PolicyError([Problem(file=file, path=f"line {number}", expected=NO_SECRET,
                                   found=f"a secret-shaped literal ({shape}…; the value is not shown)",
                                   hint="remove it and rotate it; give the sandbox a secrets: entry by reference")
                           for number, shape in literals])


def _flow_depth(text: str) -> int:
    """Deepest [ / { nesting outside quotes and comments. PyYAML's scanner looks ahead across a
    whole flow collection, quadratic in its depth, before the composer's own limit can act."""
    depth = deepest = 0
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote or (char == "\n" and quote == "#") else quote
        elif char in "\"'" or (char == "#" and (i == 0 or text[i - 1] in " \t\n")):
            quote = "\n" if char == "#" else char
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest
