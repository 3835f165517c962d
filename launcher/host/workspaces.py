"""Many sandboxes on one workspace: the mount points Docker creates there for missing protected
paths (placeholders) are shared, and a placeholder is removed only when no sandbox of that
workspace exists any more. Removing one earlier would detach the read-only mounts of every other
sandbox using it (since Linux 3.18 an unlinked mount point is detached in every namespace).

One lock and one registry per workspace, in the launcher's state directory (never in the tree)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat

from launcher.host import host
from launcher.host.statefiles import StateFile


def _base(workspace: str) -> str:
    key = hashlib.sha256(workspace.encode(errors="surrogateescape")).hexdigest()[:24]
    return os.path.join(host.state_dir(), "workspaces", key)


def locked(workspace: str):
    """Hold the workspace's lock (the kernel drops it if the launcher dies)."""
    return host.locked(_base(workspace) + ".lock")


def placeholders(workspace: str) -> tuple[str, ...]:
    """The placeholder directories sandboxes of this workspace made (read without the lock: a
    stale answer only makes a start fail closed)."""
    try:
        with open(_base(workspace) + ".json") as data:
            return tuple(json.load(data).get("placeholders", ()))
    except (OSError, ValueError):
        return ()


def _write(workspace: str, paths: tuple[str, ...]) -> None:
    path = _base(workspace) + ".json"
    if not paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as out:
        json.dump({"workspace": workspace, "placeholders": list(paths)}, out)
    os.replace(temp, path)


def register(workspace: str, paths: tuple[str, ...]) -> None:
    """Under the lock: these placeholders are about to be created (or used) by a sandbox."""
    if paths:
        _write(workspace, tuple(dict.fromkeys(placeholders(workspace) + paths)))


def release(workspace: str, paths: tuple[str, ...], others_exist: bool) -> None:
    """Under the lock, after a sandbox of this workspace was removed: the last one out removes
    every registered placeholder that is still an empty directory."""
    if others_exist:
        return
    remove_placeholders(tuple(dict.fromkeys(placeholders(workspace) + paths)))
    _write(workspace, ())


def remove_placeholders(paths: tuple[str, ...]) -> None:
    """Remove placeholder mount points Docker created, deepest first, only while empty (an empty
    directory, or the empty file a config file's placeholder binds onto)."""
    for path in sorted(paths, key=len, reverse=True):
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size == 0:
                os.unlink(path)
            elif stat.S_ISDIR(st.st_mode):
                os.rmdir(path)
        except OSError:
            pass


def config_placeholder(name: str = "empty-config.json", text: str = "{}\n") -> StateFile:
    """A read-only file holding `{}` that a missing protected config file is bound from (see
    surfaces.Surface.file), in the state directory (statefiles.write makes it, once)."""
    return StateFile(path=os.path.join(host.state_dir(), name), text=text)


def git_placeholder() -> StateFile:
    """An empty read-only file a missing git config file of the include graph is bound from (git
    fails on `{}`, and on a directory)."""
    return config_placeholder("empty.gitconfig", "")
