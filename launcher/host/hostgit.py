"""Every git command the launcher runs on the host, inert by construction.

Commands that write (apply --to) run in a private git directory of ours that borrows the
repository's objects through alternates: git never reads the repository's config, hooks,
attributes or promisor remotes, so nothing the repository (or an agent) configured can run.
Reading configuration (`config_entries`) is data only: `git config --list` executes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from launcher.errors import PolicyError, Problem
from launcher.host import host

# Settings of ours on every command: they win over any file git reads (and our private directory
# has none). Each closes a way git could run a program or reach out.
_INERT = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.pager=cat",
          "-c", "core.sshCommand=false", "-c", "core.askPass=false", "-c", "core.editor=false",
          "-c", "protocol.allow=never", "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",
          "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.alternateRefsCommand=",
          "-c", "credential.helper=", "-c", "diff.external=", "-c", "core.untrackedCache=false",
          # git's own refusal of paths that are .git on a Mac or on Windows (.GIT, .git\u200c, git~1)
          "-c", "core.protectHFS=true", "-c", "core.protectNTFS=true")
# Variables of the user's environment that would point git at another repository or config.
_REPOSITORY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                         "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
                         "GIT_DISCOVERY_ACROSS_FILESYSTEM")


def _inert_env(home: str, **extra: str) -> dict[str, str]:
    """Nothing of the user's environment but PATH: no system or global config, no pager, no
    prompt, no lazy fetch (git 2.44+; our private directory has no promisor on older ones)."""
    env = {"PATH": host.environment_with().get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C",
           "HOME": home, "XDG_CONFIG_HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
           "GIT_NO_LAZY_FETCH": "1", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_OPTIONAL_LOCKS": "0",
           "GIT_PROTOCOL_FROM_USER": "0", "GIT_PAGER": "cat", "PAGER": "cat", "GIT_EDITOR": "false"}
    return {**env, **extra}


def _failed(what: str, done: subprocess.CompletedProcess) -> PolicyError:
    found = done.stderr.decode(errors="replace").strip().splitlines()
    return PolicyError([Problem(file="host git", path=what, expected="success",
                                found=(found[-1] if found else f"exit {done.returncode}"))])


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a work tree's git data lies (`.git` itself, or a gitfile's target and its commondir)."""

    git_dir: str
    common_dir: str


def layout(workspace: str) -> Layout | None:
    """The repository of the workspace root, read as files (no git runs); None if there is none."""
    dot = os.path.join(workspace, ".git")
    if os.path.isdir(dot) and not os.path.islink(dot):
        git_dir = dot
    elif os.path.isfile(dot) and not os.path.islink(dot):
        with open(dot, "rb") as data:
            line = data.read(4096).decode(errors="replace").splitlines()[:1]
        if not line or not line[0].startswith("gitdir:"):
            return None
        git_dir = os.path.normpath(os.path.join(workspace, line[0][7:].strip()))
    else:
        return None
    common = os.path.join(git_dir, "commondir")
    if os.path.isfile(common):
        with open(common, "rb") as data:
            common_dir = os.path.normpath(os.path.join(git_dir, data.read(4096).decode(errors="replace").strip()))
    else:
        common_dir = git_dir
    return Layout(git_dir=git_dir, common_dir=common_dir)


