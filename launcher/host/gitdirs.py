"""The git directories the host's git could use from a directory of a workspace, found on the
filesystem (no git runs): `.git` directories, gitfiles and symlinks at any depth, directories that
are git directories themselves (bare), and from each one its commondir, modules, worktrees and
alternates. Never follows a symlink it did not resolve on purpose, never blocks on a FIFO."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from launcher import names

MAX_VISITED = 1000    # git directories followed; a workspace with more is refused (see gitscan)
_MODULE_DEPTH = 8     # directory levels of a modules/ tree (a submodule's name may hold slashes)
# What git reads from a git directory that runs code or redirects it; hooks/ and info/ as a whole.
CONTROL_FILES = ("config", "config.worktree", "commondir", "gitdir", "objects/info/alternates")
CONTROL_DIRS = ("hooks", "info")


@dataclass(frozen=True, kw_only=True)
class GitFacts:
    """What bind-mode discovery found for the compiler (HostFacts.git)."""

    protect: tuple[str, ...] = ()     # workspace-relative paths to keep read-only
    files: tuple[str, ...] = ()       # those that are config files: a missing one is held by an empty file
    fingerprint: tuple[str, ...] = ()  # workspace-relative paths git reads beyond the surface inventory
    outside: tuple[str, ...] = ()     # real paths outside the workspace git reads (never mounted writable)
    refusals: tuple[str, ...] = ()    # what no mount can protect: the run is refused
    notes: tuple[str, ...] = ()
    placeholder: str = ""             # the empty read-only file a missing config file is bound from


@dataclass(frozen=True, kw_only=True)
class GitDir:
    real: str        # real path
    role: str        # repository, common (a commondir), module, worktree, objects (an alternates target)


def read_small(path: str, limit: int = 4096) -> str:
    """The start of a regular file, or "" (a FIFO, a device, a symlink or nothing there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return ""
    try:
        return os.read(fd, limit).decode(errors="surrogateescape") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    except OSError:
        return ""
    finally:
        os.close(fd)


def is_dot_git(name: str) -> bool:
    """`.git` as any filesystem may spell it (.GIT on a Mac, `.git.` or GIT~1 on Windows)."""
    return names.same(name, ".git")


def dot_git_target(path: str) -> str | None:
    """Where a `.git` entry leads, as the host's git resolves it: the directory itself, a
    symlink's target, or a gitfile's `gitdir:` (relative to the gitfile's directory)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
        return os.path.realpath(path)
    line = (read_small(path).splitlines() or [""])[0]
    if stat.S_ISREG(st.st_mode) and line.startswith("gitdir:") and line[7:].strip():
        return os.path.realpath(os.path.join(os.path.dirname(path), line[7:].strip()))
    return None


def is_git_dir(path: str) -> bool:
    """git's own test (setup.c is_git_directory): HEAD, and objects/ and refs/ here or in the
    commondir. A directory that passes is a repository for `git` run inside it."""
    if not os.path.lexists(os.path.join(path, "HEAD")):
        return False
    common = read_small(os.path.join(path, "commondir")).strip()
    base = os.path.join(path, common) if common else path
    return os.path.isdir(os.path.join(base, "objects")) and os.path.isdir(os.path.join(base, "refs"))


def git_dir_children(path: str, depth: int = 0) -> list[str]:
    """Git directories in a modules/ tree (names may nest: modules/lib/x), or in worktrees/."""
    found = []
    try:
        entries = [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return found
    for entry in entries:
        if os.path.lexists(os.path.join(entry.path, "HEAD")) or os.path.lexists(os.path.join(entry.path, "config")):
            found.append(entry.path)
        elif depth < _MODULE_DEPTH:
            found += git_dir_children(entry.path, depth + 1)
    return found


def follow(starts: list[str]) -> tuple[GitDir, ...]:
    """Every git directory reachable from `starts` (real paths of git directories): each one's
    commondir, modules/*, worktrees/* and alternates targets, recursively, at most MAX_VISITED."""
    found: dict[str, GitDir] = {}
    queue = [(os.path.realpath(s), "repository") for s in starts]
    while queue and len(found) < MAX_VISITED:
        real, role = queue.pop(0)
        if real in found or not os.path.isdir(real):
            continue
        found[real] = GitDir(real=real, role=role)
        common = read_small(os.path.join(real, "commondir")).strip()
        if common:
            queue.append((os.path.realpath(os.path.join(real, common)), "common"))
        objects = os.path.join(real, "objects")
        for line in read_small(os.path.join(objects, "info", "alternates"), 64 * 1024).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):   # relative to the objects directory, as git reads it
                target = os.path.realpath(os.path.join(objects, line))
                if target not in found and len(found) < MAX_VISITED:
                    found[target] = GitDir(real=target, role="objects")
        queue += [(os.path.realpath(c), "module") for c in git_dir_children(os.path.join(real, "modules"))]
        queue += [(os.path.realpath(c), "worktree") for c in git_dir_children(os.path.join(real, "worktrees"))]
    return tuple(found.values())


def control_paths(git_dir: str) -> tuple[str, ...]:
    """The parts of one git directory that stay read-only when its index, refs and objects may be
    written (`workspace.git: read-write`): each control file that exists (a missing one cannot be
    held by a mount point, which would be a directory git fails on; a planted one is reported) and
    hooks/ and info/ whether or not they exist."""
    return tuple(os.path.join(git_dir, n) for n in CONTROL_FILES if os.path.lexists(os.path.join(git_dir, n))) + \
        tuple(os.path.join(git_dir, n) for n in CONTROL_DIRS)


def blocking(top: str) -> str:
    """Why git run in `top` would hang (a FIFO or device where it opens a control file), or "".
    git opens `.git`, HEAD, config and commondir of the repository it finds without a timeout."""
    dot = os.path.join(top, ".git")
    places = [dot] if os.path.lexists(dot) else []
    git_dir = dot_git_target(dot) if places else (top if is_git_dir(top) else None)
    if git_dir:
        common = read_small(os.path.join(git_dir, "commondir")).strip()
        for base in (git_dir, os.path.join(git_dir, common)) if common else (git_dir,):
            places += [os.path.join(base, n) for n in ("HEAD", "config", "commondir", "config.worktree")]
    for path in places:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return f"{path} is neither a regular file nor a directory (git would block or fail on it)"
    return ""


def enclosing_git_dir(path: str) -> str:
    """The git directory `path` is (a bare repository as the workspace) or lies in, or ""."""
    here = os.path.realpath(path)
    while True:
        if is_git_dir(here):
            return here
        if here == "/":
            return ""
        here = os.path.dirname(here)


def repository_top(path: str) -> str:
    """Where git run in `path` finds its repository, walking up as git does: the first directory
    with a `.git` entry, or that is a git directory itself; `path` when there is none."""
    here = os.path.realpath(path)
    while True:
        if os.path.lexists(os.path.join(here, ".git")) or is_git_dir(here):
            return here
        if here == "/":
            return os.path.realpath(path)
        here = os.path.dirname(here)


def local_configs(top: str) -> tuple[str, ...]:
    """The config files of the repository at `top` (its git directory's and its commondir's),
    whether or not git takes it for a repository now: what the agent could complete into one."""
    dot = os.path.join(top, ".git")
    git_dir = dot_git_target(dot) if os.path.lexists(dot) else top
    if not git_dir:
        return ()
    common = read_small(os.path.join(git_dir, "commondir")).strip()
    bases = (git_dir, os.path.realpath(os.path.join(git_dir, common))) if common else (git_dir,)
    return tuple(os.path.join(b, n) for b in bases for n in ("config", "config.worktree"))


def inside(root: str, real: str) -> str | None:
    """`real` relative to the workspace root, or None when it lies outside (or is the root)."""
    return real[len(root) + 1:] if real.startswith(root + "/") else None
