"""Bind-mode git discovery: from a workspace's snapshot, every git directory the host's git could
use from any directory of it (gitdirs.py) and every path their configuration names (gitgraph.py),
decided into what stays read-only, what is fingerprinted, what lies outside and what no mount can
protect (then the run is refused, with copy mode as the way out)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from launcher.errors import PolicyError
from launcher.host import gitdirs, gitgraph
from launcher.host.gitdirs import GitFacts

MAX_PROTECTED = 200     # read-only mounts for git; beyond that the start grows long and the run is refused
MAX_REPOSITORIES = 200  # repositories whose configuration is read
COPY_HINT = "run it on a copy instead: --workspace-mode copy (or make the workspace read-only)"


@dataclass
class _Found:
    protect: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    fingerprint: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _holds_root(real: str, root: str) -> bool:
    return real == root or root.startswith(real.rstrip("/") + "/")


def _git_dirs(root: str, surfaces: dict[str, str], writable_git: bool, out: _Found) -> dict[str, str]:
    """Protect every git directory found; returns the repositories whose configuration git reads
    (workspace-relative top -> its real path: each work tree top, and each bare repository)."""
    tops, starts, reached = {"": root}, [], set()
    for rel in sorted(p for p in surfaces if gitdirs.is_dot_git(p.rsplit("/", 1)[-1])):
        path = os.path.join(root, rel)
        target = gitdirs.dot_git_target(path)
        if os.path.islink(path):
            out.notes.append(f"{rel} is a symlink: what it leads to is kept read-only, the link itself cannot be "
                             "(a change to it is reported after the run)")
        elif rel != ".git" and os.path.isfile(path):
            out.protect.append(rel)        # a gitfile: its own read-only mount, so it cannot be pointed elsewhere
        if target and not os.path.exists(target) and gitdirs.inside(root, target):
            out.protect.append(gitdirs.inside(root, target))   # held empty: nothing can become that git directory
        if target:
            starts.append(target)
            reached.add(target)
        tops[rel.rpartition("/")[0]] = os.path.join(root, rel.rpartition("/")[0])
    bare = [os.path.join(root, p) for p, f in surfaces.items() if f.startswith("gitdir:")
            and not gitdirs.is_dot_git(p.rsplit("/", 1)[-1])]
    found = gitdirs.follow(starts + bare)
    if len(found) >= gitdirs.MAX_VISITED:
        out.refusals.append(f"more than {gitdirs.MAX_VISITED} git directories")
    stores = [g.real for g in found if g.role != "objects"]
    for git_dir in found:
        rel = gitdirs.inside(root, git_dir.real)
        if _holds_root(git_dir.real, root):
            out.refusals.append(f"{git_dir.real} is a git directory ({git_dir.role}) that is or holds the workspace "
                                "root: no read-only mount can protect it in a writable workspace")
        elif rel is None:
            out.outside.append(git_dir.real)
            out.notes.append(f"git directory {git_dir.real} ({git_dir.role}) is outside the workspace: not reachable "
                             "from the sandbox unless a mount exposes it (a writable one is refused)")
        elif git_dir.role == "objects":
            if not (writable_git and any(git_dir.real.startswith(s + "/") for s in stores)):
                out.protect.append(rel)    # an object store git borrows from (alternates)
        elif writable_git:
            out.protect += [os.path.relpath(p, root) for p in gitdirs.control_paths(git_dir.real)]
        else:
            out.protect.append(rel)
        if git_dir.role == "repository" and git_dir.real not in reached and rel:
            tops[rel] = git_dir.real       # a bare repository: git run inside it reads its config
    return tops


def _configured(root: str, tops: dict[str, str], owner: tuple[int, int] | None, out: _Found,
                read: tuple | None = None) -> None:
    """Protect and fingerprint every config file, hooks path and program the repositories' git
    configuration names inside the workspace."""
    if len(tops) > MAX_REPOSITORIES:
        out.refusals.append(f"{len(tops)} repositories (more than {MAX_REPOSITORIES}) whose git configuration to read")
        return
    for top in tops.values():
        try:   # the root's as the layers read it in this launch (a moment ago), else git's listing now
            named = read[2] if read and read[:2] == (os.path.normpath(top), owner) else gitgraph.paths(top, owner)
        except PolicyError as exc:
            out.refusals.append(f"git cannot read the configuration of {top} ({exc.problems[0].found}), so what "
                                "it includes is not known")
            continue
        for git in named:
            real = os.path.realpath(git.path)
            rel = gitdirs.inside(root, real)
            where = f"{git.key} = {git.value} in {git.config}" if git.key else git.config
            if _holds_root(real, root):
                if git.kind != "program":
                    out.refusals.append(f"{where}: {git.path} is or holds the workspace root, where the agent writes")
            elif rel is None:
                out.outside.append(real)
                if git.scope in ("local", "worktree") and git.key and git.kind != "program":
                    out.notes.append(f"{where} points outside the workspace ({real}): not reachable from the "
                                     "sandbox unless a mount exposes it (a writable one is refused)")
            elif any(c in rel for c in "\n\r\0"):
                out.refusals.append(f"{where}: {rel!r} is no path a mount can take")
            else:
                out.protect.append(rel)
                out.fingerprint += [rel] + ([os.path.relpath(git.path, root)] if git.path != real and
                                            gitdirs.inside(root, os.path.normpath(git.path)) else [])
                if git.kind == "config":
                    out.files.append(rel)


def _uncovered(paths: list[str]) -> tuple[str, ...]:
    """Each path once, without those below another (a mount of the upper one covers them)."""
    unique = sorted(set(paths))
    return tuple(p for p in unique if not any(p.startswith(o + "/") for o in unique if o != p))


def discover(root: str, surfaces: dict[str, str], *, writable_git: bool, owner: tuple[int, int] | None,
             placeholder: str = "", read: tuple | None = None) -> GitFacts:
    """GitFacts for a writable bind workspace whose snapshot (scan.snapshot) is `surfaces`. `read`:
    (top, owner, paths) as gitgraph.paths gave them earlier in the same launch (Stack.git_read)."""
    out = _Found()
    enclosing = gitdirs.enclosing_git_dir(root)
    if enclosing:
        out.refusals.append(f"the workspace is {'' if enclosing == root else 'inside '}the git directory {enclosing}: "
                            "its config and hooks would be the agent's to write")
    _configured(root, _git_dirs(root, surfaces, writable_git, out), owner, out, read)
    protect = _uncovered(out.protect)
    # What a snapshot fingerprints already (a git directory, a surface) is not fingerprinted twice.
    out.fingerprint = [p for p in out.fingerprint if not any(p == k or p.startswith(k + "/") for k in surfaces)]
    if len(protect) > MAX_PROTECTED:
        out.refusals.append(f"{len(protect)} git paths to keep read-only (more than {MAX_PROTECTED} mounts)")
    return GitFacts(protect=protect, files=tuple(dict.fromkeys(out.files)),
                    fingerprint=tuple(dict.fromkeys(out.fingerprint)), outside=tuple(dict.fromkeys(out.outside)),
                    refusals=tuple(dict.fromkeys(out.refusals)), notes=tuple(dict.fromkeys(out.notes)),
                    placeholder=placeholder)
