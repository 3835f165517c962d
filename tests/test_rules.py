"""Architecture rules: one module imports docker, one reads the environment, only the CLI prints;
no import circle and no module importing another's private name; files small enough to read."""

from __future__ import annotations

import ast
import functools
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
    assert users == {"engine"}
    top_level = {n.names[0].name for n in ast.parse((PACKAGE / "engine.py").read_text()).body if isinstance(n, ast.Import)}
    assert "docker" not in top_level


def test_only_host_reads_the_environment():
    readers = {name for name, tree in modules() if {"os.environ", "os.getenv"} & attributes(tree)}
    assert readers == {"host"}


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


# The layers under the egress proxy, lowest first: each module imports only from its own layer and
# the ones below (inside functions too). Egress (the proxy at launch and its audit) builds on the
# plan and the engine; the compiler, which renders the proxy's configuration, sits below it.
LAYERS = (
    ("basics", {"errors", "names", "values", "paths", "labels", "secrets", "resources", "timings", "yamlsafe"}),
    ("policy", {"httprules", "allowlist", "inject", "surfaces", "model", "schema", "policy", "layers", "settings"}),
    ("host facts", {"hostpaths", "hostfiles", "host", "cafiles", "imagebuild", "statefiles", "hostgit", "gitdirs",
                    "gitgraph", "gitscan", "scan", "engineid", "hostfacts", "extensions"}),
    ("plan", {"plan", "probehttp", "squidconf", "checks", "runtimes", "trustfiles", "refusals", "lifetime", "compiler"}),
    ("engine", {"engineproto", "engineapi", "enginebodies", "engine", "enginefake", "hostengines", "subnets", "images",
                "imageext"}),
    ("egress", {"egress", "egress.audit", "egress.bump", "egress.proxy"}),
    ("copies", {"copies", "copies.store", "copies.fill", "copies.review", "copies.export", "copies.finaltree",
                "copies.apply", "copies.branch", "copies.limits", "copies.fork"}),
    ("session", {"upoptions"}),   # what `up` was started with: above every layer, beside launcher/session.py
)


def test_each_layer_imports_only_from_itself_and_below():
    edges = graph(at_top=False)
    listed = [m for _, layer in LAYERS for m in layer]
    assert len(listed) == len(set(listed)) and set(listed) <= NAMES, set(listed) - NAMES
    for index, (layer_name, layer) in enumerate(LAYERS):
        above = set().union(*(modules for _, modules in LAYERS[index + 1:]))
        for module in sorted(layer):
            assert not edges[module] & above, f"{module} ({layer_name}) imports {sorted(edges[module] & above)} from above"


# Below the egress package: every layer under it, and what ends in a plan or checks one without
# launching (the pipeline, the stack of layers, `sandbox check`, the workspaces' state). None of them
# may reach launcher.egress, directly or through another module, at import time or inside a function.
BELOW_EGRESS = tuple(sorted(set().union(*(layer for name, layer in LAYERS if name not in ("egress", "session")))
                            | {"pipeline", "stack", "lint", "lintstack", "workspaces", "approvals", "trust"}))


def test_nothing_below_the_plan_and_the_engine_imports_egress():
    edges = graph(at_top=False)
    assert set(BELOW_EGRESS) <= NAMES, f"no such module: {set(BELOW_EGRESS) - NAMES}"
    for name in BELOW_EGRESS:
        into = sorted(m for m in reached(edges, name) | {name} if m == "egress" or m.startswith("egress."))
        assert not into, f"{name} reaches {into}: egress builds on the plan and the engine, never below them"


def test_the_cli_imports_no_renderer_at_start():
    """`import launcher.cli` (every command's start) loads the targets' registry, not what they write with."""
    code = "import sys, launcher.cli; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=PACKAGE.parent).stdout.split())
    assert "launcher.targets" in loaded
    heavy = {m for m in loaded if m.startswith(("launcher.targets.", "launcher.explain", "launcher.enforcement", "jinja2",
                                                "yaml", "docker", "cryptography"))}
    assert not heavy, heavy


def test_modules_are_small_enough_to_read_in_one_sitting():
    for path in PACKAGE.rglob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name
