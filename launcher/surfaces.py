"""Host-executed surfaces: files in a repository that tools on the developer's machine run or trust
on their own. The one inventory: the compiler keeps the protected ones read-only at the workspace
root (also when missing), and the launcher reports any new, changed or removed one, at any depth."""

from __future__ import annotations

from dataclasses import dataclass

from launcher import names
from launcher.values import visible


@dataclass(frozen=True, kw_only=True)
class Surface:
    name: str        # file or directory name, matched at any depth
    tools: str       # who reads it on the host
    why: str         # what a hostile change makes them do
    protect: bool    # read-only at the workspace root, also when missing; always reported at any depth
    new_only: bool = False   # reported only when it appears (a change to a tracked one shows in `git diff`)
    # A config file its tool opens as a file even when missing: protected by a read-only file holding
    # `{}` (valid JSON and YAML) rather than an empty directory, which the tool fails on.
    file: bool = False


def _s(name: str, tools: str, why: str, protect: bool = True, new_only: bool = False, file: bool = False) -> Surface:
    return Surface(name=name, tools=tools, why=why, protect=protect, new_only=new_only, file=file)


INVENTORY = (
    _s(".git", "git, every git-aware prompt and editor",
       "config (core.fsmonitor, core.pager, aliases), hooks and commondir run code on the next git command; "
       "the index (skip-worktree) and refs hide changes from `git status`"),
    _s(".gitmodules", "git submodule, clone --recursive", "submodule URLs and paths fetched and checked out"),
    _s(".lfsconfig", "git-lfs", "the LFS endpoint: your LFS credentials are sent where it says"),
    _s(".gitattributes", "git", "filters and diff drivers (with config), `-diff` hides a change's content",
       protect=False, new_only=True),
    _s(".gitignore", "git", "a new one can hide new files from `git status`, itself included",
       protect=False, new_only=True),
    _s(".envrc", "direnv", "shell code run on `cd` (once its path and content were `direnv allow`ed)"),
    _s(".pre-commit-config.yaml", "pre-commit (installed hooks)", "hook commands run on `git commit`"),
    _s(".husky", "husky (core.hooksPath=.husky)", "hook scripts run on `git commit`"),
    _s("lefthook.yml", "lefthook", "hook commands run on `git commit`"),
    _s(".lefthook.yml", "lefthook", "hook commands run on `git commit`"),
    _s("mise.toml", "mise", "tasks, hooks and env run in the directory (after `mise trust`)", protect=False),
    _s(".mise.toml", "mise", "tasks, hooks and env run in the directory (after `mise trust`)", protect=False),
    _s(".tool-versions", "asdf, mise", "tool versions installed by plugin scripts", protect=False),
    _s(".vscode", "VS Code", "tasks (runOn folderOpen), settings that name interpreters and tools"),
    _s(".idea", "JetBrains IDEs", "run configurations and tool paths (after the trust prompt)", protect=False),
    _s(".devcontainer", "Dev Containers CLI, VS Code", "initializeCommand runs on the host"),
    _s(".devcontainer.json", "Dev Containers CLI, VS Code", "initializeCommand runs on the host"),
    _s(".claude", "Claude Code", "settings hooks and permissions, commands run by the next session"),
    _s(".codex", "Codex CLI", "project config.toml: model provider, MCP servers, sandbox mode"),
    _s(".gemini", "Gemini CLI", "settings.json: MCP server commands, tool settings"),
    _s(".mcp.json", "Claude Code and other MCP clients", "MCP server commands started by the agent", file=True),
    _s(".aider.conf.yml", "aider", "lint-cmd and test-cmd run after each edit", file=True),
    _s(".aider.model.settings.yml", "aider", "model settings: extra request parameters and headers, the API base", file=True),
    _s(".aider.model.metadata.json", "aider", "model metadata the next session trusts", file=True),
    _s("opencode.json", "opencode", "providers (base URL: your real key goes there), MCP server commands", file=True),
    _s("opencode.jsonc", "opencode", "providers (base URL: your real key goes there), MCP server commands", file=True),
    # Not protected: opencode writes it at every start (.opencode/.gitignore) and fails if it cannot.
    _s(".opencode", "opencode", "agents, commands and plugins the next session runs", protect=False),
    _s(".env", "aider, Gemini CLI, dotenv loaders", "an API base URL that sends your real key elsewhere",
       protect=False),
    _s(".cursor", "Cursor", "rules and mcp.json (after the trust prompt)", protect=False),
    _s(".neo", "neo (the stand-in agent)", "agent configuration"),
    _s(".visvoai", "visvoai", "agent configuration"),
    _s("AGENTS.md", "Codex CLI, opencode and others", "instructions the next agent follows (not executed)",
       protect=False),
    _s("CLAUDE.md", "Claude Code", "instructions the next agent follows (not executed)", protect=False),
    _s("GEMINI.md", "Gemini CLI", "instructions the next agent follows (not executed)", protect=False),
    _s(".npmrc", "npm", "script-shell, registry and git binary used by the next `npm install`"),
    _s(".yarnrc.yml", "yarn berry", "yarnPath: a script run as yarn itself"),
    _s(".yarnrc", "yarn 1", "yarn-path: a script run as yarn itself", protect=False),
    _s(".pnpmfile.cjs", "pnpm", "hooks run on every `pnpm install`"),
    _s("pip.conf", "pip (inside a virtual environment's root)", "index URL and options of the next install",
       protect=False),
    _s(".pypirc", "twine, setuptools (only from $HOME)", "upload targets (reported, never read from a repo by default)",
       protect=False),
    _s(".github", "GitHub Actions, CODEOWNERS", "workflows and local actions run with the repository's secrets"),
    _s(".gitlab-ci.yml", "GitLab CI", "pipeline jobs run with the project's secrets"),
    _s(".gitlab", "GitLab", "CI templates, CODEOWNERS", protect=False),
    _s(".circleci", "CircleCI", "pipeline jobs", protect=False),
    _s("Jenkinsfile", "Jenkins", "pipeline steps", protect=False),
    _s(".sandbox.yaml", "sandbox", "the repository policy layer (applied only once approved)"),
)

