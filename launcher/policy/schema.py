"""Checks raw YAML data against the bundled JSON Schema (the subset it uses) and fills defaults.

The schema file is the single source of the format's shape: this walker reads it, so the
shipped schema and what the loader accepts cannot drift apart.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from launcher import resources
from launcher.errors import Problem

_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool}
_MAX_DEPTH = 8


@lru_cache(maxsize=1)
def policy_schema() -> dict:
    return json.loads(resources.package_file("policy-v1.schema.json").read_text())


def _kind(value) -> str:
    if value is None:
        return "null (an empty value, or a bare ~)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    names = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number"}
    label = names.get(type(value), type(value).__name__)
    return f"{label} ({value!r})" if isinstance(value, (str, int, float)) else label


def _example(schema: dict, bare: bool = False) -> str:
    """A valid value (every pattern in the schema has one: tests/test_schema.py)."""
    example = schema.get("x-example", "")
    return example if bare or not example else f"for example {example}"


def _join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def check(value, schema: dict, file: str, path: str = "", depth: int = 0) -> tuple[object, list[Problem]]:
    """Return (value with defaults filled in, problems). Never raises on bad data."""
    problems: list[Problem] = []

    def bad(expected: str, found: str, hint: str = "", at: str = path) -> None:
        problems.append(Problem(file=file, path=at or "(top level)", expected=expected, found=found, hint=hint))

    if depth > _MAX_DEPTH:
        bad("a shallower structure", "nesting too deep")
        return value, problems
    if "enum" in schema:
        if value not in schema["enum"] or isinstance(value, bool):
            bad("one of " + ", ".join(map(repr, schema["enum"])), _kind(value))
        return value, problems
    wanted = schema.get("type")
    if wanted:
        ok = isinstance(value, _TYPES[wanted]) and (wanted == "boolean" or not isinstance(value, bool))
        if not ok:
            article = {"object": "a mapping", "array": "a list", "integer": "an integer", "boolean": "true or false"}
            bad(article.get(wanted, f"a {wanted}"), _kind(value),
                "YAML reads an empty value or ~ as null: write the value, quoted if it is '~'" if value is None
                else _example(schema))
            return value, problems
    if wanted == "string":
        if len(value) < schema.get("minLength", 0):
            bad("a non-empty string", "an empty string")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            bad(schema["x-expected"], _kind(value), _example(schema))
    elif wanted in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            bad(f"at least {schema['minimum']}", _kind(value))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            bad(f"more than {schema['exclusiveMinimum']}", _kind(value))
        if "maximum" in schema and value > schema["maximum"]:
            bad(f"at most {schema['maximum']}", _kind(value))
    elif wanted == "array":
        if len(value) < schema.get("minItems", 0):
            bad(f"at least {schema['minItems']} item(s)", "an empty list")
        items = []
        for index, item in enumerate(value):
            filled, sub = check(item, schema.get("items", {}), file, _join(path, index), depth + 1)
            items.append(filled)
            problems += sub
        value = items
    elif wanted == "object":
        value, sub = _check_object(value, schema, file, path, depth)
        problems += sub
    return value, problems


def _check_object(value: dict, schema: dict, file: str, path: str, depth: int):
    problems: list[Problem] = []
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    out = {}
    for key, item in value.items():
        at = _join(path, key)
        if not isinstance(key, str):
            problems.append(Problem(file=file, path=at, expected="a string key", found=_kind(key)))
            continue
        if names and not re.search(names["pattern"], key):
            problems.append(Problem(file=file, path=at, expected=names["x-expected"], found=repr(key),
                                    hint=_example(names)))
        if key in props:
            out[key], sub = check(item, props[key], file, at, depth + 1)
        elif isinstance(extra, dict):
            out[key], sub = check(item, extra, file, at, depth + 1)
        elif extra is False:
            import difflib  # here: only a bad value's "did you mean" needs it
            close = difflib.get_close_matches(key, list(props), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(props)
            problems.append(Problem(file=file, path=at, expected="a known key", found=f"unknown key {key!r}",
                                    hint=hint))
            continue
        else:
            out[key], sub = item, []
        problems += sub
    for key in schema.get("required", []):
        if key not in value:
            problems.append(Problem(file=file, path=_join(path, key), expected="this key", found="nothing",
                                    hint=f"add it, e.g. {key}: {_example(props.get(key, {}), bare=True) or '…'}"))
    for key, sub_schema in props.items():
        if key not in out and "default" in sub_schema:
            out[key], sub = check(copy.deepcopy(sub_schema["default"]), sub_schema, file, _join(path, key), depth + 1)
            problems += sub
    return out, problems
