"""The paths a repository's git configuration makes git read or run: every config file in the
include graph (include.path, and includeIf.*.path also where the condition is false now), every
core.hooksPath, and every program or file a key names. Read through git itself (hostgit), as the
workspace owner: system, global, GIT_CONFIG_* and the repository's own, as git would see them."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace

from launcher.errors import PolicyError, Problem
from launcher.host import gitdirs, hostgit
from launcher.host.hostgit import ConfigEntry

MAX_INCLUDES = 10     # include depth; git's own limit is 10 as well
MAX_FILES = 100       # config files read per repository
# Keys whose value git runs (as a shell command or a program) or reads as a file, by variable name
# (the last part of the key), by section (pager.*, alias.* starting with !), or whole.
_PROGRAM_NAMES = {"fsmonitor", "sshcommand", "pager", "editor", "askpass", "alternaterefscommand", "gitproxy",
                  "external", "command", "textconv", "driver", "clean", "smudge", "process", "program", "helper",
                  "cmd", "tunnel", "smtpserver", "sendmailcmd", "defaultkeycommand", "packobjectshook", "uploadpack",
                  "receivepack", "difffilter", "attributesfile", "templatedir", "allowedsignersfile"}
_PATH_SECTIONS = {"difftool", "mergetool", "man", "browser", "lfs"}    # <section>.<tool>.path is a program
_FALSE = {"false", "no", "off", "0", ""}


@dataclass(frozen=True, kw_only=True)
class GitPath:
    config: str        # the config file that names it ("command line" for GIT_CONFIG_* and -c)
    scope: str         # git's: system, global, local, worktree, command (include: of the file including it)
    key: str           # as git prints it (lower-case), "" for a config file git read
    value: str
    path: str          # absolute and normalised, not resolved through symlinks
    kind: str          # config (a file git reads config from), hooks (a hooks directory), program


def _expand(value: str, base: str, home: str) -> str | None:
    """A path value as git expands it: ~/ (the owner's home), absolute, or relative to `base`."""
    if value.startswith("~/") or value == "~":
        return os.path.normpath(home + value[1:])
    if value.startswith(("~", "%(prefix)")) or not value:
        return None     # another user's home, or git's install prefix: never the workspace
    return os.path.normpath(os.path.join(base, value))


def _words(value: str, depth: int = 0) -> list[str]:
    """The words of a shell command, and the words of each quoted one (sh -c '…'), and of
    --option=value the value."""
    try:
        words = shlex.split(value, comments=False)
    except ValueError:
        words = value.split()
    found = []
    for word in words:
        word = word.lstrip("!").rstrip(";&|")
        found.append(word.split("=", 1)[1] if word.startswith("-") and "=" in word else word)
        if depth < 2 and any(c.isspace() for c in word):
            found += _words(word, depth + 1)
    return [w for w in found if w and not any(c.isspace() for c in w)]


def _programs(entry: ConfigEntry, top: str, home: str) -> list[str]:
    """Paths a key's value names as a program or file git opens: words with a slash (or a
    leading ~), and bare words that are files in the top of the work tree."""
    section, _, name = entry.key.rpartition(".")
    section = section.split(".", 1)[0]
    named = (name in _PROGRAM_NAMES or section == "pager" or (name == "path" and section in _PATH_SECTIONS)
             or (section in ("alias", "submodule") and entry.value.lstrip().startswith("!")))
    if not named or entry.value.strip().lower() in _FALSE | {"true", "yes", "on", "1"}:
        return []
    found = []
    for word in _words(entry.value):
        if "://" in word:
            continue
        if "/" in word or word.startswith("~"):
            path = _expand(word, top, home)
        else:
            path = os.path.join(top, word) if os.path.isfile(os.path.join(top, word)) else None
        if path:
            found.append(path)
    return found


def _named(entry: ConfigEntry, top: str, home: str) -> list[GitPath]:
    config = entry.origin[5:] if entry.origin.startswith("file:") else "command line"
    made = lambda path, kind: GitPath(config=config, scope=entry.scope, key=entry.key, value=entry.value,
                                      path=path, kind=kind)
    key = entry.key
    if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
        # Relative to the including file; from the command line a relative include is an error to git.
        path = _expand(entry.value, os.path.dirname(config), home) if config != "command line" or \
            os.path.isabs(entry.value) or entry.value.startswith("~") else None
        return [made(path, "config")] if path else []
    if key == "core.hookspath":
        path = _expand(entry.value, top, home)
        return [made(path, "hooks")] if path else []
    return [made(path, "program") for path in _programs(entry, top, home)]


def paths(top: str, owner: tuple[int, int] | None) -> tuple[GitPath, ...]:
    """Every path git's configuration makes it read or run for the repository whose work tree
    (or git directory, for a bare one) is `top`. Raises PolicyError when git cannot read it."""
    top = gitdirs.repository_top(top)   # a workspace inside a repository: git runs from that one's top
    hang = gitdirs.blocking(top)
    if hang:
        raise PolicyError([Problem(file=top, path="", expected="a repository git can read", found=hang)])
    home = hostgit.owner_home(owner)
    entries = hostgit.config_entries(top, owner)
    read = {e.origin[5:] for e in entries if e.origin.startswith("file:")}
    found = [GitPath(config=f, scope=next(e.scope for e in entries if e.origin == f"file:{f}"), key="", value="",
                     path=f, kind="config") for f in sorted(read)]
    queue = [(e, 0) for e in entries]
    for config in gitdirs.local_configs(top):   # also a git directory git does not take for one yet
        if config not in read and os.path.isfile(config):
            read.add(config)
            found.append(GitPath(config=config, scope="local", key="", value="", path=config, kind="config"))
            queue += [(replace(e, scope="local"), 0) for e in hostgit.file_entries(config)]
    while queue:
        entry, depth = queue.pop(0)
        for named in _named(entry, top, home):
            found.append(named)
            if named.kind != "config" or named.path in read or depth >= MAX_INCLUDES or len(read) >= MAX_FILES:
                continue
            read.add(named.path)
            if os.path.isfile(named.path):   # git skips a missing include; a FIFO is refused by hostgit's timeout
                queue += [(replace(e, scope=entry.scope), depth + 1) for e in hostgit.file_entries(named.path)]
    return tuple(dict.fromkeys(found))
