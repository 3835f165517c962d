"""The host tree as `apply` would leave it: the host's entries with the changes it writes on top.
A symlink is judged by where it resolves on that tree (every other link included, the host's and
the new ones, chains of any depth, `..` taken after each link as the kernel does), never by its
text; a new name is compared with the host's names of its directory on folded names."""

from __future__ import annotations

import bisect
from typing import Protocol

from launcher import names
from launcher.copies.review import DEPTH, landing_refusal
from launcher.errors import CopyConflict

FOLLOWS = 40   # Linux's limit: resolving a longer chain fails (ELOOP), so a longer one is no use
STEPS = 8192   # with DEPTH, a bound on the work one link costs (PATH_MAX is 4096 bytes per target)


class Host(Protocol):
    def state(self, rel: str) -> dict | None: ...    # like copytool's describe, without following links
    def names(self, rel: str) -> list[str] | None: ...   # entries of the directory rel, None if there is none
    def links(self) -> list[str]: ...    # every symlink in the tree (walked without following any)


class _Final:
    def __init__(self, changes: list[dict], host: Host | None):
        self.new = {c["path"]: c["new"] for c in changes}
        self.kept = sorted(path for path, new in self.new.items() if new is not None)   # bisected, never prefixes
        self.host = host

    def host_state(self, rel: str) -> dict | None:
        try:
            return self.host.state(rel) if self.host else None
        except CopyConflict:   # a link or a file on the way on the host: nothing below it there
            return None

    def state(self, rel: str) -> dict | None:
        """What the final tree has at rel, whose parent directory is a directory there."""
        at = bisect.bisect_left(self.kept, rel + "/")
        if at < len(self.kept) and self.kept[at].startswith(rel + "/"):
            return {"type": "dir"}   # a change below it: a directory, made if need be
        return self.new[rel] if rel in self.new else self.host_state(rel)

    def resolve(self, path: str, target: str) -> tuple[str | None, list[str], str]:
        """(where the link at path lands, workspace-relative), the links followed, and "" or why
        it lands nowhere: "outside", "loop" (more than FOLLOWS links, or too many steps or levels)."""
        at, todo, followed, steps = path.split("/")[:-1], target.split("/"), [], 0
        gone = [False] * len(at)   # gone[i]: no directory at at[:i+1] on the final tree, so nothing below
        while todo:
            part, steps = todo.pop(0), steps + 1
            if steps > STEPS or len(at) > DEPTH:
                return None, followed, "loop"
            if part in ("", "."):
                continue
            if part == "..":
                if not at:
                    return None, followed, "outside"
                at.pop()
                gone.pop()
                continue
            here = "/".join(at + [part])
            found = None if gone and gone[-1] else self.state(here)
            if found and found["type"] == "symlink":
                followed.append(here)
                if len(followed) > FOLLOWS:
                    return None, followed, "loop"
                if found["target"].startswith("/"):
                    return None, followed, "outside"
                todo = found["target"].split("/") + todo   # relative to the link's own directory: `at`
                continue
            at.append(part)
            gone.append(not found or found["type"] != "dir")
        return "/".join(at), followed, ""


def _chain(followed: list[str]) -> str:
    shown = followed[:4] + (["…"] if len(followed) > 5 else []) + followed[4:][-1:]
    return " -> ".join(shown)


def _problem(result: tuple[str | None, list[str], str], protected: tuple[str, ...]) -> str:
    """What is wrong with where a link leads (see _Final.resolve), or ""."""
    lands, followed, nowhere = result
    through = f" (through {_chain(followed)})" if followed else ""
    if nowhere == "loop":
        return f"is in a loop, or a chain of more than {FOLLOWS} links or {DEPTH} levels{through}"
    if nowhere:
        return f"resolves outside the workspace on the final tree{through}"
    refused = landing_refusal(lands, protected)
    return f"resolves to {lands or '.'} on the final tree{through}: {refused}" if refused else ""


