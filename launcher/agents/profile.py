"""An agent profile: the frozen data that says how one agent CLI is installed, wired to its
model API and seeded in its home; `check` refuses what a profile may never carry."""


from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

PLACEHOLDER_KEY = "sandbox-placeholder-key"   # what a CLI holds where it insists on a key: never a real one
ENDPOINT = "{endpoint}"                        # in env and home files: the value of SANDBOX_ENDPOINT_<secret>


@dataclass(frozen=True, kw_only=True)
class Package:
    registry: str          # "npm" | "pypi"
    name: str
    version: str           # exact: the image is the pin


@dataclass(frozen=True, kw_only=True)
class ModelWiring:
    """How the CLI reaches its model API through a proxy-injected secret (launcher/policy/inject.py):
    the sandbox gets SANDBOX_ENDPOINT_<SECRET> = http://proxy:port, the proxy adds `header` toward
    `upstream`. `env` and `home_files` values may contain {endpoint}."""

    secret: str = "model"                              # the policy's secrets[].name
    api: str                                           # anthropic-messages | openai-responses | openai-chat | gemini
    upstream: str                                      # https://host, what the proxy forwards to
    header: str                                        # e.g. "x-api-key: {value}"
    env: Mapping[str, str] = field(default_factory=dict)
    # The CLI refuses to start without a key in this variable; the sandbox gives it PLACEHOLDER_KEY
    # and the proxy replaces the header on the way out. Its name is secret-shaped (the probe's
    # env.secrets check refuses it today): see each profile for the alternative that avoids it.
    key_env: str | None = None
    # The verified alternative: the CLI reads the placeholder from these home files instead, and no
    # secret-shaped variable enters the sandbox (each profile says what that costs).
    key_files: Mapping[str, str] = field(default_factory=dict)
    home_files: Mapping[str, str] = field(default_factory=dict)   # relative to $HOME -> content
    login: str = ""    # a subscription login's reader (SecretPolicy.login); "" a plain key
    path: str = ""     # the upstream paths the endpoint forwards (SecretPolicy.path); "" all


@dataclass(frozen=True, kw_only=True)
class AgentProfile:
    name: str
    summary: str
    image: str | None                  # images/agents/<image>; None: the plain agent image
    package: Package | None
    command: str                       # the CLI on PATH
    headless: tuple[str, ...]          # a non-interactive run; "{task}" is the task
    interactive: tuple[str, ...] = ()  # the CLI in a terminal (sandbox up), verified through a pty
    # A headless run continuing the last session in this workspace: it needs a kept home
    # (home.mode volume) and the same workspace.target (each CLI files sessions by working directory).
    resume: tuple[str, ...] = ()
    exec_tmp: bool = False             # it loads native code it unpacks into $TMPDIR: /tmp without noexec
    home_paths: tuple[str, ...]        # what it writes under $HOME (relative), for the writable home
    # Written into the home only when missing (a persisted home keeps the CLI's own later state):
    # what lets it start without first-run dialogs. ModelWiring.home_files are written every run.
    seed_files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)   # always set (no secrets, no host values)
    model: ModelWiring | None = None
    # What the CLI reads as its own config from the workspace: planted by an agent, it acts when the
    # user later runs the same CLI on the host (hooks, MCP servers, base URLs), so it must stay protected.
    workspace_config: tuple[str, ...] = ()
    # The variables through which it trusts extra CAs (verified against a private-CA HTTPS stand-in):
    # "extra" takes only the added certificates (NODE_EXTRA_CA_CERTS), "bundle" replaces the system
    # store, so it needs the system CAs plus the added ones (SSL_CERT_FILE).
    ca_env: Mapping[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()        # network.allow it needs in proxy mode besides the model endpoint
    blocked: tuple[str, ...] = ()      # hosts (shell patterns) it still tries with its settings: stay blocked
    verified: str = ""                 # what was run for real, with which version

    def environment(self, endpoint: str | None = None, key_in_file: bool = False) -> dict[str, str]:
        """The variables the sandbox gets: the profile's, then the model wiring's with {endpoint}
        (and the placeholder key, unless it goes into a home file)."""
        out = dict(self.env)
        if self.model is not None and endpoint is not None:
            out.update({k: v.replace(ENDPOINT, endpoint) for k, v in self.model.env.items()})
            if self.model.key_env and not (key_in_file and self.model.key_files):
                out[self.model.key_env] = PLACEHOLDER_KEY
        return out

    def home_files(self, endpoint: str | None = None, key_in_file: bool = False) -> dict[str, str]:
        """Files to write into the home before the CLI starts (relative path -> content): the seeds
        (only where missing), then the model wiring's files."""
        files = dict(self.seed_files)
        if self.model is not None and endpoint is not None:
            files |= dict(self.model.home_files) | (dict(self.model.key_files) if key_in_file else {})
        return {path: text.replace(ENDPOINT, endpoint or ENDPOINT) for path, text in files.items()}

    def secret_entry(self, key_env: str) -> dict[str, str]:
        """The policy's secrets entry for this agent's model key, read from the host variable key_env."""
        if self.model is None:
            raise ValueError(f"agent {self.name} has no model API to inject a key for")
        return {"name": self.model.secret, "env": key_env, "upstream": self.model.upstream, "header": self.model.header}

    def endpoint_var(self) -> str | None:
        from launcher.policy.inject import endpoint_var

        return endpoint_var(self.model.secret) if self.model else None


def check(profile: AgentProfile) -> AgentProfile:
    """Profiles are data the launcher trusts: refuse what a profile may never carry."""
    from launcher.policy import secrets

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", profile.name):
        raise ValueError(f"agent profile name {profile.name!r}")
    env = dict(profile.env) | (dict(profile.model.env) if profile.model else {})
    for name, value in env.items():
        if secrets.secret_name(name) or secrets.secret_value(value):
            raise ValueError(f"agent {profile.name}: {name} looks like a secret; profiles never carry one")
    files = tuple(profile.model.home_files) + tuple(profile.model.key_files) if profile.model else ()
    for path in profile.home_paths + files + tuple(profile.seed_files):
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"agent {profile.name}: home path {path!r} must stay inside $HOME")
    return profile
