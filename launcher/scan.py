"""Reads a workspace for the surface report: every host-executed surface at any depth and every
symlink that leaves the workspace, each with a fingerprint of its content. Never follows a symlink."""

from __future__ import annotations

import hashlib
import os
import stat

from launcher.surfaces import BY_NAME

_HASH_MAX = 4 * 1024 * 1024     # bytes of a file hashed; a larger one is fingerprinted by size and mtime
_DIR_MAX = 5000                 # entries of a surface directory fingerprinted
# In a git directory only what runs code or decides what git shows is fingerprinted (not objects).
_GIT_FILES = ("config", "config.worktree", "commondir", "gitdir")
_GIT_DIRS = ("hooks", "info")


def _open_regular(path: str) -> int | None:
    """A descriptor for `path` if it is a regular file here and now, else None. Never follows a
    symlink, never blocks on a FIFO: what the agent (or another sandbox's) left can be swapped
    between a stat and this open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _file(path: str, st: os.stat_result) -> str:
    if st.st_size > _HASH_MAX:
        return f"file:{st.st_size}:{st.st_mtime_ns}"
    fd = _open_regular(path)
    if fd is None:
        return "unreadable"
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return "file:" + digest.hexdigest()


def _entry(path: str, st: os.stat_result) -> str:
    if stat.S_ISREG(st.st_mode):
        return _file(path, st)
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return f"other:{stat.S_IFMT(st.st_mode)}"


def _tree(path: str, names: tuple[str, ...] | None = None) -> str:
    """A digest of a directory's entries (all of them, or only `names` for a git directory)."""
    digest, count, stack = hashlib.sha256(), 0, [""]
    while stack and count < _DIR_MAX:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(os.path.join(path, rel)), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if names is not None and rel == "" and entry.name not in names:
                continue
            st = entry.stat(follow_symlinks=False)
            if names is not None and stat.S_ISDIR(st.st_mode) and not os.listdir(entry.path):
                continue   # an empty hooks/ or info/: runs nothing, and may be another sandbox's mount point
            count += 1
            digest.update(f"{sub}\0{_entry(entry.path, st)}\0".encode(errors="surrogateescape"))
            if stat.S_ISDIR(st.st_mode):
                stack.append(sub)
    return "dir:" + digest.hexdigest()


def _fingerprint(path: str, st: os.stat_result, name: str) -> str:
    if stat.S_ISDIR(st.st_mode):
        return _tree(path, _GIT_FILES + _GIT_DIRS if name == ".git" else None)
    return _entry(path, st)


def snapshot(workspace: str) -> dict[str, str]:
    """Workspace-relative path -> fingerprint, for every surface and every symlink leaving the
    workspace. Surface directories are not descended into (their fingerprint covers them); an empty
    directory at a protected name in the root (an empty file, for a config file's name) is a
    placeholder mount point, taken as absent."""
    root = os.path.realpath(workspace)
    found: dict[str, str] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel)))
        except OSError:
            continue
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name in BY_NAME:
                if not rel and BY_NAME[entry.name].protect and (
                        (stat.S_ISDIR(st.st_mode) and not os.listdir(entry.path)) or
                        (BY_NAME[entry.name].file and stat.S_ISREG(st.st_mode) and st.st_size == 0)):
                    continue
                found[sub] = _fingerprint(entry.path, st, entry.name)
            elif stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(entry.path)
                if target != root and not target.startswith(root + "/"):
                    found[sub] = "link-out:" + target
            elif stat.S_ISDIR(st.st_mode):
                stack.append(sub)
    return found



def _first_line(path: str) -> str:
    fd = _open_regular(path)
    if fd is None:
        return ""
    with os.fdopen(fd, "rb") as data:
        return (data.read(4096).decode(errors="replace").splitlines() or [""])[0].strip()


def git_dirs(workspace: str, surfaces: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Git directories to keep read-only beyond the root .git: nested repositories (from a
    snapshot) and, where the root .git is a gitfile (a worktree or submodule), its gitdir and that
    one's commondir. Returns (workspace-relative ones, real paths outside the workspace)."""
    root = os.path.realpath(workspace)
    inside = [p for p in surfaces if p.endswith("/.git")]
    outside: list[str] = []
    gitfile = os.path.join(root, ".git")
    line = _first_line(gitfile)
    if line.startswith("gitdir:") and line[7:].strip():
        gitdir = os.path.realpath(os.path.join(root, line[7:].strip()))
        common = _first_line(os.path.join(gitdir, "commondir"))
        for real in (gitdir,) + ((os.path.realpath(os.path.join(gitdir, common)),) if common else ()):
            rel = os.path.relpath(real, root)
            if rel == ".." or rel.startswith("../"):
                outside.append(real)
            elif rel != ".git" and not rel.startswith(".git/"):   # inside the root .git: protected with it
                inside.append(rel)
    return tuple(dict.fromkeys(inside)), tuple(dict.fromkeys(outside))