class Private:
    """A private, bare git directory whose object store reaches the repository's read-only:
    new objects are written here, then copied into the repository as plain files."""

    def __init__(self, common_dir: str, object_format: str = "sha1"):
        self.root = tempfile.mkdtemp(prefix="sandbox-git-")
        self.common_dir = common_dir
        os.makedirs(os.path.join(self.root, "objects", "info"))
        os.makedirs(os.path.join(self.root, "refs"))
        os.makedirs(os.path.join(self.root, "work"))   # update-index wants a work tree: an empty one
        with open(os.path.join(self.root, "HEAD"), "w") as out:
            out.write("ref: refs/heads/sandbox-none\n")
        with open(os.path.join(self.root, "config"), "w") as out:
            version = "0" if object_format == "sha1" else "1"
            out.write(f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
                      + ("" if object_format == "sha1" else f"[extensions]\n\tobjectformat = {object_format}\n"))
        with open(os.path.join(self.root, "objects", "info", "alternates"), "w") as out:
            out.write(os.path.abspath(os.path.join(common_dir, "objects")) + "\n")

    def git(self, *args: str, data: bytes | None = None, index: str | None = None, **env: str) -> str:
        extra = {"GIT_INDEX_FILE": index} if index else {}
        done = subprocess.run(["git", f"--git-dir={self.root}", f"--work-tree={self.root}/work", *_INERT, *args], input=data, capture_output=True,
                              cwd=self.root, env=_inert_env(self.root, **extra, **env))
        if done.returncode != 0:
            raise _failed(f"git {args[0]}", done)
        return done.stdout.decode().strip()

    def new_objects(self) -> list[str]:
        """Repository-relative paths (objects/xx/yyyy) of the loose objects written here."""
        top, found = os.path.join(self.root, "objects"), []
        for fan in sorted(os.listdir(top)):
            if len(fan) == 2 and os.path.isdir(os.path.join(top, fan)):
                found += [f"objects/{fan}/{name}" for name in sorted(os.listdir(os.path.join(top, fan)))]
        return found

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Private:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_only(git_dir: str, *args: str) -> str:
    """Read-only plumbing (`rev-parse`) in a repository of ours, inert like the rest; "" on failure."""
    with tempfile.TemporaryDirectory(prefix="sandbox-git-") as home:
        try:
            done = subprocess.run(["git", f"--git-dir={git_dir}", *_INERT, *args], capture_output=True, cwd=home,
                                  env=_inert_env(home), timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


def plain(*args: str) -> subprocess.CompletedProcess:
    """A git command that needs no repository (check-ref-format), inert all the same."""
    with tempfile.TemporaryDirectory(prefix="sandbox-git-") as home:
        return subprocess.run(["git", *_INERT, *args], capture_output=True, cwd=home, env=_inert_env(home))


def config_file_value(path: str, key: str) -> str:
    """One key of one config file, includes not followed (`git config --file`): data only."""
    with tempfile.TemporaryDirectory(prefix="sandbox-git-") as home:
        done = subprocess.run(["git", "config", "--file", path, "--get", key], capture_output=True, cwd=home,
                              env=_inert_env(home))
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


_LIST_SECONDS = 20


@dataclass(frozen=True, kw_only=True)
class ConfigEntry:
    scope: str      # system, global, local, worktree, command
    origin: str     # file:PATH (absolute), command line:, blob:…
    key: str        # as git prints it: section and key lower-cased, subsection as written
    value: str


def config_entries(directory: str, owner: tuple[int, int] | None = None) -> tuple[ConfigEntry, ...]:
    """Every config entry git sees in `directory` for the user who owns it, includes followed, with
    the file each came from: git's own reading (system, global, GIT_CONFIG_* of the environment),
    not a parser of ours that can miss a file. Run as `owner` when the launcher is root."""
    env = {k: v for k, v in host.environment_with().items() if k not in _REPOSITORY_VARIABLES}
    argv = ["git", "config", "--list", "--show-scope", "--show-origin", "--includes", "-z"]
    done = None
    if _switch_to(owner):
        as_owner = {k: v for k, v in env.items() if k != "XDG_CONFIG_HOME"}
        done = _run(argv, cwd=directory, env={**as_owner, "HOME": owner_home(owner)},
                    user=owner[0], group=owner[1], extra_groups=[])
    if done is None or done.returncode != 0:
        # Ourselves (the owner cannot reach the directory, or we are the owner): git's ownership
        # check only guards commands that run code, and listing runs none.
        done = _run(argv[:1] + ["-c", f"safe.directory={directory}"] + argv[1:], cwd=directory, env=env)
    if done.returncode != 0:
        raise _failed("git config --list", done)
    return _parsed(done.stdout, directory)


def _run(argv: list[str], **how) -> subprocess.CompletedProcess:
    """A config listing, bounded in time: a config file swapped for a FIFO would block git."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=_LIST_SECONDS, **how)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, b"", f"no answer within {_LIST_SECONDS} s".encode())


def _switch_to(owner: tuple[int, int] | None) -> bool:
    return owner is not None and os.geteuid() == 0 and owner[0] != 0


def owner_home(owner: tuple[int, int] | None) -> str:
    """The home directory git expands `~` to for the workspace owner (ours unless we are root)."""
    if not _switch_to(owner):
        return os.path.expanduser("~")
    import pwd

    try:
        return pwd.getpwuid(owner[0]).pw_dir
    except KeyError:
        return "/nonexistent"


def file_entries(path: str) -> tuple[ConfigEntry, ...]:
    """The entries of one config file as git parses it, includes not followed (the caller follows
    include and includeIf paths itself, also those whose condition is false now): data only."""
    with tempfile.TemporaryDirectory(prefix="sandbox-git-") as home:
        done = _run(["git", "config", "--file", path, "--list", "--show-origin", "--no-includes", "-z"],
                    cwd=home, env=_inert_env(home))
    if done.returncode != 0:
        raise _failed(f"git config --file {path}", done)
    fields = done.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return tuple(ConfigEntry(scope="include", origin=origin, key=item.partition("\n")[0], value=item.partition("\n")[2])
                 for origin, item in zip(fields[0::2], fields[1::2]))


def _parsed(stdout: bytes, directory: str) -> tuple[ConfigEntry, ...]:
    fields = stdout.decode("utf-8", errors="surrogateescape").split("\0")
    found = []
    for scope, origin, item in zip(fields[0::3], fields[1::3], fields[2::3]):
        key, _, value = item.partition("\n")
        if origin.startswith("file:") and not os.path.isabs(origin[5:]):
            origin = "file:" + os.path.normpath(os.path.join(directory, origin[5:]))
        found.append(ConfigEntry(scope=scope, origin=origin, key=key, value=value))
    return tuple(e for e in found if e.key != "safe.directory" or e.scope != "command")
