"""Host-executed surfaces: files in a repository that tools on the developer's machine run or trust
on their own. The one inventory: the compiler keeps the protected ones read-only at the workspace
root (also when missing), and the launcher reports any new, changed or removed one, at any depth."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from launcher import names
from launcher.values import visible


@dataclass(frozen=True, kw_only=True)
class Surface:
    name: str        # file or directory name matched at any depth; with `*`, a pattern (reported only)
    family: str      # the rule it belongs to (FAMILIES): a name the rule missed is a defect of the rule
    tools: str       # who reads it on the host
    why: str         # what a hostile change makes them do
    protect: bool    # read-only at the workspace root, also when missing; always reported at any depth
    # A config file its tool opens as a file even when missing: protected by a read-only file holding
    # `{}` (valid JSON and YAML) rather than an empty directory, which the tool fails on.
    file: bool = False

    @property
    def example(self) -> str:
        """A path that is this surface (a pattern's `*` filled in): what the selftest plants."""
        return self.name.replace("*", "planted")


# The families and the rule that closes each: every name a tool of the family reads on its own goes
# in the inventory under it. Rendered into docs/security.md (doc_table) with the surfaces.
FAMILIES = {
    "vcs": "every version-control system's own directory (git's, and every other's a prompt or editor runs)",
    "git": "every file in the tree git itself reads (beyond .git)",
    "hooks": "every hook manager's config and script directory",
    "shell": "every file a shell extension runs on `cd`",
    "ci": "every forge's CI layout and every hosted CI system's file, and who must review (CODEOWNERS)",
    "toolchain": "every tool-version and build-tool config or wrapper that picks or runs a program",
    "packages": "every package manager's config in the tree",
    "editor": "every editor's and IDE's project config",
    "agent": "every coding agent's config directory and files, and its instruction files",
    "sandbox": "this tool's own policy layer",
}


def _s(name: str, family: str, tools: str, why: str, protect: bool = True, file: bool = False) -> Surface:
    return Surface(name=name, family=family, tools=tools, why=why, protect=protect, file=file)


def _ci(name: str, tools: str, why: str = "pipeline jobs run with the repository's secrets after a push") -> Surface:
    return _s(name, "ci", tools, why, protect=False)


_AGENT_RULES = "instructions the next agent follows (not executed)"

INVENTORY = (
    _s(".git", "vcs", "git, every git-aware prompt and editor",
       "config (core.fsmonitor, core.pager, aliases), hooks and commondir run code on the next git command; "
       "the index (skip-worktree) and refs hide changes from `git status`"),
    _s(".hg", "vcs", "Mercurial, hg-aware prompts", "`.hg/hgrc` hooks and extensions run on the next hg command"),
    _s(".jj", "vcs", "Jujutsu", "repository config: aliases, fsmonitor and signing programs run on the next jj command",
       protect=False),
    _s(".svn", "vcs", "Subversion, svn-aware prompts", "a working copy of its own for the next svn command", protect=False),
    _s(".bzr", "vcs", "Breezy/Bazaar", "branch config and plugins of the next bzr command", protect=False),
    _s("_darcs", "vcs", "Darcs", "prefs/defaults and posthooks run by the next darcs command", protect=False),
    _s(".pijul", "vcs", "Pijul", "repository config of the next pijul command", protect=False),
    _s(".fslckout", "vcs", "Fossil", "a checkout database of its own for the next fossil command", protect=False),
    _s("CVS", "vcs", "CVS", "Root and Repository files point the next cvs command elsewhere", protect=False),
    _s(".gitmodules", "git", "git submodule, clone --recursive", "submodule URLs and paths fetched and checked out"),
    _s(".lfsconfig", "git", "git-lfs", "the LFS endpoint: your LFS credentials are sent where it says"),
    _s(".gitattributes", "git", "git", "filters and diff drivers (with config), `-diff` hides a change's content",
       protect=False),
    _s(".gitignore", "git", "git", "a new or changed one hides files from `git status` and review, itself included",
       protect=False),
    _s(".envrc", "shell", "direnv", "shell code run on `cd` (once its path and content were `direnv allow`ed)"),
    _s(".env", "shell", "aider, Gemini CLI, dotenv loaders, mise, direnv's dotenv",
       "an API base URL that sends your real key elsewhere", protect=False),
    _s(".pre-commit-config.yaml", "hooks", "pre-commit (installed hooks)", "hook commands run on `git commit`"),
    _s(".husky", "hooks", "husky (core.hooksPath=.husky)", "hook scripts run on `git commit`"),
    _s("lefthook.yml", "hooks", "lefthook", "hook commands run on `git commit`"),
    _s(".lefthook.yml", "hooks", "lefthook", "hook commands run on `git commit`"),
    _s("lefthook-local.yml", "hooks", "lefthook", "local hook commands run on `git commit`", protect=False),
    _s(".lefthook-local.yml", "hooks", "lefthook", "local hook commands run on `git commit`", protect=False),
    _s(".lefthook", "hooks", "lefthook", "script files its hooks run on `git commit`", protect=False),
    _s(".githooks", "hooks", "git with core.hooksPath=.githooks (a common setup)", "hook scripts run on `git commit`",
       protect=False),
    _s("mise.toml", "toolchain", "mise", "tasks, hooks and env run in the directory (after `mise trust`)", protect=False),
    _s(".mise.toml", "toolchain", "mise", "tasks, hooks and env run in the directory (after `mise trust`)", protect=False),
    _s("mise.*.toml", "toolchain", "mise", "per-environment and local configs: tasks, hooks and env (after `mise trust`)",
       protect=False),
    _s(".mise.*.toml", "toolchain", "mise", "per-environment and local configs: tasks, hooks and env (after `mise trust`)",
       protect=False),
    _s(".mise", "toolchain", "mise", "config.toml and tasks directory (after `mise trust`)", protect=False),
    _s(".tool-versions", "toolchain", "asdf, mise", "tool versions installed by plugin scripts", protect=False),
    _s(".sdkmanrc", "toolchain", "SDKMAN! (sdkman_auto_env)", "candidates installed and switched on `cd`", protect=False),
    _s("rust-toolchain", "toolchain", "rustup", "the toolchain every cargo and rustc runs", protect=False),
    _s("rust-toolchain.toml", "toolchain", "rustup", "the toolchain (a `path` runs binaries from anywhere)",
       protect=False),
    _s(".cargo", "toolchain", "cargo", "config.toml: a target runner, rustc-wrapper or alias runs on `cargo build`",
       protect=False),
    _s("gradlew", "toolchain", "Gradle wrapper", "the script run as `./gradlew`", protect=False),
    _s("gradlew.bat", "toolchain", "Gradle wrapper", "the script run as `gradlew` on Windows", protect=False),
    _s("gradle-wrapper.properties", "toolchain", "Gradle wrapper",
       "distributionUrl: the Gradle downloaded and run by `./gradlew` (and by IDEs on import)", protect=False),
    _s("gradle-wrapper.jar", "toolchain", "Gradle wrapper", "the program `./gradlew` runs", protect=False),
    _s("mvnw", "toolchain", "Maven wrapper", "the script run as `./mvnw`", protect=False),
    _s("mvnw.cmd", "toolchain", "Maven wrapper", "the script run as `mvnw` on Windows", protect=False),
    _s(".mvn", "toolchain", "Maven, its wrapper", "extensions.xml loads plugins, jvm.config and maven.config options, "
       "the wrapper's distributionUrl", protect=False),
    _s(".bazelrc", "toolchain", "Bazel", "startup and build options (a `--run_under`, a repository override)",
       protect=False),
    _s(".bazelversion", "toolchain", "Bazelisk", "the Bazel downloaded and run", protect=False),
    _s(".bazeliskrc", "toolchain", "Bazelisk", "BAZELISK_BASE_URL: where the Bazel run is downloaded from", protect=False),
    _s("tools/bazel", "toolchain", "Bazelisk", "a wrapper script Bazelisk runs instead of Bazel", protect=False),
    _s(".nvmrc", "toolchain", "nvm, fnm, Volta and others (on `cd` with auto-switching)", "the Node.js version run",
       protect=False),
    _s(".node-version", "toolchain", "fnm, nodenv and others", "the Node.js version run", protect=False),
    _s(".python-version", "toolchain", "pyenv, uv", "the interpreter (or pyenv virtualenv) every `python` runs",
       protect=False),
    _s(".ruby-version", "toolchain", "rbenv, chruby, rvm", "the Ruby every `ruby` runs", protect=False),
    _s(".npmrc", "packages", "npm", "script-shell, registry and git binary used by the next `npm install`"),
    _s(".yarnrc.yml", "packages", "yarn berry", "yarnPath: a script run as yarn itself"),
    _s(".yarnrc", "packages", "yarn 1", "yarn-path: a script run as yarn itself", protect=False),
    _s(".pnpmfile.cjs", "packages", "pnpm", "hooks run on every `pnpm install`"),
    _s("pip.conf", "packages", "pip (inside a virtual environment's root)", "index URL and options of the next install",
       protect=False),
    _s(".pypirc", "packages", "twine, setuptools (only from $HOME)",
       "upload targets (reported, never read from a repo by default)", protect=False),
    _s(".vscode", "editor", "VS Code", "tasks (runOn folderOpen), settings that name interpreters and tools"),
    _s("*.code-workspace", "editor", "VS Code (a workspace file you open)",
       "its tasks, launch configs and settings, like .vscode's", protect=False),
    _s(".idea", "editor", "JetBrains IDEs", "run configurations and tool paths (after the trust prompt)", protect=False),
    _s(".fleet", "editor", "JetBrains Fleet", "run configurations and settings (after the trust prompt)", protect=False),
    _s(".zed", "editor", "Zed", "settings.json names language servers and formatters it runs; tasks.json"),
    _s(".helix", "editor", "Helix", "languages.toml: the language server and formatter commands it runs"),
    _s(".nvim.lua", "editor", "Neovim (exrc)", "Lua run on start in the directory (after the trust prompt)",
       protect=False),
    _s(".nvimrc", "editor", "Neovim (exrc)", "Vim script run on start (after the trust prompt)", protect=False),
    _s(".exrc", "editor", "Vim and Neovim (exrc)", "commands run on start (Vim: without a prompt when `exrc` is set)",
       protect=False),
    _s(".vimrc", "editor", "Vim (exrc)", "Vim script run on start when `exrc` is set", protect=False),
    _s(".lazy.lua", "editor", "lazy.nvim", "plugin specs loaded on start (after the trust prompt)", protect=False),
    _s(".dir-locals.el", "editor", "Emacs", "`eval` forms run when a file is visited (after the safe-local prompt)",
       protect=False),
    _s(".dir-locals-2.el", "editor", "Emacs", "`eval` forms run when a file is visited (after the safe-local prompt)",
       protect=False),
    _s("*.sublime-project", "editor", "Sublime Text", "build systems it runs", protect=False),
    _s(".theia", "editor", "Theia, Gitpod", "tasks and launch configs", protect=False),
    _s(".devcontainer", "editor", "Dev Containers CLI, VS Code", "initializeCommand runs on the host"),
    _s(".devcontainer.json", "editor", "Dev Containers CLI, VS Code", "initializeCommand runs on the host"),
    _s(".gitpod.yml", "editor", "Gitpod", "tasks run in your workspace with your tokens", protect=False),
    _s(".claude", "agent", "Claude Code", "settings hooks and permissions, commands run by the next session"),
    _s(".codex", "agent", "Codex CLI", "project config.toml: model provider, MCP servers, sandbox mode"),
    _s(".gemini", "agent", "Gemini CLI", "settings.json: MCP server commands, tool settings"),
    _s(".qwen", "agent", "Qwen Code", "settings.json: MCP server commands, tool settings", protect=False),
    _s(".mcp.json", "agent", "Claude Code and other MCP clients", "MCP server commands started by the agent", file=True),
    _s(".aider.conf.yml", "agent", "aider", "lint-cmd and test-cmd run after each edit", file=True),
    _s(".aider.model.settings.yml", "agent", "aider", "model settings: extra request parameters and headers, the API base",
       file=True),
    _s(".aider.model.metadata.json", "agent", "aider", "model metadata the next session trusts", file=True),
    _s(".aiderignore", "agent", "aider", "files hidden from the next session", protect=False),
    _s("opencode.json", "agent", "opencode", "providers (base URL: your real key goes there), MCP server commands",
       file=True),
    _s("opencode.jsonc", "agent", "opencode", "providers (base URL: your real key goes there), MCP server commands",
       file=True),
    # Not protected: opencode writes it at every start (.opencode/.gitignore) and fails if it cannot.
    _s(".opencode", "agent", "opencode", "agents, commands and plugins the next session runs", protect=False),
    _s(".cursor", "agent", "Cursor", "rules and mcp.json (after the trust prompt)", protect=False),
    _s(".cursorrules", "agent", "Cursor", _AGENT_RULES, protect=False),
    _s(".windsurf", "agent", "Windsurf", "rules and workflows the next session follows", protect=False),
    _s(".windsurfrules", "agent", "Windsurf", _AGENT_RULES, protect=False),
    _s(".continue", "agent", "Continue", "config: MCP servers and context providers it starts", protect=False),
    _s(".continuerc.json", "agent", "Continue", "config merged into the user's", protect=False),
    _s(".clinerules", "agent", "Cline", "rules and workflows the next session follows", protect=False),
    _s(".roo", "agent", "Roo Code", "rules, modes and MCP servers", protect=False),
    _s(".roomodes", "agent", "Roo Code", "custom modes and their tool permissions", protect=False),
    _s(".kilocode", "agent", "Kilo Code", "rules, workflows and MCP servers", protect=False),
    _s(".kiro", "agent", "Kiro", "steering, specs and agent hooks run on file events", protect=False),
    _s(".amazonq", "agent", "Amazon Q Developer", "rules and mcp.json", protect=False),
    _s(".junie", "agent", "JetBrains Junie", "guidelines the next session follows", protect=False),
    _s(".crush.json", "agent", "Crush", "LSP and MCP server commands it starts", protect=False),
    _s("crush.json", "agent", "Crush", "LSP and MCP server commands it starts", protect=False),
    _s(".goosehints", "agent", "Goose", _AGENT_RULES, protect=False),
    _s(".augment", "agent", "Augment", "rules and guidelines", protect=False),
    _s(".neo", "agent", "neo (the stand-in agent)", "agent configuration"),
    _s(".visvoai", "agent", "visvoai", "agent configuration"),
    _s("AGENTS.md", "agent", "Codex CLI, opencode and others", _AGENT_RULES, protect=False),
    _s("AGENT.md", "agent", "Amp and others", _AGENT_RULES, protect=False),
    _s("CLAUDE.md", "agent", "Claude Code", _AGENT_RULES, protect=False),
    _s("CLAUDE.local.md", "agent", "Claude Code", _AGENT_RULES, protect=False),
    _s("GEMINI.md", "agent", "Gemini CLI", _AGENT_RULES, protect=False),
    _s(".github", "ci", "GitHub Actions, Gitea and Forgejo Actions, CODEOWNERS, Dependabot, Copilot's instructions",
       "workflows and local actions run with the repository's secrets"),
    _s(".gitlab-ci.yml", "ci", "GitLab CI", "pipeline jobs run with the project's secrets"),
    _ci(".gitlab", "GitLab", "CI templates, CODEOWNERS, merge request templates"),
    _ci(".gitea", "Gitea Actions"),
    _ci(".forgejo", "Forgejo Actions"),
    _ci(".circleci", "CircleCI"),
    _ci("Jenkinsfile", "Jenkins"),
    _ci(".travis.yml", "Travis CI"),
    _ci("bitbucket-pipelines.yml", "Bitbucket Pipelines"),
    _ci("azure-pipelines.yml", "Azure Pipelines"),
    _ci("azure-pipelines.yaml", "Azure Pipelines"),
    _ci(".azure-pipelines", "Azure Pipelines"),
    _ci(".buildkite", "Buildkite"),
    _ci(".drone.yml", "Drone"),
    _ci(".woodpecker", "Woodpecker CI"),
    _ci(".woodpecker.yml", "Woodpecker CI"),
    _ci(".woodpecker.yaml", "Woodpecker CI"),
    _ci("appveyor.yml", "AppVeyor"),
    _ci(".appveyor.yml", "AppVeyor"),
    _ci(".cirrus.yml", "Cirrus CI"),
    _ci(".cirrus.star", "Cirrus CI"),
    _ci(".semaphore", "Semaphore"),
    _ci(".tekton", "Tekton (Pipelines as Code)"),
    _ci(".teamcity", "TeamCity (Kotlin DSL)"),
    _ci("bamboo-specs", "Bamboo"),
    _ci(".harness", "Harness"),
    _ci("codefresh.yml", "Codefresh"),
    _ci("cloudbuild.yaml", "Google Cloud Build"),
    _ci("cloudbuild.yml", "Google Cloud Build"),
    _ci("buildspec.yml", "AWS CodeBuild"),
    _ci(".builds", "sourcehut builds"),
    _ci(".build.yml", "sourcehut builds"),
    _ci("CODEOWNERS", "GitHub, GitLab, Gitea, Forgejo, Bitbucket (at the root, docs/, .github/, .gitlab/)",
        "who must approve a change: an edit drops the review you rely on"),
    _s(".sandbox.yaml", "sandbox", "sandbox", "the repository policy layer (applied only once approved)"),
)

BY_NAME = {s.name: s for s in INVENTORY}
_PATTERNS = tuple(s for s in INVENTORY if "*" in s.name)
_PATHS = tuple(s for s in INVENTORY if "/" in s.name and "*" not in s.name)   # matched by their last components
_FOLDED = {names.fold_name(s.name): s for s in INVENTORY if s not in _PATTERNS and s not in _PATHS}


def named(name: str, parent: str = "") -> Surface | None:
    """The surface a file name is on some filesystem (names folded as a Mac or Windows compare
    them: `.GIT`, `.g\u200cit`, `GIT~1` are `.git` there), or None. `parent`: the directory it
    is in, for a surface named by its last two components (tools/bazel)."""
    folded = names.fold_name(name)
    found = _FOLDED.get(folded)
    if found is None and "~" in name:   # an NTFS short name
        found = next((s for s in INVENTORY if "*" not in s.name and "/" not in s.name and names.same(name, s.name)), None)
    if found is None:
        found = next((s for s in _PATTERNS if fnmatch.fnmatchcase(folded, names.fold_name(s.name))), None)
    if found is None and parent:
        tail = names.fold_name(parent.rsplit("/", 1)[-1]) + "/" + folded
        found = next((s for s in _PATHS if tail == "/".join(names.fold_name(p) for p in s.name.split("/")[-2:])), None)
    return found


# What git on the host reads beyond the names above: a git directory found anywhere (a gitfile's
# target, a bare repository, a commondir), a config file in the include graph, a hooks directory or
# a program that config names (launcher/host/gitscan.py).
GIT_READ = Surface(name="git", family="git", tools="git on the host, every git-aware prompt and editor",
                   why="a git directory, or a config file, hooks directory or program git's configuration names: "
                       "code runs from it on the next git command", protect=True)
FILE_PLACEHOLDERS = frozenset(s.name for s in INVENTORY if s.file)
# Read-only at the workspace root whatever the policy says, also when they do not exist yet.
PROTECTED = tuple(s.name for s in INVENTORY if s.protect and s.name != ".git")
# A file a surface includes or runs (launcher/host/includes.py): reported, never protected (it is an
# ordinary file of the tree, which the agent may have to change).
INCLUDED = Surface(name="include", family="ci", tools="the surface that includes or runs it (a CI config, a hook manager, "
                   "a dev container)", why="code that surface runs: a CI job with the repository's secrets, a hook "
                   "on `git commit`", protect=False)

# What git on the host reads from a git directory; with `workspace.git: read-write` only these stay
# read-only (code runs from them), so the index, refs and objects can be changed and hide changes.
GIT_CONTROL = (".git/hooks", ".git/config", ".git/config.worktree", ".git/commondir", ".git/info")
# With `git: read-write`, these two cannot be protected while missing (a mount point would be a
# directory, which breaks git); a planted one changes .git's fingerprint and is reported.
GIT_BY_EXISTENCE = (".git/config.worktree", ".git/commondir")
# The probe proves that each of these is neither writable nor creatable in a read-only .git.
GIT_READS = GIT_CONTROL + (".git/HEAD", ".git/index", ".git/objects", ".git/refs", ".git/packed-refs",
                           ".git/modules", ".git/worktrees", ".git/logs")


def doc_table() -> str:
    """docs/security.md's inventory tables (a test keeps the page equal to this): the families with
    their rules, then every surface."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| family | the rule that closes it | surfaces |", "|---|---|---|"]
    for family, rule in FAMILIES.items():
        count = sum(1 for s in INVENTORY if s.family == family)
        lines.append(f"| {family} | {cell(rule)} | {count} |")
    lines += ["", "| surface | family | tools on your machine that read it | on a `sandbox run`/`down` | what a hostile change does |",
              "|---|---|---|---|---|"]
    for s in INVENTORY:
        where = "protected at the root; reported at any depth" if s.protect else "reported at any depth"
        lines.append(f"| `{s.name}` | {s.family} | {cell(s.tools)} | {where} | {cell(s.why)} |")
    lines.append(f"| a file one of these includes or runs | {INCLUDED.family} | {cell(INCLUDED.tools)} | reported |"
                 f" {cell(INCLUDED.why)} |")
    return "\n".join(lines) + "\n"


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
        parent = path.rsplit("/", 1)[0] if "/" in path else ""
        surface = (INCLUDED if (old or new).startswith("include:") else named(name, parent) or GIT_READ)
        what = "new" if old is None else "removed" if new is None else "changed"
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
