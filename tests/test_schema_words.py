"""Schema rules in words (issue 26): every pattern the policy schema checks has a sentence and a
valid example, the example passes it, and no message shows a regular expression."""

from __future__ import annotations

import re

from launcher.policy.schema import check, policy_schema


def patterned(node, path=""):
    if isinstance(node, dict):
        if "pattern" in node:
            yield path, node
        for key, child in node.items():
            yield from patterned(child, f"{path}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from patterned(child, f"{path}[{i}]")


def test_every_pattern_has_a_sentence_and_an_example_it_accepts():
    found = list(patterned(policy_schema()))
    assert len(found) > 15
    for path, node in found:
        assert node.get("x-expected") and node.get("x-example"), path
        assert re.search(node["pattern"], node["x-example"].strip("'\"")), path


def test_no_message_shows_a_regular_expression_or_repeats_a_description():
    doc = {"version": 1, "description": "d", "extends": ["./other.yaml"], "image": "ubuntu latest",
           "limits": {"memory": "2GB", "timeout": "30 minutes"}, "capabilities": ["net_admin"], "env": {"set": {"1A": "b"}}}
    _, problems = check(doc, policy_schema(), "p.yaml")
    said = {p.path: str(p) for p in problems}
    assert set(said) >= {"name", "extends[0]", "image", "limits.memory", "limits.timeout", "capabilities[0]", "env.set.1A"}
    for text in said.values():
        assert "^" not in text and "$" not in text and "matching" not in text, text
    assert "preset" in said["extends[0]"] and "for example 2g" in said["limits.memory"]
    assert "add it, e.g. name: my-policy" in said["name"]
