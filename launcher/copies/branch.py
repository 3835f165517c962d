"""`sandbox apply --to BRANCH`: the agent's changes as one commit on a new branch of the host
repository, on top of the commit the copy was taken from. Only plumbing runs (hash-object,
read-tree into a private index, write-tree, commit-tree, update-ref): no work tree is touched, no
hook runs, and the agent's files are only ever data for `git hash-object --no-filters`."""

from __future__ import annotations

import os
import subprocess
import tempfile

from launcher import host
from launcher.copies.apply import Exported
from launcher.errors import PolicyError, Problem

# Whatever the repository's own config says: no fsmonitor, hooks or auto gc run for us. With
# those off, plumbing is safe in a repository of another owner (root applying a user's copy), so
# git's safe.directory refusal is lifted for this one path.
_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0",
         "-c", "maintenance.auto=false", "-c", "core.pager=cat")


def _argv(workspace: str, args: list[str]) -> list[str]:
    return ["git", "-C", workspace, "-c", f"safe.directory={workspace}", *_SAFE, *args]


def _git(workspace: str, args: list[str], index: str | None = None, data: bytes | None = None) -> str:
    env = host.environment_with(GIT_INDEX_FILE=index) if index else None
    done = subprocess.run(_argv(workspace, args), input=data, capture_output=True, env=env)
    if done.returncode != 0:
        raise PolicyError([Problem(file=workspace, path=f"git {args[0]}", expected="success",
                                   found=done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}")])
    return done.stdout.decode().strip()


def _refuse(found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file="command line", path="--to", expected="a new branch of the host repository",
                                found=found, hint=hint)])


def commit_to_branch(workspace: str, exported: Exported, branch: str, message: str) -> str:
    """Create refs/heads/BRANCH with the applicable changes; returns the new commit."""
    base = exported.meta.get("head", "")
    if not base:
        raise _refuse("the copy was not taken from a git commit", "apply it to the tree instead")
    if subprocess.run(["git", "check-ref-format", "--branch", branch], capture_output=True).returncode != 0:
        raise _refuse(f"{branch!r} is not a valid branch name", "for example agent/fix-tests")
    if subprocess.run(_argv(workspace, ["rev-parse", "--verify", "-q", f"refs/heads/{branch}"]),
                      capture_output=True).returncode == 0:
        raise _refuse(f"branch {branch} exists", "choose a new name; nothing is overwritten")
    with tempfile.TemporaryDirectory(prefix="sandbox-apply-") as tmp:
        index = os.path.join(tmp, "index")
        _git(workspace, ["read-tree", base], index)
        for change in exported.applicable:
            new = change["new"]
            if new is None or (change["old"] or {}).get("type") == "dir":
                if new is None and (change["old"] or {}).get("type") != "dir":
                    _git(workspace, ["update-index", "--force-remove", "--", change["path"]], index)
                continue
            blob = (new["target"].encode(errors="surrogateescape") if new["type"] == "symlink"
                    else exported.data[change["path"]])
            sha = _git(workspace, ["hash-object", "-w", "--no-filters", "--stdin"], data=blob)
            mode = "120000" if new["type"] == "symlink" else "100755" if new["exec"] else "100644"
            _git(workspace, ["update-index", "--add", "--cacheinfo", f"{mode},{sha},{change['path']}"], index)
        tree = _git(workspace, ["write-tree"], index)
    identity = [] if _has_identity(workspace) else ["-c", "user.name=sandbox", "-c", "user.email=sandbox@localhost"]
    commit = _git(workspace, [*identity, "commit-tree", tree, "-p", base, "-m", message])
    _git(workspace, ["update-ref", f"refs/heads/{branch}", commit, ""])   # "": only if it does not exist
    return commit


def _has_identity(workspace: str) -> bool:
    return all(subprocess.run(_argv(workspace, ["config", key]), capture_output=True).returncode == 0
               for key in ("user.name", "user.email"))
