"""docs/architecture.md against the tree: every module under launcher/ is listed (tests/test_docs.py
holds that too), nothing it names under launcher/ is gone, and each folder has one section whose
rule is its __init__.py's own "May import:" line, stated once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "launcher"
DOC = ROOT / "docs" / "architecture.md"


def rule(init: Path) -> str:
    """The last line of an __init__.py's docstring: "May import: a, b."."""
    return (ast.get_docstring(ast.parse(init.read_text())) or "").strip().split("\n\n")[-1].strip()


def sections() -> dict[str, str]:
    """Each `## ` section of the doc by its heading."""
    parts = re.split(r"^## (.+)$", DOC.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def folders() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def test_every_module_and_file_of_the_package_is_listed():
    text = DOC.read_text()
    files = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert len(files) > 150
    missing = [f for f in files if f"`{f}`" not in text]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)


def test_nothing_listed_is_gone():
    named = set(re.findall(r"`(launcher/[^`\s]*)`", DOC.read_text()))
    assert len(named) > 150
    gone = sorted(n for n in named if not (ROOT / n).exists())
    assert not gone, "docs/architecture.md names what is not in the tree: " + ", ".join(gone)


def test_each_folder_has_one_section_with_its_rule_stated_once():
    found = sections()
    text = DOC.read_text()
    for folder in folders():
        headed = [h for h in found if h.startswith(f"`launcher/{folder}/`")]
        assert len(headed) == 1, f"docs/architecture.md: {len(headed)} sections for launcher/{folder}/"
        line = rule(PACKAGE / folder / "__init__.py")
        assert line.startswith("May import: "), folder
        assert re.search(rf"^{re.escape(line)}$", found[headed[0]], flags=re.MULTILINE), \
            f"launcher/{folder}/'s section does not state its rule as its __init__.py does: {line}"
        modules = {p.relative_to(ROOT).as_posix() for p in (PACKAGE / folder).rglob("*.py")}
        listed = {m for row in re.findall(r"^\| ([^|]+) \|", found[headed[0]], flags=re.MULTILINE)
                  for m in re.findall(r"`(launcher/[^`]+)`", row)}
        assert modules <= listed, f"launcher/{folder}/'s section has no row for {sorted(modules - listed)}"
    rules = re.findall(r"^May import: .*$", text, flags=re.MULTILINE)
    assert len(rules) == len(folders()) + 1, "each folder's rule (and the top's) is stated once, under its heading"
    assert rule(PACKAGE / "__init__.py") in rules


def test_the_folders_are_in_the_order_their_rules_allow():
    """A folder's section comes after those of every folder it may import: the doc reads bottom up."""
    headings = [h for h in sections() if h.startswith("`launcher/")]
    place = {re.match(r"`launcher/([^/]+)/`", h)[1]: i for i, h in enumerate(headings)}
    for folder in folders():
        allowed = rule(PACKAGE / folder / "__init__.py").removeprefix("May import: ").rstrip(".")
        for other in ([] if allowed == "none" else allowed.split(", ")):
            assert place[other] < place[folder], f"{folder}'s section comes before {other}'s, which it builds on"
