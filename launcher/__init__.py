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
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, ".git")):
        return ""
    try:
        found = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return found.stdout.strip() if found.returncode == 0 else ""
