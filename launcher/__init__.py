"""sandbox: run AI coding agents in Docker containers whose isolation is declared and proven."""

__version__ = "0.1.0"


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