def check(changes: list[dict], host: Host | None, protected: tuple[str, ...]) -> dict[str, str]:
    """Why each of these changes (the ones going onto the host) may not, by path: a symlink that
    resolves outside, into a refused path or through a refused link, or that sends a link the host
    has there; a symlink where the host has a directory; a new name that folds onto another one the
    host keeps in that directory."""
    final, why, resolved = _Final(changes, host), {}, {}
    for change in changes:
        new, path = change["new"] or {}, change["path"]
        if new.get("type") != "symlink":
            continue
        if (final.host_state(path) or {}).get("type") == "dir":
            why[path] = f"a symlink where the host has the directory {path} (a directory is never replaced by a link)"
            continue
        result = final.resolve(path, new["target"])
        resolved[path] = result[1]
        if _problem(result, protected):
            why[path] = f"a symlink (-> {new['target']}) that {_problem(result, protected)}"
    if resolved and host is not None:   # a new link can also change where one the host has leads
        before = _Final([], host)
        for link in host.links():
            state = final.host_state(link)
            if link in final.new or (state or {}).get("type") != "symlink":
                continue
            after = final.resolve(link, state["target"])
            culprits = [f for f in after[1] if f in resolved]
            if culprits and _problem(after, protected) and not _problem(before.resolve(link, state["target"]), protected):
                for culprit in culprits:
                    why.setdefault(culprit, f"a symlink that would make the host's symlink {link} "
                                            f"(-> {state['target']}) go wrong: it {_problem(after, protected)}")
    # A link resolved through a refused one is refused too: that one will not be there to go through.
    users: dict[str, list[str]] = {}
    for path, followed in resolved.items():
        for link in set(followed) & final.new.keys() - {path}:   # the new links it goes through
            users.setdefault(link, []).append(path)
    todo = [p for p in why if p in users]
    while todo:
        bad = todo.pop()
        for path in users.get(bad, ()):
            if path not in why:
                why[path] = f"a symlink that resolves through {bad}, which apply refuses"
                todo.append(path)
    for path, reason in _host_collisions(changes, host).items():
        why.setdefault(path, reason)
    return why


def _host_collisions(changes: list[dict], host: Host | None) -> dict[str, str]:
    if host is None:
        return {}
    gone = {c["path"] for c in changes if c["new"] is None}
    listed: dict[str, tuple[set[str], dict[str, list[str]]] | None] = {}

    def entries(parent: str) -> tuple[set[str], dict[str, list[str]]] | None:
        if parent not in listed:
            try:
                found = host.names(parent)
            except CopyConflict:
                found = None
            by_fold: dict[str, list[str]] = {}
            for entry in found or ():
                by_fold.setdefault(names.fold_name(entry), []).append(entry)
            listed[parent] = None if found is None else (set(found), by_fold)
        return listed[parent]

    clashes = {}
    for change in changes:
        parts = change["path"].split("/") if change["new"] is not None else []
        for i, name in enumerate(parts):
            parent = "/".join(parts[:i])
            there = entries(parent)
            if there is None:
                break   # not on the host: nothing below it to clash with
            kept = [e for e in there[1].get(names.fold_name(name), ())
                    if e != name and (f"{parent}/{e}" if parent else e) not in gone]
            if kept:
                clashes[change["path"]] = (f"{'/'.join(parts[:i + 1])} and the host's "
                                           f"{(parent + '/' if parent else '') + kept[0]} are one name on a "
                                           "case-insensitive or normalising filesystem")
                break
            if name not in there[0]:
                break
    return clashes


def _is_git_dir(entries: set[str]) -> bool:
    """git's is_git_directory on folded names: HEAD with objects/ and refs/, or with a commondir
    (a worktree's or submodule's git directory). Any type counts: stricter only refuses more."""
    return "head" in entries and ({"objects", "refs"} <= entries or "commondir" in entries)


def in_git_directories(changes: list[dict], host: Host | None) -> dict[str, str]:
    """Changes inside a directory that is a git directory on the host now or on the final tree,
    whatever its name (`.repos/sub`, the target of a gitfile; a bare repository the agent makes):
    git run there reads its config and hooks. `.git` itself is refused by name (review)."""
    below: dict[str, set[str]] = {}
    for change in changes:
        parts = change["path"].split("/")
        for i in range(len(parts)):
            below.setdefault("/".join(parts[:i]), set()).update(
                {names.fold_name(parts[i])} if change["new"] is not None or i < len(parts) - 1 else set())
    git_dirs = []
    for directory, made in below.items():
        try:
            there = (host.names(directory) if host else None) or []
        except CopyConflict:
            there = []
        if _is_git_dir(made | {names.fold_name(n) for n in there}):
            git_dirs.append(directory)
    why = {}
    for change in changes:
        held = next((d for d in git_dirs if change["path"].startswith(d + "/") or not d), None)
        if held is not None:
            why[change["path"]] = f"inside {held or 'the workspace root'}, a git directory (the host's git reads its config and hooks)"
    return why
