"""sandbox: run AI coding agents in Docker containers whose isolation is declared and proven. One
folder per stage, each saying in its `__init__.py` what it owns and which folders it may import
(tests/test_rules.py reads that line); the modules here at the top (errors, values, labels, names,
resources, timings, style, tables, signing, __version__) are shared by every stage and import none
of the folders. This file (the library's `run`, `up`, `prepare`, `Request`, every command as one
call, loaded by name when first used) and `__main__.py` are the package's face.

May import: cli, host."""

from launcher.__version__ import __version__  # noqa: F401 (a leaf: modules below this facade import it from there)


def build_commit() -> str:
    """The commit this copy was built from (a wheel records it), or the checkout's own for an
    editable install, or "" when neither is known."""
    from importlib import resources

    recorded = resources.files(__name__).joinpath("_commit.txt")
    if recorded.is_file():
        return recorded.read_text().strip()
    import os

    from launcher.host import hostgit

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, ".git")):
        return ""
    return hostgit.read_only(os.path.join(root, ".git"), "rev-parse", "--short=12", "HEAD")


# The library API (docs/library.md): one call per command, loaded on first use so that the CLI's
# start does not pay for the pipeline before it needs it. name -> (module, its name there).
CALLS = {
    **{n: ("launcher.launch.session", n) for n in ("run", "up", "prepare", "Request", "RunResult", "UpResult")},
    "down": ("launcher.usecases.remove", "down"), "gc": ("launcher.usecases.remove", "gc"),
    "diff": ("launcher.usecases.copywork", "diff"), "apply": ("launcher.usecases.copywork", "apply"),
    "discard": ("launcher.usecases.copywork", "discard"),
    "checkpoint": ("launcher.copies.store", "checkpoint"), "checkpoints": ("launcher.copies.store", "checkpoints"),
    "rewind": ("launcher.copies.store", "rewind"), "fork": ("launcher.copies.fork", "fork"),
    "exec_in": ("launcher.launch.sandboxes", "exec_in"), "ls": ("launcher.launch.sandboxes", "ls"),
    "egress_log": ("launcher.launch.sandboxes", "egress_log"),
    "change_egress": ("launcher.launch.egresschange", "change"),   # launcher.egress is the package "selftest": ("launcher.selftest.runner", "run"),
    "connect": ("launcher.engine.engine", "connect"),
}


def __getattr__(name: str):
    if name in CALLS:
        from importlib import import_module

        module, attribute = CALLS[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'launcher' has no attribute {name!r}")
