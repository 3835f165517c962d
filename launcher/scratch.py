"""Host reads for `sandbox selftest`: a checkout-like scratch workspace, what is below it, and the host's own addresses."""

from __future__ import annotations

import os
import shutil
import tempfile


def scratch_workspace(prefix: str) -> str:
    """A fresh checkout-like directory (.git/hooks, .git/config, README.md), owned by uid 1000 when
    we are root, as a developer's checkout would be. Remove it with remove_tree."""
    ws = os.path.join(tempfile.mkdtemp(prefix=prefix), "repo")
    os.chmod(os.path.dirname(ws), 0o755)
    os.makedirs(os.path.join(ws, ".git", "hooks"))
    for name, text in ((".git/config", "[core]\n\tbare = false\n"), ("README.md", "selftest scratch workspace\n")):
        with open(os.path.join(ws, name), "w") as out:
            out.write(text)
    for path in (ws, *(os.path.join(ws, p) for p in (".git", ".git/hooks", ".git/config", "README.md"))):
        if os.geteuid() == 0:
            os.lchown(path, 1000, 1000)
    return ws


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def tree_listing(path: str) -> tuple[str, ...]:
    """Every entry below `path` (symlinks not followed), to tell whether anything changed there."""
    return tuple(sorted(os.path.relpath(os.path.join(b, n), path) for b, d, f in os.walk(path) for n in d + f))


def ipv4_addresses() -> tuple[str, ...]:
    """The host's own IPv4 addresses but loopback (the LOCAL entries of the kernel's routing trie)."""
    found, last = set(), ""
    with open("/proc/net/fib_trie") as trie:
        for words in map(str.split, trie):
            last = words[1] if words[:1] == ["|--"] else last
            if "LOCAL" in words and not last.startswith("127."):
                found.add(last)
    return tuple(sorted(found))
