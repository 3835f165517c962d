"""The include graph of the configs host tools and CI run: the workspace files a surface names as
code to include or run (a GitLab `include: local:`, a GitHub/Gitea/Forgejo `uses: ./path` local
action or reusable workflow, a script a CI job, a pre-commit `repo: local` hook, a lefthook
command or a dev container command starts), followed from each file reached, bounded. scan.py
fingerprints what it finds, so a change to an included file is reported like the surface itself."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shlex
import stat

import yaml

MAX_BYTES = 256 * 1024   # of one config read; a larger one is fingerprinted, not followed
MAX_DEPTH = 32           # YAML nesting; CI configs need a few levels
MAX_FOUND = 200          # paths followed in one workspace
MAX_HOPS = 5             # an include of an include of …
MAX_READ = 1000          # configs parsed in one workspace (a tree of vendored packages each with a .github)
MAX_WALK = 100_000       # entries a glob looks at
_SHELLS = {"sh", "bash", "zsh", "dash", "python", "python3", "node", "ruby", "perl", "pwsh", "source", "."}
_CI_DIRS = (".github", ".gitea", ".forgejo")   # workflows that may `uses: ./path`
_YAML = (".yml", ".yaml")


class _Loader(yaml.SafeLoader):
    """SafeLoader with bounded nesting (aliases allowed: CI files use them; the walk below visits a
    shared node once, so an alias bomb costs nothing)."""

    def compose_node(self, parent, index):
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError("too deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _read(path: str) -> str | None:
    """A regular file's text (never through a symlink, never a FIFO), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        return os.read(fd, MAX_BYTES).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _load(path: str):
    text = _read(path)
    if text is None:
        return None
    try:
        return yaml.load(text, Loader=_Loader)   # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None   # unparsable: the file itself is still fingerprinted


def _walk(doc):
    """Every (key, value) of a YAML document's mappings, each shared node once."""
    seen, stack = set(), [doc]
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, (dict, list)):
            continue
        seen.add(id(node))
        items = node.items() if isinstance(node, dict) else ((None, v) for v in node)
        for key, value in items:
            if key is not None:
                yield key, value
            stack.append(value)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _command_paths(command: str) -> list[str]:
    """The program a command line starts, when it is a path (`./ci/build.sh`, `bash ci/x.sh`), per line."""
    out = []
    for line in command.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        while words and ("=" in words[0] and not words[0].startswith(("=", "/", "."))):
            words = words[1:]   # VAR=value before the program
        if words and words[0] in _SHELLS and len(words) > 1:
            words = words[1:]
        if words and "/" in words[0]:
            out.append(words[0])
    return out


def _gitlab(doc) -> list[tuple[str, str | None]]:
    include = doc.get("include") if isinstance(doc, dict) else None
    out = [(s, "gitlab") for s in _strings(include) if "://" not in s]   # `include: path` or a list of paths
    for key, value in _walk(doc):
        if key == "local" and isinstance(value, str):        # `include: [{local: path}]`
            out.append((value, "gitlab"))
        elif key in ("script", "before_script", "after_script"):
            out += [(p, None) for s in _strings(value) for p in _command_paths(s)]
    return out


def _actions(doc) -> list[tuple[str, str | None]]:
    out = []
    for key, value in _walk(doc):
        if key == "uses" and isinstance(value, str) and value.startswith("./"):
            out.append((value, "actions"))
        elif key == "run" and isinstance(value, str):
            out += [(p, None) for p in _command_paths(value)]
    return out


def _precommit(doc) -> list[str]:
    out = []
    for repo in (doc.get("repos") or []) if isinstance(doc, dict) else ():
        if isinstance(repo, dict) and repo.get("repo") == "local":
            out += [p for h in repo.get("hooks") or [] if isinstance(h, dict) for p in _command_paths(str(h.get("entry", "")))]
    return out


def _lefthook(doc) -> list[str]:
    return [p for key, value in _walk(doc) if key == "run" and isinstance(value, str) for p in _command_paths(value)]


def _devcontainer(path: str) -> list[str]:
    import json

    text = _read(path)
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return []   # JSON with comments: followed only where it parses
    out = []
    for key in ("initializeCommand", "onCreateCommand", "postCreateCommand", "postStartCommand", "updateContentCommand"):
        value = doc.get(key) if isinstance(doc, dict) else None
        for command in ([value] if isinstance(value, str) else value[:1] if isinstance(value, list) else
                        list(value.values()) if isinstance(value, dict) else []):
            out += _command_paths(command) if isinstance(command, str) else []
    return out


def _kind(rel: str) -> str | None:
    """How a surface's config file is read, by its own name (None: it names nothing we follow)."""
    parts = rel.lower().split("/")
    name, dirs = parts[-1], set(parts[:-1])   # a CI directory at any depth (a nested project's)
    if name == ".gitlab-ci.yml" or (".gitlab" in dirs and name.endswith(_YAML)):
        return "gitlab"
    if (dirs & set(_CI_DIRS) and name.endswith(_YAML)) or name in ("action.yml", "action.yaml"):
        return "actions"
    if name == ".pre-commit-config.yaml":
        return "pre-commit"
    if name in ("lefthook.yml", ".lefthook.yml", "lefthook-local.yml", ".lefthook-local.yml"):
        return "lefthook"
    if name in ("devcontainer.json", ".devcontainer.json"):
        return "devcontainer"
    return None


