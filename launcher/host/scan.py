"""Reads a workspace for the surface report: every host-executed surface at any depth and every
symlink that leaves the workspace, each with a fingerprint of its content. Never follows a symlink."""

from __future__ import annotations

import hashlib
import os
import stat

from launcher.host import gitdirs, includes
from launcher.policy.surfaces import named

_HASH_MAX = 4 * 1024 * 1024     # bytes of a file hashed; a larger one is fingerprinted by size and mtime
_DIR_MAX = 5000                 # entries of a surface directory fingerprinted
# In a git directory only what runs code, redirects git or resumes a command is fingerprinted (not
# objects, refs or the index, which `workspace.git: read-write` lets the agent change); modules/
# and worktrees/ hold git directories of their own, fingerprinted the same way.
_GIT_FILES = ("config", "config.worktree", "commondir", "gitdir")
_GIT_DIRS = ("hooks", "info", "remotes", "branches", "rebase-merge", "rebase-apply", "sequencer")
_GIT_NESTED = ("modules", "worktrees")


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


def _git_entries(path: str, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    """(path inside the git directory, fingerprint) of what runs code there, and the same for
    each git directory in its modules/ and worktrees/."""
    found = []
    for name in _GIT_FILES + _GIT_DIRS + ("objects/info/alternates",):
        sub = os.path.join(path, name)
        try:
            st = os.lstat(sub)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if not _placeholder(st, sub, False):   # an empty hooks/ or info/ runs nothing (another sandbox's mount point?)
                found.append((prefix + name, _tree(sub)))
        else:
            found.append((prefix + name, _entry(sub, st)))
    for nested in _GIT_NESTED if depth < 4 else ():
        top = os.path.join(path, nested)
        for child in gitdirs.git_dir_children(top):
            found += _git_entries(child, f"{prefix}{nested}/{os.path.relpath(child, top)}/", depth + 1)
    return found


def git_fingerprint(path: str) -> str:
    """A git directory's control files, one line each (surfaces.compare names the changed ones)."""
    def line(sub: str, fp: str) -> str:   # a line per file: no line break or NUL of a name inside it
        name = sub.replace("\\", "\\\\").replace("\n", "\\n").replace("\0", "\\0")
        return f"{name}\0{hashlib.sha256(fp.encode(errors='surrogateescape')).hexdigest()[:32]}"

    return "gitdir:" + "\n".join(line(sub, fp) for sub, fp in sorted(_git_entries(path)))


def _fingerprint(path: str, st: os.stat_result, name: str) -> str:
    if stat.S_ISDIR(st.st_mode):
        return git_fingerprint(path) if gitdirs.is_dot_git(name) else _tree(path)
    return _entry(path, st)


def _placeholder(st: os.stat_result, path: str, file: bool) -> bool:
    """An empty directory (an empty file, for a config file's name): another sandbox's mount point."""
    try:
        return (stat.S_ISDIR(st.st_mode) and not os.listdir(path)) or (file and stat.S_ISREG(st.st_mode) and not st.st_size)
    except OSError:
        return False


def snapshot(workspace: str, extra: tuple[str, ...] = (), included: tuple[str, ...] = ()) -> dict[str, str]:
    """Workspace-relative path -> fingerprint, for every surface (names folded as a Mac or Windows
    would), every symlink leaving the workspace, every git directory found in it (a bare one, a
    gitfile's or symlink's target, a commondir, an alternates target) and each of `extra` (paths
    git's configuration names, see gitscan.py), and every file the surfaces include or run
    (includes.py), with `included` (what an earlier snapshot's graph reached). Surface and git
    directories are not descended
    into (their fingerprint covers them); an empty directory at a protected name in the root (an
    empty file, for a config file's name) is a placeholder mount point, taken as absent."""
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
            surface = named(entry.name, rel)
            if surface:
                if not rel and surface.protect and _placeholder(st, entry.path, surface.file):
                    continue
                found[sub] = _fingerprint(entry.path, st, entry.name)
            elif stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(entry.path)
                if target != root and not target.startswith(root + "/"):
                    found[sub] = "link-out:" + target
            elif stat.S_ISDIR(st.st_mode) and gitdirs.is_git_dir(entry.path):
                found[sub] = git_fingerprint(entry.path)   # a repository for git run inside it
            elif stat.S_ISDIR(st.st_mode):
                stack.append(sub)
    starts = [t for t in (gitdirs.dot_git_target(os.path.join(root, p)) for p in found
                          if gitdirs.is_dot_git(p.rsplit("/", 1)[-1])) if t]
    for git_dir in gitdirs.follow(starts + [os.path.join(root, p) for p, f in found.items() if f.startswith("gitdir:")]):
        rel = gitdirs.inside(root, git_dir.real)
        if rel and git_dir.role != "objects" and not any(rel == p or rel.startswith(p + "/") for p in found):
            found[rel] = git_fingerprint(git_dir.real)
    surfaces = [p for p, f in found.items() if not f.startswith(("link-out:", "gitdir:"))]
    graph = tuple(dict.fromkeys(includes.graph(root, surfaces) + list(included)))
    return found | extras(root, extra, found) | extras(root, graph, found, "include:")


def extras(workspace: str, paths: tuple[str, ...], found: dict[str, str], prefix: str = "git:") -> dict[str, str]:
    """Fingerprints (`git:…`, or `prefix`) of workspace-relative paths git reads (or a surface
    includes) that a snapshot does not list by itself; a missing one, or an empty placeholder, is absent."""
    root, out = os.path.realpath(workspace), {}
    for rel in paths:
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if rel not in found and not _placeholder(st, path, True):
            out[rel] = prefix + _fingerprint(path, st, "")
    return out
