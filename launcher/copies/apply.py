"""Carry a copy's changes back to the host tree: all of them or none. A change applies only where the host
still holds what the copy started from (or the result already); anything else is a conflict and nothing is
written. Paths are walked a directory at a time without following links; new files get plain modes (0644
or 0755) and the workspace owner. What may come back is an allowlist (review.annotated, then
finaltree.check in judged()): a symlink only when named (`--allow-symlink PATH`), resolving inside the
workspace and out of every refused path on the final tree, and never over a directory."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from dataclasses import replace

from launcher.copies import finaltree, review
from launcher.copies.review import annotated
from launcher.copies.export import Exported, read_export  # noqa: F401 - where callers have always found them
from launcher.errors import CopyConflict, PolicyError, Problem
from launcher.values import visible

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _state(parent: int | None, name: str) -> dict | None:
    """What the host has at name in the directory parent, described like copytool._describe."""
    if parent is None:
        return None
    try:
        st = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.readlink(name, dir_fd=parent)}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    if not stat.S_ISREG(st.st_mode):
        return {"type": "other"}
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    with os.fdopen(fd, "rb") as data:
        digest = hashlib.sha256()
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return {"type": "file", "exec": bool(st.st_mode & 0o111), "size": st.st_size, "sha256": digest.hexdigest()}


class _Tree:
    """The host workspace, opened once; directories below it opened without following links."""

    def __init__(self, root: str):
        self.fds: dict[str, int | None] = {"": os.open(root, _DIR)}
        self.made: list[tuple[int, str]] = []   # directories dir(create=True) made: (parent fd, name)
        st = os.fstat(self.fds[""])
        self.owner = (st.st_uid, st.st_gid)

    def dir(self, rel: str, create: bool = False) -> int | None:
        """fd of the directory rel ("" the root), None when missing; a symlink or file on the
        way raises CopyConflict."""
        if rel in self.fds and (self.fds[rel] is not None or not create):
            return self.fds[rel]
        up, _, name = rel.rpartition("/")
        parent = self.dir(up, create)
        fd = None
        if parent is not None:
            try:
                fd = os.open(name, _DIR, dir_fd=parent)
            except FileNotFoundError:
                if create:
                    os.mkdir(name, 0o755, dir_fd=parent)
                    self.made.append((parent, name))   # an undone apply removes it again
                    self.own(name, parent)
                    fd = os.open(name, _DIR, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise CopyConflict(f"{_shown(rel)} on the host is not a directory (a symlink or a file)",
                                       (_shown(rel),)) from None
                raise
        self.fds[rel] = fd
        return fd

    def own(self, name: str, parent: int) -> None:
        if os.geteuid() == 0 and self.owner != (0, 0):
            os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)

    def state(self, rel: str) -> dict | None:
        up, _, name = rel.rpartition("/")
        return _state(self.dir(up), name)

    def names(self, rel: str) -> list[str] | None:
        fd = self.dir(rel)
        return None if fd is None else os.listdir(fd)

    def links(self) -> list[str]:
        """Every symlink below the root (walked without following links)."""
        root, found = f"/proc/self/fd/{self.fds['']}", []
        for top, dirs, files in os.walk(root, followlinks=False):
            inner = os.path.relpath(top, root)
            found += [os.path.normpath(os.path.join(inner, n)) for n in dirs + files if os.path.islink(os.path.join(top, n))]
        return found

    def files_below(self, rel: str) -> set[str]:
        """Every entry but directories below the directory rel (opened without following links)."""
        root, found = f"/proc/self/fd/{self.dir(rel)}", set()
        for top, dirs, files in os.walk(root, followlinks=False):
            inner = os.path.relpath(top, root)
            found |= {os.path.normpath(os.path.join(rel, inner, n)) for n in files}
            found |= {os.path.normpath(os.path.join(rel, inner, n)) for n in dirs if os.path.islink(os.path.join(top, n))}
        return found

    def close(self) -> None:
        for fd in self.fds.values():
            if fd is not None:
                os.close(fd)


def _shown(path: str) -> str:   # a path the agent chose, in a message for a terminal
    return visible(path, keep_lines=False)


_COMPARED = ("type", "exec", "size", "sha256", "target")   # what the host's _state describes


def _same(host: dict | None, want: dict | None) -> bool:
    def key(state: dict | None) -> dict | None:
        return {k: state[k] for k in _COMPARED if k in state} if state else None
    return key(host) == key(want)


def judged(workspace: str, changes: list[dict], protected: tuple[str, ...], allowed: review.Allowed,
           preview: bool = False) -> list[dict]:
    """The changes annotated for apply (review.annotated), then checked on the host tree as apply
    would leave it (finaltree.check). `preview` (diff) puts there every change a yes could let
    through, so the verdict shown for each is the one it gets however many yeses are given."""
    found = annotated(changes, protected, allowed)
    going = [c for c in found if not c["refused"] or (preview and c["needs"])]
    try:
        tree = _Tree(workspace)
    except OSError:   # no host tree (moved away): judged on the changes alone
        tree = None
    try:
        why = {**finaltree.in_git_directories(going, tree), **finaltree.check(going, tree, protected)}
    finally:
        if tree is not None:
            tree.close()
    return [{**c, "refused": why[c["path"]], "needs": []} if c["path"] in why else c for c in found]


def reviewed(workspace: str, exported: Exported, protected: tuple[str, ...], allowed: review.Allowed) -> Exported:
    """exported with the verdicts of judged(); PolicyError when a yes cannot be honoured."""
    changes = judged(workspace, list(exported.changes), protected, allowed)
    problems = review.unhonoured(changes, allowed)
    if problems:
        raise PolicyError(problems)
    return replace(exported, changes=tuple(changes))


def plan_apply(tree: _Tree, exported: Exported) -> tuple[list[dict], list[dict], list[str]]:
    """(to write, already there, conflicts): each change against the host as it is now."""
    todo, already, conflicts = [], [], []
    # what this apply removes: a file the agent made a directory is gone before the files below it arrive
    removed = {c["path"] for c in exported.applicable if c["new"] is None and (c["old"] or {}).get("type") != "dir"}
    for change in exported.applicable:
        try:
            host = tree.state(change["path"])
        except CopyConflict as exc:
            parts = change["path"].split("/")
            if not any("/".join(parts[:i]) in removed for i in range(1, len(parts))):
                conflicts.append(str(exc))
                continue
            host = None   # below a path this apply removes (its own entry is checked against the host)
        old, new = change["old"], change["new"]
        if old and old["type"] == "dir":        # a directory the agent removed: its files say the rest
            if host is None:
                already.append(change)
            elif host["type"] != "dir":
                conflicts.append(f"{_shown(change['path'])}: the copy had a directory, the host now has a {host['type']}")
            else:
                todo.append(change)
            continue
        if host and host["type"] == "dir" and old is None:
            if (new or {}).get("type") == "symlink":   # finaltree refuses it; never here either
                conflicts.append(f"{_shown(change['path'])}: a directory on the host is never replaced by a link")
                continue
            # a directory the agent replaced with a file: it must be empty once the deletions ran
            gone = {c["path"] for c in exported.applicable if c["new"] is None}
            left = tree.files_below(change["path"]) - gone
            if left:
                conflicts.append(f"{_shown(change['path'])}: the host's directory there holds {len(left)} other entries")
                continue
            host = None
        if _same(host, new):
            already.append(change)
        elif _same(host, old):
            todo.append(change)
        else:
            conflicts.append(f"{_shown(change['path'])}: changed on the host since the copy was taken "
                             f"({_what(host)} now, {_what(old)} in the copy)")
    return todo, already, conflicts


def _what(state: dict | None) -> str:
    if state is None:
        return "nothing"
    if state["type"] == "file":
        return f"a file of {state['size']} bytes"
    return f"a {state['type']}"


def pending(workspace: str, exported: Exported) -> int:
    """How many applicable changes are not on the host tree yet (conflicting ones included); one
    that needs a per-path yes counts too, so gc keeps the work it would take to apply it."""
    exported = replace(exported, changes=tuple({**c, "refused": ""} if c.get("needs") else c for c in exported.changes))
    if not os.path.isdir(workspace):
        return len(exported.applicable)
    tree = _Tree(workspace)
    try:
        todo, _, conflicts = plan_apply(tree, exported)
        return len(todo) + len(conflicts)
    finally:
        tree.close()


def apply_to_tree(workspace: str, exported: Exported) -> tuple[int, int]:
    """Write every applicable change, or write nothing: CopyConflict before anything is touched,
    PolicyError when a write fails half-way (a full disk, a read-only directory), after every step
    was undone. (written, already)."""
    tree = _Tree(workspace)
    try:
        todo, already, conflicts = plan_apply(tree, exported)
        if conflicts:
            raise CopyConflict("the host tree changed where the agent's changes go; nothing was written:\n  "
                               + "\n  ".join(conflicts), tuple(conflicts))
        for change in todo:
            new = change["new"] or {}
            if new.get("type") == "file" and exported.data[change["path"]].sha256 != new["sha256"]:
                raise CopyConflict(f"{_shown(change['path'])} changed in the copy while it was read; nothing was written, "
                                   "run apply again")
        _Transaction(workspace, tree, exported).run(todo)
        return len(todo), len(already)
    finally:
        tree.close()


class _Transaction:
    """All of the changes or none: every file is first written to a temporary next to its target
    (same directory, so a rename moves it into place), then what is replaced or deleted is renamed
    aside and the temporaries renamed in; the originals are removed only once all of that worked.
    Any failure (or Ctrl-C) undoes each step, newest first, and removes every temporary."""

    def __init__(self, workspace: str, tree: _Tree, exported: Exported):
        self.workspace, self.tree, self.exported, self.steps, self.count = workspace, tree, exported, [], 0
        self.removed_dirs: list[tuple[int, str]] = []   # directories the agent removed: rmdir at the end

    def _name(self, kind: str, parent: int) -> str:
        """A name of ours, free in the directory parent (a rename would replace one that is not)."""
        while True:
            self.count += 1   # short: a name of 255 bytes has no room for a prefix
            name = f".sandbox-{kind}-{os.getpid()}-{self.count}"
            try:
                os.lstat(name, dir_fd=parent)
            except FileNotFoundError:
                return name

    def run(self, todo: list[dict]) -> None:
        at = ""
        try:
            staged = []
            for change in sorted((c for c in todo if c["new"] is not None), key=lambda c: c["path"]):
                at = change["path"]
                staged.append((change, *self._stage(change)))
            # deletions first, deepest first, so a directory the agent replaced with a file is empty
            for change in sorted((c for c in todo if c["new"] is None), key=lambda c: -c["path"].count("/")):
                at = change["path"]
                self._delete(change)
            for change, parent, temp in staged:
                at = change["path"]
                self._place(change, parent, temp)
        except BaseException as exc:
            left = self._undo()
            if not isinstance(exc, OSError):
                raise
            raise PolicyError([Problem(
                file=_shown(self.workspace), path=_shown(at),
                expected="room and permission to write the agent's changes",
                found=f"{exc.strerror or exc}; " + ("the tree is exactly as it was before: nothing was written" if not left
                                                    else "the tree could NOT be put back where: " + ", ".join(left)),
                hint="free some space (or fix the permission) and run `sandbox apply` again")]) from None
        self._finish()

    def _stage(self, change: dict) -> tuple[int, str]:
        up, _, name = change["path"].rpartition("/")
        try:
            parent = self._dir(up)
        except CopyConflict:   # below a file or link this apply removes (plan_apply saw to it): after it went
            return -1, ""
        return parent, self._write_temp(parent, change)

    def _write_temp(self, parent: int, change: dict) -> str:
        """The new file or link as a temporary in the directory parent; its name."""
        new, temp = change["new"], self._name("new", parent)
        if new["type"] == "symlink":
            os.symlink(new["target"], temp, dir_fd=parent)
            self.steps.append(("temp", parent, temp))   # only once it is ours: undo never removes another's
        else:
            blob = self.exported.data[change["path"]]   # its hash was checked before anything was written
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o755 if new["exec"] else 0o644, dir_fd=parent)
            self.steps.append(("temp", parent, temp))
            with os.fdopen(fd, "wb") as out:
                blob.write_to(out)                  # streamed from the spool; holes stay holes
                os.fchmod(out.fileno(), 0o755 if new["exec"] else 0o644)   # not the umask's idea
        self.tree.own(temp, parent)
        return temp

    def _dir(self, rel: str) -> int:
        """The directory rel, made (with those on the way) if missing; each one made is a step."""
        before = len(self.tree.made)
        try:
            return self.tree.dir(rel, create=True)
        finally:
            self.steps += [("made", parent, name) for parent, name in self.tree.made[before:]]

    def _aside(self, parent: int, name: str) -> None:
        backup = self._name("old", parent)
        os.rename(name, backup, src_dir_fd=parent, dst_dir_fd=parent)
        self.steps.append(("aside", parent, name, backup))

    def _delete(self, change: dict) -> None:
        up, _, name = change["path"].rpartition("/")
        parent = self.tree.dir(up)
        if parent is None:
            return
        if change["old"]["type"] == "dir":
            self.removed_dirs.append((parent, name))   # kept when the host has other files in it
        else:
            self._aside(parent, name)

    def _place(self, change: dict, parent: int, temp: str) -> None:
        up, _, name = change["path"].rpartition("/")
        if parent == -1:   # its directory is where a file was: made now, and its temporary written there
            parent = self._dir(up)
            temp = self._write_temp(parent, change)
        with contextlib.suppress(FileNotFoundError):
            os.lstat(name, dir_fd=parent)
            self._aside(parent, name)   # a file, or a directory plan_apply found empty but for what goes
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        self.steps.append(("placed", parent, name))

    def _undo(self) -> list[str]:
        """Every step undone, newest first; the names that could not be put back (none: as before)."""
        left = []
        for step in reversed(self.steps):
            kind, parent, name = step[:3]
            try:
                if kind == "temp":
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=parent)
                elif kind == "placed":
                    os.unlink(name, dir_fd=parent)
                elif kind == "made":
                    os.rmdir(name, dir_fd=parent)
                else:
                    os.rename(step[3], name, src_dir_fd=parent, dst_dir_fd=parent)
            except OSError:
                left.append(_shown(name))
        return left

    def _finish(self) -> None:
        """The originals go, then the directories the agent removed (kept where the host has more)."""
        for step in self.steps:
            if step[0] != "aside":
                continue
            parent, backup = step[1], step[3]
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(backup, dir_fd=parent).st_mode):
                    _remove_tree(parent, backup)
                else:
                    os.unlink(backup, dir_fd=parent)
        for parent, name in self.removed_dirs:   # deepest first, as they were met
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)


def _remove_tree(parent: int, name: str) -> None:
    """A directory this apply set aside: what is left in it is ours (the originals it renamed
    there) or empty directories; walked through its fd, never following a link."""
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        for entry in os.listdir(fd):
            st = os.lstat(entry, dir_fd=fd)
            if stat.S_ISDIR(st.st_mode):
                _remove_tree(fd, entry)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)
