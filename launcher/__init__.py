"""sandbox: run AI coding agents in Docker containers whose isolation is declared and proven."""

from launcher.__version__ import __version__  # noqa: F401 (a leaf: modules below this facade import it from there)


def build_commit() -> str:
    """The commit this copy was built from (a wheel records it), or the checkout's own for an
    editable install, or "" when neither is known."""
    from importlib import resources

    recorded = resources.files(__name__).joinpath("_commit.txt")
    if recorded.is_file():
        return recorded.read_text().strip()
    import os

    from launcher import hostgit

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, ".git")):
        return ""
    return hostgit.read_only(os.path.join(root, ".git"), "rev-parse", "--short=12", "HEAD")


# The library API (docs/library.md): launcher.run / launcher.up / launcher.Request, loaded on first
# use so that the CLI's start does not pay for the pipeline before it needs it.
_SESSION = ("run", "up", "prepare", "Request", "RunResult", "UpResult")


def __getattr__(name: str):
    if name in _SESSION:
        from launcher import session

        return getattr(session, name)
    raise AttributeError(f"module 'launcher' has no attribute {name!r}")
