"""Architecture rules: one module imports docker, one reads the environment, only the CLI prints."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "launcher"


def modules():
    for path in sorted(PACKAGE.glob("*.py")):
        yield path.stem, ast.parse(path.read_text())


def imported(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def attributes(tree) -> set[str]:
    return {f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def calls(tree) -> set[str]:
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_only_engine_imports_docker_and_only_lazily():
    users = {name for name, tree in modules() if "docker" in imported(tree)}
    assert users == {"engine"}
    top_level = {n.names[0].name for n in ast.parse((PACKAGE / "engine.py").read_text()).body if isinstance(n, ast.Import)}
    assert "docker" not in top_level


def test_only_host_reads_the_environment():
    readers = {name for name, tree in modules() if {"os.environ", "os.getenv"} & attributes(tree)}
    assert readers == {"host"}


def test_only_the_cli_prints_or_exits():
    for name, tree in modules():
        if name.startswith("cli") or name == "__main__":
            continue
        assert "print" not in calls(tree), name
        assert not {"sys.exit", "click.echo"} & attributes(tree), name
        assert "click" not in imported(tree), name


def test_modules_are_small_enough_to_read_in_one_sitting():
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name
