"""Carry a copy's changes back to the host tree: all of them or none.

Each change applies only where the host still holds what the copy started from (or already holds
the result); anything else is a conflict and nothing is written. Paths are walked one directory
at a time without following symlinks, so a link planted in the host tree cannot redirect a write;
new files get plain modes (no setuid) and the workspace owner."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass

from launcher.copies.review import annotated
from launcher.errors import CopyConflict

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, kw_only=True)
class Exported:
    changes: tuple[dict, ...]       # annotated: "refused" says why apply leaves one out
    meta: dict
    files: dict[str, tarfile.TarInfo]
    data: dict[str, bytes]

    @property
    def applicable(self) -> tuple[dict, ...]:
        return tuple(c for c in self.changes if not c["refused"])


def read_export(blob: bytes, protected: tuple[str, ...]) -> Exported:
    files, data, head = {}, {}, None
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as tar:
        for member in tar:
            if member.name == "changes.json":
                head = json.loads(tar.extractfile(member).read())
            elif member.name.startswith("files/"):
                path = member.name[len("files/"):]
                files[path] = member
                if member.isfile():
                    data[path] = tar.extractfile(member).read()
    if head is None:
        raise CopyConflict("the copy's export had no change list (a broken tools container?)")
    return Exported(changes=tuple(annotated(head["changes"], protected)), meta=head.get("meta", {}),
                    files=files, data=data)


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
                    self.own(name, parent)
                    fd = os.open(name, _DIR, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise CopyConflict(f"{rel} on the host is not a directory (a symlink or a file)",
                                       (rel,)) from None
                raise
        self.fds[rel] = fd
        return fd

    def own(self, name: str, parent: int) -> None:
        if os.geteuid() == 0 and self.owner != (0, 0):
            os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)

    def state(self, rel: str) -> dict | None:
        up, _, name = rel.rpartition("/")
        return _state(self.dir(up), name)

    def files_below(self, rel: str) -> set[str]:
        """Every entry but directories below the directory rel (opened without following links)."""
        root, found = f"/proc/self/fd/{self.dir(rel)}", set()
        for top, dirs, files in os.walk(root, followlinks=False):
            inner = os.path.relpath(top, root)
            found |= {os.path.normpath(os.path.join(rel, inner, n)) for n in files}
            found |= {os.path.normpath(os.path.join(rel, inner, n)) for n in dirs if os.path.islink(os.path.join(top, n))}
        return found

    def remove_empty(self, rel: str) -> None:
        """rmdir the directory rel and the (empty) directories below it."""
        root = f"/proc/self/fd/{self.dir(rel)}"
        for top, dirs, _ in os.walk(root, topdown=False, followlinks=False):
            for name in dirs:
                os.rmdir(os.path.join(top, name))
        up, _, name = rel.rpartition("/")
        fd = self.fds.pop(rel)
        os.close(fd)
        os.rmdir(name, dir_fd=self.dir(up))

    def close(self) -> None:
        for fd in self.fds.values():
            if fd is not None:
                os.close(fd)


def _same(host: dict | None, want: dict | None) -> bool:
    return (host or None) == (want or None)


def plan_apply(tree: _Tree, exported: Exported) -> tuple[list[dict], list[dict], list[str]]:
    """(to write, already there, conflicts): each change against the host as it is now."""
    todo, already, conflicts = [], [], []
    for change in exported.applicable:
        try:
            host = tree.state(change["path"])
        except CopyConflict as exc:
            conflicts.append(str(exc))
            continue
        old, new = change["old"], change["new"]
        if old and old["type"] == "dir":        # a directory the agent removed: its files say the rest
            if host is None:
                already.append(change)
            elif host["type"] != "dir":
                conflicts.append(f"{change['path']}: the copy had a directory, the host now has a {host['type']}")
            else:
                todo.append(change)
            continue
        if host and host["type"] == "dir" and old is None:
            # a directory the agent replaced with a file: it must be empty once the deletions ran
            gone = {c["path"] for c in exported.applicable if c["new"] is None}
            left = tree.files_below(change["path"]) - gone
            if left:
                conflicts.append(f"{change['path']}: the host's directory there holds {len(left)} other entries")
                continue
            host = None
        if _same(host, new):
            already.append(change)
        elif _same(host, old):
            todo.append(change)
        else:
            conflicts.append(f"{change['path']}: changed on the host since the copy was taken "
                             f"({_what(host)} now, {_what(old)} in the copy)")
    return todo, already, conflicts


def _what(state: dict | None) -> str:
    if state is None:
        return "nothing"
    if state["type"] == "file":
        return f"a file of {state['size']} bytes"
    return f"a {state['type']}"


def pending(workspace: str, exported: Exported) -> int:
    """How many applicable changes are not on the host tree yet (conflicting ones included)."""
    if not os.path.isdir(workspace):
        return len(exported.applicable)
    tree = _Tree(workspace)
    try:
        todo, _, conflicts = plan_apply(tree, exported)
        return len(todo) + len(conflicts)
    finally:
        tree.close()


def apply_to_tree(workspace: str, exported: Exported) -> tuple[int, int]:
    """Write every applicable change, or raise CopyConflict and write nothing. (written, already)."""
    tree = _Tree(workspace)
    try:
        todo, already, conflicts = plan_apply(tree, exported)
        if conflicts:
            raise CopyConflict("the host tree changed where the agent's changes go; nothing was written:\n  "
                               + "\n  ".join(conflicts), tuple(conflicts))
        for change in todo:
            new = change["new"] or {}
            if new.get("type") == "file" and hashlib.sha256(exported.data[change["path"]]).hexdigest() != new["sha256"]:
                raise CopyConflict(f"{change['path']} changed in the copy while it was read; nothing was written, "
                                   "run apply again")
        # Deletions first, deepest first, so a directory the agent replaced with a file is empty.
        for change in sorted((c for c in todo if c["new"] is None), key=lambda c: -c["path"].count("/")):
            up, _, name = change["path"].rpartition("/")
            parent = tree.dir(up)
            if parent is None:
                continue
            if change["old"]["type"] == "dir":
                with contextlib.suppress(FileNotFoundError, OSError):
                    os.rmdir(name, dir_fd=parent)   # kept when the host has other files in it
            else:
                os.unlink(name, dir_fd=parent)
        for change in sorted((c for c in todo if c["new"] is not None), key=lambda c: c["path"]):
            _write(tree, change, exported)
        return len(todo), len(already)
    finally:
        tree.close()


def _write(tree: _Tree, change: dict, exported: Exported) -> None:
    up, _, name = change["path"].rpartition("/")
    parent = tree.dir(up, create=True)
    temp = f".{name}.sandbox-apply-{os.getpid()}"
    new = change["new"]
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):   # checked empty by plan_apply
            tree.remove_empty(change["path"])
    if new["type"] == "symlink":
        os.symlink(new["target"], temp, dir_fd=parent)
    else:
        blob = exported.data[change["path"]]   # its hash was checked before anything was written
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if new["exec"] else 0o644, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
            os.fchmod(out.fileno(), 0o755 if new["exec"] else 0o644)   # not the umask's idea
    tree.own(temp, parent)
    os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
