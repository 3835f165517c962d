"""`sandbox apply --to BRANCH`: the agent's changes as one commit on a new branch of the host
repository, on top of the commit the copy was taken from. Git runs only in a private directory
of ours (hostgit.Private), never in the repository: its config, hooks, filters and promisor
remotes are not read, so nothing it configures runs. The new objects and the branch's ref are
then written into the repository as plain files, never overwriting one."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import BinaryIO

from launcher.copies.apply import Exported
from launcher.errors import PolicyError, Problem
from launcher.host import hostgit


def _refuse(found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file="command line", path="--to", expected="a new branch of the host repository",
                                found=found, hint=hint)])


def _identity(workspace: str, owner: tuple[int, int]) -> dict[str, str]:
    """The user's name and e-mail as their own git would take them (read as data), else ours."""
    try:
        found = {e.key: e.value for e in hostgit.config_entries(workspace, owner)}
    except PolicyError:
        found = {}
    name, email = found.get("user.name") or "sandbox", found.get("user.email") or "sandbox@localhost"
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email}


def _branch_exists(common: str, branch: str) -> bool:
    if os.path.lexists(os.path.join(common, "refs", "heads", branch)):
        return True
    try:
        with open(os.path.join(common, "packed-refs"), "rb") as data:
            return any(line.rstrip(b"\n").endswith(b" refs/heads/" + branch.encode()) for line in data)
    except FileNotFoundError:
        return False


def _owned(path: str, owner: tuple[int, int]) -> None:
    if os.geteuid() == 0 and owner != (0, 0):
        os.chown(path, *owner, follow_symlinks=False)


def _makedirs(top: str, rel: str, owner: tuple[int, int]) -> str:
    path = top
    for part in rel.split("/"):
        path = os.path.join(path, part)
        if not os.path.isdir(path) or os.path.islink(path):
            os.mkdir(path, 0o755)   # a link or file there raises: we never write through one
            _owned(path, owner)
    return path


def _write_new(path: str, data: bytes | BinaryIO, mode: int, owner: tuple[int, int]) -> None:
    """Create path with data (bytes, or a file streamed); it must not exist: never overwritten."""
    temp = tempfile.NamedTemporaryFile(dir=os.path.dirname(path), prefix=".sandbox-", delete=False)
    try:
        with temp:
            if isinstance(data, bytes):
                temp.write(data)
            else:
                shutil.copyfileobj(data, temp, 1 << 20)
        os.chmod(temp.name, mode)
        _owned(temp.name, owner)
        os.link(temp.name, path)   # fails if path exists: the one atomic create-if-absent
    finally:
        os.unlink(temp.name)


def commit_to_branch(workspace: str, exported: Exported, branch: str, message: str) -> str:
    """Create refs/heads/BRANCH with the applicable changes; returns the new commit."""
    base = exported.meta.get("head", "")
    if not base:
        raise _refuse("the copy was not taken from a git commit", "apply it to the tree instead")
    if hostgit.plain("check-ref-format", "--branch", branch).returncode != 0 or branch.startswith("-"):
        raise _refuse(f"{branch!r} is not a valid branch name", "for example agent/fix-tests")
    repo = hostgit.layout(workspace)
    if repo is None:
        raise _refuse(f"{workspace} has no .git", "apply it to the tree instead")
    config = os.path.join(repo.common_dir, "config")
    if hostgit.config_file_value(config, "extensions.refstorage") not in ("", "files"):
        raise _refuse("a repository whose refs are not files (reftable)", "apply it to the tree instead")
    if _branch_exists(repo.common_dir, branch):
        raise _refuse(f"branch {branch} exists", "choose a new name; nothing is overwritten")
    owner = (os.stat(repo.common_dir).st_uid, os.stat(repo.common_dir).st_gid)
    with hostgit.Private(repo.common_dir, hostgit.config_file_value(config, "extensions.objectformat") or "sha1") as git:
        index = os.path.join(git.root, "index.private")
        git.git("read-tree", base, index=index)
        # removals first, so a path the agent turned from a directory into a file (or back) is free
        for change in sorted(exported.applicable, key=lambda c: c["new"] is not None):
            new, old = change["new"], change["old"] or {}
            if old.get("type") == "dir" or (new or {}).get("type") == "dir":
                continue   # a directory is its files
            if new is None:
                git.git("update-index", "--force-remove", "--", change["path"], index=index)
                continue
            if new["type"] == "symlink":
                sha = git.git("hash-object", "-w", "--no-filters", "--stdin",
                              data=new["target"].encode(errors="surrogateescape"))
            else:   # git reads the spool file itself: the launcher never holds the file in memory
                sha = git.git("hash-object", "-w", "--no-filters", "--", exported.data[change["path"]].path)
            mode = "120000" if new["type"] == "symlink" else "100755" if new["exec"] else "100644"
            git.git("update-index", "--add", "--replace", "--cacheinfo", f"{mode},{sha},{change['path']}", index=index)
        tree = git.git("write-tree", "--missing-ok", index=index)   # a partial clone lacks blobs: never fetched
        commit = git.git("commit-tree", tree, "-p", base, "-m", message, **_identity(workspace, owner))
        for rel in git.new_objects():
            target = os.path.join(repo.common_dir, rel)
            _makedirs(repo.common_dir, os.path.dirname(rel), owner)
            if not os.path.lexists(target):   # the same name is the same content
                with open(os.path.join(git.root, rel), "rb") as data:
                    _write_new(target, data, 0o444, owner)
    refs = _makedirs(repo.common_dir, os.path.dirname(f"refs/heads/{branch}"), owner)
    try:
        _write_new(os.path.join(refs, branch.rsplit("/", 1)[-1]), f"{commit}\n".encode(), 0o644, owner)
    except FileExistsError:
        raise _refuse(f"branch {branch} exists", "choose a new name; nothing is overwritten") from None
    return commit
