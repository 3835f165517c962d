"""Architecture rules: one module imports docker, one reads the environment, only the CLI prints;
no import circle and no module importing another's private name; each folder imports only what its
__init__.py allows; files small enough to read."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "launcher"


@functools.cache
def modules() -> tuple[tuple[str, ast.Module], ...]:
    """(dotted name below launcher, tree) for every module of the package and its subpackages;
    parsed once for all the rules here (they only read the trees)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found.append((".".join(p for p in parts if p != "__init__") or "__init__", ast.parse(path.read_text())))
    return tuple(found)


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


def ours(tree, at_top: bool) -> list[tuple[str, list[str]]]:
    """(launcher module, names taken from it) for each import of ours; only the module's top level
    (what runs at import time) with `at_top`."""
    nodes = tree.body if at_top else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "launcher":
            base = node.module.removeprefix("launcher").lstrip(".")
            for alias in node.names:
                sub = f"{base}.{alias.name}".lstrip(".")
                found.append((sub if sub in NAMES else base or "__init__", [alias.name]))
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix("launcher.") or "__init__", []) for a in node.names if a.name.startswith("launcher")]
    return found


NAMES = {name for name, _ in modules()}


def test_only_engine_imports_docker_and_only_lazily():
    users = {name for name, tree in modules() if "docker" in imported(tree)}
    assert users == {"engine.engine"}
    engine = ast.parse((PACKAGE / "engine" / "engine.py").read_text())
    top_level = {n.names[0].name for n in engine.body if isinstance(n, ast.Import)}
    assert "docker" not in top_level


def test_only_host_reads_the_environment():
    readers = {name for name, tree in modules() if {"os.environ", "os.getenv"} & attributes(tree)}
    # and the `sandbox` client (__main__), which imports no folder before it knows whether the
    # resident helper runs the command: it hands the environment over whole, deciding nothing by it
    # but where the helper's socket is and SANDBOX_HELPER=off (launcher/cli/helper.py)
    assert readers == {"host.host", "__main__"}


def test_only_the_cli_prints_or_exits():
    for name, tree in modules():
        if name == "cli" or name.startswith("cli.") or name == "__main__":
            continue
        assert "print" not in calls(tree), name
        assert not {"sys.exit", "click.echo"} & attributes(tree), name
        assert "click" not in imported(tree), name


def test_no_module_imports_a_private_name_of_another():
    for name, tree in modules():
        for module, taken in ours(tree, at_top=False):
            private = [t for t in taken if t.startswith("_") and not t.endswith("__") and f"{module}.{t}" not in NAMES]
            assert not private, f"{name} imports {private} from {module}"


def graph(at_top: bool) -> dict[str, set[str]]:
    return {name: {m for m, _ in ours(tree, at_top=at_top) if m in NAMES and m != name} for name, tree in modules()}


def reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` reaches through its imports."""
    seen, todo = set(), [start]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Each group of modules that reach one another through their imports (a circle), once."""
    reach = {name: reached(edges, name) for name in edges}
    return {frozenset(m for m in reach[name] if name in reach[m]) for name in edges if name in reach[name]}


def test_no_import_circle_at_import_time():
    assert circles(graph(at_top=True)) == set(), "import circle at import time"


def test_no_import_circle_through_imports_inside_functions_either():
    """A lazy import (kept for start-up time) is still a dependency: it may not close a circle."""
    found = circles(graph(at_top=False))
    assert not found, "import circle: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


# The layers are the folders: each folder's __init__.py says in one paragraph what it owns and, on
# its last line, which folders it may import ("May import: a, b" or "none"). Its modules import only
# from their own folder, those folders and the shared modules at the top (inside functions too); the
# shared modules import no folder, and the package's face (launcher/__init__.py's own line) only
# what it names. Nothing here lists a module: a new one is ruled by the folder it is put in.
RULE = re.compile(r"^May import: (none|[a-z_]+(?:, [a-z_]+)*)\.$")


def folders() -> tuple[str, ...]:
    return tuple(sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))


def may_import(init: Path) -> set[str]:
    """The folders an __init__.py's docstring allows: its last paragraph, "May import: a, b."."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    paragraphs = [p for p in doc.split("\n\n") if p.strip()]
    assert len(paragraphs) == 2, f"{init.relative_to(PACKAGE.parent)}: one paragraph, then the May import line"
    match = RULE.match(paragraphs[1].strip())
    assert match, f"{init.relative_to(PACKAGE.parent)}: the last line is not 'May import: a, b.' ({paragraphs[1]!r})"
    return set() if match[1] == "none" else set(match[1].split(", "))


def folder_of(module: str) -> str | None:
    """The folder a module is in (its first part), or None for a module at the top."""
    first = module.split(".")[0]
    return first if first in folders() else None


def face(name: str, tree) -> bool:
    """The package's face at the top: __init__, __main__, and a module that only re-exports."""
    only_imports = all(isinstance(n, (ast.Import, ast.ImportFrom)) or
                       (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in tree.body)
    return name in ("__init__", "__main__") or only_imports


def test_each_folder_imports_only_the_folders_its_init_names():
    edges = graph(at_top=False)
    rules = {folder: may_import(PACKAGE / folder / "__init__.py") for folder in folders()}
    assert {"policy", "host", "plan", "engine", "launch", "cli"} <= set(rules)
    for folder, allowed in rules.items():
        assert allowed <= set(rules), f"{folder} may import {sorted(allowed - set(rules))}: no such folder"
        used = {folder_of(m) for name in NAMES if folder_of(name) == folder for m in edges[name]} - {None, folder}
        for name in sorted(n for n in NAMES if folder_of(n) == folder):
            beyond = sorted(m for m in edges[name] if folder_of(m) not in allowed | {None, folder})
            assert not beyond, f"{name} imports {beyond}: {folder}/__init__.py does not allow it"
        assert used == allowed, f"{folder}/__init__.py allows {sorted(allowed - used)}, which it no longer imports"
    assert circles({folder: allowed for folder, allowed in rules.items()}) == set(), "the folders' rules make a circle"


def test_the_shared_modules_at_the_top_import_no_folder():
    edges = graph(at_top=False)
    allowed = may_import(PACKAGE / "__init__.py")
    top = {name: tree for name, tree in modules() if folder_of(name) is None}
    assert {"errors", "values", "labels"} <= set(top)
    for name, tree in top.items():
        into = sorted(m for m in edges[name] if folder_of(m) is not None)
        if face(name, tree):
            assert {folder_of(m) for m in into} <= allowed, \
                f"{name} imports {into}: launcher/__init__.py does not allow it"
        else:
            assert not into, f"{name} is shared by every stage and imports {into} from a folder"
    faces = {folder_of(m) for name, tree in top.items() if face(name, tree) for m in edges[name]} - {None}
    assert faces == allowed, f"launcher/__init__.py allows {sorted(allowed - faces)}, which no face imports"


def test_the_rules_are_read():
    """may_import refuses what is not the rule's form."""
    assert RULE.match("May import: host, plan.") and RULE.match("May import: none.")
    assert not RULE.match("May import: host and plan") and not RULE.match("may import: host.")


# Below the egress package: every folder whose rule does not reach it (the policy, host facts, the
# plan, the engine, copies, the pipeline, ...), and what checks a policy without launching
# (`sandbox check`: check/lint.py and check/lintstack.py, in a folder above egress only for the
# targets' registry). None of them may reach launcher.egress, directly or through another module,
# at import time or inside a function.
def below_egress() -> tuple[str, ...]:
    rules = {folder: may_import(PACKAGE / folder / "__init__.py") for folder in folders()}
    under = {folder for folder in rules if folder != "egress" and "egress" not in reached(rules, folder)}
    return tuple(sorted({name for name in NAMES if folder_of(name) in under} | {"check.lint", "check.lintstack"}))


BELOW_EGRESS = below_egress()


def test_nothing_below_the_plan_and_the_engine_imports_egress():
    edges = graph(at_top=False)
    assert set(BELOW_EGRESS) <= NAMES, f"no such module: {set(BELOW_EGRESS) - NAMES}"
    assert {"pipeline.pipeline", "pipeline.stack", "host.workspaces", "host.approvals", "policy.trust",
            "plan.compiler", "engine.engine", "copies.store"} <= set(BELOW_EGRESS)
    for name in BELOW_EGRESS:
        into = sorted(m for m in reached(edges, name) | {name} if m == "egress" or m.startswith("egress."))
        assert not into, f"{name} reaches {into}: egress builds on the plan and the engine, never below them"


def test_the_cli_imports_no_renderer_at_start():
    """`import launcher.cli` (every command's start) loads the targets' registry, not what they write with."""
    code = "import sys, launcher.cli; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=PACKAGE.parent).stdout.split())
    assert "launcher.targets" in loaded
    heavy = {m for m in loaded if m.startswith(("launcher.targets.", "launcher.check.explain", "launcher.plan.enforcement", "jinja2",
                                                "yaml", "docker", "cryptography"))}
    assert not heavy, heavy


def test_modules_are_small_enough_to_read_in_one_sitting():
    for path in PACKAGE.rglob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name