BY_NAME = {s.name: s for s in INVENTORY}
_FOLDED = {names.fold_name(s.name): s for s in INVENTORY}


def named(name: str) -> Surface | None:
    """The surface a file name is on some filesystem (names folded as a Mac or Windows compare
    them: `.GIT`, `.g\u200cit`, `GIT~1` are `.git` there), or None."""
    found = _FOLDED.get(names.fold_name(name))
    if found is None and "~" in name:   # an NTFS short name
        found = next((s for s in INVENTORY if names.same(name, s.name)), None)
    return found


# What git on the host reads beyond the names above: a git directory found anywhere (a gitfile's
# target, a bare repository, a commondir), a config file in the include graph, a hooks directory or
# a program that config names (launcher/gitscan.py).
GIT_READ = Surface(name="git", tools="git on the host, every git-aware prompt and editor",
                   why="a git directory, or a config file, hooks directory or program git's configuration names: "
                       "code runs from it on the next git command", protect=True)
FILE_PLACEHOLDERS = frozenset(s.name for s in INVENTORY if s.file)
# Read-only at the workspace root whatever the policy says, also when they do not exist yet.
PROTECTED = tuple(s.name for s in INVENTORY if s.protect and s.name != ".git")

# What git on the host reads from a git directory; with `workspace.git: read-write` only these stay
# read-only (code runs from them), so the index, refs and objects can be changed and hide changes.
GIT_CONTROL = (".git/hooks", ".git/config", ".git/config.worktree", ".git/commondir", ".git/info")
# With `git: read-write`, these two cannot be protected while missing (a mount point would be a
# directory, which breaks git); a planted one changes .git's fingerprint and is reported.
GIT_BY_EXISTENCE = (".git/config.worktree", ".git/commondir")
# The probe proves that each of these is neither writable nor creatable in a read-only .git.
GIT_READS = GIT_CONTROL + (".git/HEAD", ".git/index", ".git/objects", ".git/refs", ".git/packed-refs",
                           ".git/modules", ".git/worktrees", ".git/logs")


@dataclass(frozen=True, kw_only=True)
class Change:
    path: str        # workspace-relative
    what: str        # new, changed, removed, link-out
    surface: str     # the inventory name, or "symlink"
    detail: str

    def __str__(self) -> str:   # the path is the agent's choice: never raw on the user's terminal
        return f"{self.what} {visible(self.path, keep_lines=False)}: {visible(self.detail, keep_lines=False)}"


def compare(before: dict[str, str], after: dict[str, str]) -> tuple[Change, ...]:
    """What changed between two snapshots (path -> fingerprint, see scan.snapshot)."""
    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        name = path.rsplit("/", 1)[-1]
        if (old or new).startswith("link-out:"):
            if new:   # a symlink leaving the workspace that was not there before, or now points elsewhere
                changes.append(Change(path=path, what="link-out", surface="symlink",
                                      detail=f"a symlink to {new.split(':', 1)[1]}, outside the workspace: "
                                             "host tools that follow it read or write there"))
            continue
        surface = named(name) or GIT_READ
        what = "new" if old is None else "removed" if new is None else "changed"
        if surface.new_only and what != "new":
            continue
        detail = f"{surface.tools}: {surface.why}" + _inside_git(old or "", new or "")
        changes.append(Change(path=path, what=what, surface=surface.name, detail=detail))
    return tuple(changes)


def _inside_git(old: str, new: str, most: int = 6) -> str:
    """Which files of a git directory changed, from two `gitdir:` fingerprints (see scan.py)."""
    if not (old.startswith("gitdir:") and new.startswith("gitdir:")):
        return ""
    before, after = (dict(line.split("\0", 1) for line in f[7:].split("\n") if "\0" in line) for f in (old, new))
    names = [f"{p} ({'new' if p not in before else 'removed' if p not in after else 'changed'})"
             for p in sorted(set(before) | set(after)) if before.get(p) != after.get(p)]
    return f"; in it: {', '.join(names[:most])}{', …' if len(names) > most else ''}" if names else ""


def render(changes: tuple[Change, ...]) -> list[str]:
    lines = [f"the agent left {len(changes)} change{'s' if len(changes) != 1 else ''} to files that host tools "
             "run or trust on their own; review them before running git or any tool in this workspace:"]
    return lines + [f"  {c}" for c in changes]


def to_json(changes: tuple[Change, ...]) -> list[dict]:
    return [{"path": c.path, "change": c.what, "surface": c.surface, "detail": c.detail} for c in changes]   # JSON escapes
