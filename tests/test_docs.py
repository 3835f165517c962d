"""The documents hold together: every relative link in README.md and docs/*.md (and the other pages
of the repository: examples/, images/, launcher/) resolves (the file exists; an #anchor names a
heading of that file, by GitHub's slug rules), and docs/architecture.md
names every module under launcher/, so the map cannot go stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted(p for d in ("examples", "images", "launcher") for p in (ROOT / d).rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[(?:[^\]`]|`[^`]*`)*\]\(([^()\s]+)\)")   # [text](target); `]` inside code spans too


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (a link there is not a link)."""
    kept, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            kept.append(line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, every character but
    letters, digits, `_`, `-` and spaces removed, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated one gets -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()).splitlines():
        match = re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]   # no http:, mailto:


def test_the_pages_were_read():
    assert (ROOT / "docs" / "library.md") in PAGES and len(PAGES) >= 14
    assert sum(len(links(p)) for p in PAGES) > 40


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_module_is_on_the_architecture_map():
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "launcher").rglob("*.py"))
    assert len(modules) > 100
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)


def test_every_launcher_name_the_pages_give_resolves():
    """`launcher.pipeline.LayerOptions`, `launcher.engine.Engine`, ... in a page's code spans: each
    imports (a module) and has the attribute named, so a move of code cannot leave a page wrong."""
    import importlib

    named = sorted({n for page in PAGES for n in re.findall(r"`(launcher(?:\.\w+)+)", page.read_text())})
    assert "launcher.pipeline.LayerOptions" in named and len(named) > 10
    unresolved = []
    for name in named:
        parts = name.split(".")
        for split in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:split]))
                break
            except ImportError:
                continue
        for attribute in parts[split:]:
            found = getattr(found, attribute, None)
        if found is None:
            unresolved.append(name)
    assert not unresolved, f"the pages name what does not resolve: {unresolved}"


def test_the_checks_catch_what_they_should(tmp_path):
    assert slug("gVisor (`runtime: gvisor`)") == "gvisor-runtime-gvisor"
    assert slug("Copy mode: review before anything reaches your tree") == \
        "copy-mode-review-before-anything-reaches-your-tree"
    assert slug("Attestation record (`--attest FILE`, `sandbox verify-attestation FILE`)") == \
        "attestation-record---attest-file-sandbox-verify-attestation-file"
    assert slug("The agent's home") == "the-agents-home"
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n## Same\n\nsee [a `b]c`](x.md#y), ![img](pic.png), `[c](code.md)`,\n"
                    "[web](https://example.com) and [here](#same-1).\n\n```\n[in](fence.md)\n# not a heading\n```\n")
    assert links(page) == ["x.md#y", "#same-1"]
    assert anchors(page) == {"title", "same", "same-1"}


def test_the_license_file_is_the_license_pyproject_names():
    pyproject = (ROOT / "pyproject.toml").read_text()   # no tomllib before Python 3.11
    assert 'license = {text = "MIT"}' in pyproject and '"License :: OSI Approved :: MIT License"' in pyproject
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 ") and "Permission is hereby granted, free of charge" in text


def test_the_readmes_preset_table_names_every_bundled_preset():
    from launcher import resources

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| preset | for |"):]
    table = table[:table.index("\n\n")]
    named = {re.match(r"^\| `([^`]+)`", row).group(1) for row in table.splitlines()[2:]}
    assert named == {p.stem for p in Path(resources.policies_dir()).glob("*.yaml")}


def test_the_readme_links_every_docs_page():
    text = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name}" not in text]
    assert not unlinked, f"README.md does not link: {unlinked}"