def _named(root: str, rel: str, kind: str | None) -> list[tuple[str, str | None]]:
    """What config file `rel`, read as `kind`, names (workspace paths as written, relative to the
    root or to it), each with how that one is read in turn: an included GitLab file as GitLab's, a
    local action as an action; a script is fingerprinted, not read."""
    path = os.path.join(root, rel)
    if kind == "gitlab":
        return _gitlab(_load(path))
    if kind == "actions":
        return _actions(_load(path))
    commands = {"pre-commit": lambda: _precommit(_load(path)), "lefthook": lambda: _lefthook(_load(path)),
                "devcontainer": lambda: _devcontainer(path)}.get(kind or "", list)()
    return [(p, None) for p in commands]


def _project(config: str) -> str:
    """The top of the project a config belongs to (a nested one's too): where its forge resolves
    `/path` and `./path` from: the directory holding its CI directory, or the config's own."""
    parts = config.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.lower() in _CI_DIRS + (".gitlab",):
            return "/".join(parts[:i])
    return posixpath.dirname(config)


def _resolve(root: str, config: str, named: str) -> list[str]:
    """Workspace-relative paths `named` can mean (relative to the config's project, the workspace
    root, or the config's directory; a GitLab glob expanded), inside the workspace only, never
    through a symlink out."""
    named = named.strip()
    if not named or "\0" in named:
        return []
    bases = [posixpath.join(_project(config), named.lstrip("/")), named.lstrip("/")] + \
        ([posixpath.join(posixpath.dirname(config), named)] if not named.startswith("/") else [])
    out = []
    for candidate in dict.fromkeys(bases):
        rel = posixpath.normpath(candidate)
        if rel in (".", "") or rel.startswith("../") or rel == "..":
            continue
        if any(c in rel for c in "*?["):
            out += _glob(root, rel)
        elif os.path.lexists(os.path.join(root, rel)):
            out.append(rel)
    real = os.path.realpath(root)
    return [r for r in out if os.path.realpath(os.path.join(root, r)).startswith(real + "/")]


def _glob(root: str, pattern: str, most: int = 50) -> list[str]:
    out, top = [], pattern.split("/")[0]
    if any(c in top for c in "*?["):
        top = ""
    walked = 0
    for folder, dirs, files in os.walk(os.path.join(root, top) if top else root):
        dirs[:] = [d for d in dirs if d != ".git"]
        walked += len(dirs) + len(files)
        if walked > MAX_WALK:
            return out
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), root)
            if fnmatch.fnmatch(rel, pattern.replace("**/", "*")) or fnmatch.fnmatch(rel, pattern):
                out.append(rel)
                if len(out) >= most:
                    return out
    return out


def _configs_in(root: str, rel: str, kind: str | None = None) -> list[tuple[str, str | None]]:
    """The config files to read at a path that was found, each with how it is read: itself (as
    `kind`, else by its name), or the YAML files of a CI directory's workflows, a dev container
    directory's JSON, a local action's action.yml."""
    path = os.path.join(root, rel)
    if not os.path.isdir(path) or os.path.islink(path):
        return [(rel, kind or _kind(rel))]
    out = []
    for sub in ("workflows", "") if posixpath.basename(rel) in _CI_DIRS else ("",):
        try:
            names = sorted(os.listdir(os.path.join(path, sub)))
        except OSError:
            continue
        out += [(posixpath.join(rel, sub, n), kind or _kind(posixpath.join(rel, sub, n))) for n in names
                if n.lower().endswith(_YAML) or n == "devcontainer.json"][:MAX_FOUND]
    return out


def graph(root: str, surfaces: list[str]) -> list[str]:
    """Workspace-relative paths the surfaces at `surfaces` include or run, transitively (bounded),
    each once; what lies inside a surface already found is left out (its fingerprint covers it)."""
    found: list[str] = []
    seen = set(surfaces)
    queue = [(c, k, 0) for rel in surfaces for c, k in _configs_in(root, rel)]
    read = 0
    while queue and len(seen) < 4 * MAX_FOUND and read < MAX_READ:
        config, kind, hops = queue.pop(0)
        read += kind is not None
        for named, child in _named(root, config, kind)[:MAX_FOUND]:
            for rel in _resolve(root, config, named):
                if rel in seen:
                    continue
                seen.add(rel)
                if not any(rel.startswith(s + "/") for s in surfaces):   # else its surface's fingerprint covers it
                    found.append(rel)
                if child and hops + 1 < MAX_HOPS:   # followed either way: a local action in .github runs ./ci/x.sh
                    queue += [(c, k, hops + 1) for c, k in _configs_in(root, rel, child)]
    return found[:MAX_FOUND]
