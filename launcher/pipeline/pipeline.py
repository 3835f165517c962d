"""The one path from a policy reference to a LaunchPlan, as docs/architecture.md draws it:
load the base ─▶ layers after it (org, user, repository, git, flags) ─▶ host facts ─▶ compile.
The CLI, the selftest and `sandbox check` all go through here."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable

from launcher.engine import images
from launcher.errors import PolicyError, Problem
from launcher.host import host, hostfacts, hostpaths, imagebuild, workspaces
from launcher.host.engineid import EngineFacts
from launcher.host.hostfacts import HostFacts
from launcher.host.statefiles import StateFile
from launcher.pipeline import stack
from launcher.plan import compiler, lifetime
from launcher.plan.plan import LaunchPlan
from launcher.policy import registries
from launcher.policy.model import Runtime, WorkspaceMode
from launcher.policy.policy import with_allowed
from launcher.timings import Timeline, timed


@dataclass(frozen=True, kw_only=True)
class LayerOptions:
    """How the repository layer is treated, and what the command line adds."""

    allow: tuple[str, ...] = ()          # --allow: widens the base only; later layers still narrow it
    registries: tuple[str, ...] = ()     # --registries (or the setting): read-only registry rules on the base, likewise
    timeout: str | None = None           # run's --timeout: a layer like any other (it can only shorten)
    session: str | None = None           # up's --timeout (limits.session), likewise
    idle: str | None = None              # up's --idle (limits.idle), likewise
    pin: str | None = None               # --trust-repo-policy
    ignore_repo: bool = False            # --ignore-repo-policy
    ask: Callable[[str], bool] | None = None   # asked about an unapproved repository policy (a terminal)
    approved_only: bool = False          # never ask; apply a repository policy only if approved
    strict: bool = False                 # like CI=true: an explicit request a ceiling removed is an error
    workspace_mode: str | None = None    # --workspace-mode: the base's workspace.mode (layers may still say copy)
    agent: "AgentChoice | None" = None   # --agent and the model key's reference
    # (timeout|session|idle, source, file) of a limit above that a settings file gave (settings.py):
    # a ceiling of that file's kind, not an explicit request of the command line
    origins: tuple[tuple[str, str, str], ...] = ()
    # `sandbox egress` on a running `up` sandbox (launcher/host/rulechanges.py): entries added like
    # --allow (never stored as its options), and HOST or HOST:PORT taken out after every layer
    added: tuple = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AgentChoice:
    name: str
    key_env: str = ""        # --model-key-env: the host variable holding the model API key
    key_file: str = ""       # --model-key-file
    upstream: str = ""       # --model-upstream: instead of the profile's API (a gateway, a test's stand-in)
    kind: str = ""           # --model-key-kind: api-key or a subscription login; "" recognises it by its shape
    ca_files: tuple[str, ...] = ()   # trusted while its image is built when missing (settings' ca_files; else the host's)

    @functools.cached_property   # once: it reads the key to tell its kind (frozen: written to __dict__ directly)
    def profile(self):
        """The agent's profile, wired for the model key's kind (agents/logins.py)."""
        from launcher import agents
        from launcher.agents import logins

        try:
            profile = agents.get(self.name)
        except KeyError as exc:
            raise PolicyError([Problem(file="command line", path="--agent", expected="an agent profile",
                                       found=repr(self.name), hint=str(exc).strip("'\""))]) from None
        if not self.keyed:
            return profile
        kind = self.login_kind
        try:
            return logins.applied(profile, kind)
        except ValueError as exc:
            raise PolicyError([Problem(file="command line", path="--model-key-kind", expected="a login the proxy can broker",
                                       found=repr(kind), hint=str(exc))]) from None

    @functools.cached_property
    def login_kind(self) -> str:
        """--model-key-kind's, else the kind the key's shape says ("" without a key): what `up` stores,
        so that attaching needs no key."""
        from launcher import agents
        from launcher.agents import logins

        if not self.keyed or self.kind:
            return self.kind
        try:   # the value only tells its kind (never kept); not there yet: the launch says so
            value = host.read_secret("model", self.key_env, self.key_file)
        except PolicyError:
            value = None
        return logins.recognise(agents.get(self.name), value)

    @property
    def keyed(self) -> bool:
        return bool(self.key_env or self.key_file)

    def image(self, fallback: str) -> str:
        return images.agent_profile_image(self.profile.image).tag if self.profile.image else fallback


@dataclass(frozen=True, kw_only=True)
class Planned:
    layered: stack.Stack     # the effective policy and the notes the user should hear
    facts: HostFacts
    plan: LaunchPlan
    # What the plan binds from the state directory (placeholders, the CA store): compiling wrote none;
    # a launch or a command's output step makes them (statefiles.write).
    files: tuple[StateFile, ...] = ()

    @property
    def policy(self):
        return self.layered.effective.policy


def layered(ref: str, workspace: str, options: LayerOptions = LayerOptions(),
            timings: Timeline | None = None) -> stack.Stack:
    """The effective policy for `ref` on `workspace`: the base, then every layer after it. The
    workspace's real path is resolved here, once: every later stage takes it from the Stack."""
    real = hostpaths.existing_workspace(workspace)
    with timed(timings, "load"):
        base = stack.load_base(ref)
    policy = registries.with_registries(base.policy, registries.names(options.registries)) if options.registries \
        else base.policy
    policy = with_allowed(policy, options.allow + options.added) if options.allow or options.added else policy
    if options.workspace_mode:
        policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode(options.workspace_mode)))
    if options.agent:
        from launcher.agents.wiring import with_agent

        choice = options.agent
        policy = with_agent(policy, choice.profile, choice.image(policy.image), key_env=choice.key_env,
                            key_file=choice.key_file, upstream=choice.upstream)
    with timed(timings, "layers"):
        result = stack.build(policy, base, real, timeout=options.timeout, session=options.session,
                             idle=options.idle, pin=options.pin,
                             ignore_repo=options.ignore_repo, ask=options.ask, approved_only=options.approved_only,
                             strict=options.strict, origins=options.origins)
    if options.agent:
        from launcher.agents.wiring import model_key_kept

        model_key_kept(result.effective.policy, options.agent.keyed,
                       {d.field: d.decided_by for d in result.effective.decisions})
    if options.removed:
        result = without(result, options.removed)
    return result


def without(result: stack.Stack, removed: tuple[str, ...]) -> stack.Stack:
    """The effective policy with the allow rules of each HOST (every port) or HOST:PORT (that port)
    taken out: only ever narrower, so after every layer."""
    from launcher.policy.allowlist import taken_out

    policy = result.effective.policy
    allow = taken_out(policy.network.allow, removed)
    policy = replace(policy, network=replace(policy.network, allow=allow))
    return replace(result, effective=replace(result.effective, policy=policy))


def facts_for(policy, workspace: str, launched: bool = True) -> HostFacts:
    return facts_and_files(policy, hostpaths.workspace_real(workspace), launched)[0]


def facts_and_files(policy, workspace: str, launched: bool = True, engine: EngineFacts | None = None,
                    git_read: tuple | None = None) -> tuple[HostFacts, tuple[StateFile, ...]]:
    """The host facts (with the engine's, when it was asked), and the state files they name
    (nothing written: statefiles.write does). `workspace`: its real path (Stack.workspace);
    `git_read`: what the layers read of its git configuration (Stack.git_read)."""
    shared = workspaces.placeholders(workspace)   # other sandboxes' mount points
    config, git = workspaces.config_placeholder(), workspaces.git_placeholder()
    facts = hostfacts.gather(policy, workspace, images.probe_volume_name(), images.proxy_image().tag, placeholders=shared,
                             config_placeholder=config.path, git_placeholder=git.path, launched=launched,
                             git_read=git_read)
    if engine is not None:
        facts = replace(facts, engine=engine)
    if launched:
        facts = replace(facts, probe_dir=_probe_dir())
    store = _ca_store(facts)
    if store:
        facts = replace(facts, ca_store=(store[0].path, store[1].path))
    bump = _bump_store(policy, facts)
    if bump:
        facts = replace(facts, bump_store=(bump[0].path, bump[1].path))
        store = (*store, *bump) if facts.nonce else store   # written for a launch only
    seccomp = engine_seccomp(facts)
    if seccomp:
        facts = replace(facts, seccomp_profile=seccomp[0].path)
    if not launched and policy.runtime is Runtime.GVISOR:   # files for another tool name a copy of the profile
        from launcher.plan import seccompfiles

        seccomp += (seccompfiles.gvisor_profile(),)
    return facts, (config, git, *store, *seccomp)


def _probe_dir() -> str:
    """The launcher's own copy of the probe files on this host, for an engine daemon on this host
    (it binds that very directory); "" for the shared probe volume: another engine, or
    SANDBOX_PROBE_VOLUME=1 (the volume's path, as an engine elsewhere takes it)."""
    from launcher.engine import engine
    from launcher.host import probedir

    if host.probe_volume_only():
        return ""
    if not probedir.engine_is_local(host.engine_socket(engine.DEFAULT_SOCKET)):
        return ""
    return probedir.path(images.probe_version())


def engine_seccomp(facts: HostFacts) -> tuple[StateFile, ...]:
    """The seccomp profile file of a plan whose engine takes one only as a file, built from that
    engine's default (its dialect's seccomp_default; none for Docker, or when that default cannot be
    read: the compiler refuses that plan)."""
    from launcher.plan import dialects, seccompfiles

    dialect = dialects.of(facts.engine.kind)
    if not dialect.seccomp_default:
        return ()
    profile = seccompfiles.engine_profile(host.seccomp_profile_text(dialect.seccomp_default), dialect.name)
    return (profile,) if profile else ()


def _ca_store(facts: HostFacts) -> tuple[StateFile, ...]:
    """The files for policy.ca_certificates, from the usable ones the host facts read (the compiler
    refuses the rest); none without one."""
    from launcher.plan import trustfiles

    pems = [ca.pem for ca in facts.ca_certs]
    return trustfiles.store_files("".join(pems)) if any(pems) else ()


def _bump_store(policy, facts: HostFacts) -> tuple[StateFile, ...]:
    """With rules per request: this launch's own CA files (ca_certificates' plus, at start, the
    proxy's CA: launcher/egress/bump.py); none without an http: rule."""
    from launcher.plan import trustfiles

    if not any(r.http for r in policy.network.allow):
        return ()
    return trustfiles.store_files("".join(ca.pem for ca in facts.ca_certs), launch=facts.nonce or "unlaunched")


def compiled(result: stack.Stack, workspace: str, command: tuple[str, ...] = (), *, kind: str = "run",
             name: str | None = None, egress_network: str | None = None, agent: AgentChoice | None = None,
             timings: Timeline | None = None, launched: bool = True, engine: EngineFacts | None = None) -> Planned:
    """Host facts and the compiled plan for an effective policy; raises PolicyError (exit 120).
    `engine`: the facts of the engine that runs it (None: not asked; a rootful engine assumed).
    With `agent`, the command runs behind the profile's start-up wrapper (its home files).
    launched=False: files for another tool, the same bytes on every compile (no nonce, no pid)."""
    policy = imagebuild.protected(result.effective.policy)   # a build's Dockerfile: read-only inside
    real = result.workspace or hostpaths.workspace_real(workspace)   # a Stack made elsewhere (check) has none
    with timed(timings, "host facts"):
        facts, files = facts_and_files(policy, real, launched, engine, result.git_read)
    if agent and command:
        from launcher.agents.wiring import wrapped

        command = wrapped(agent.profile, command, agent.keyed)[1]
    with timed(timings, "compile"):
        return Planned(layered=result, facts=facts, files=files, plan=compiler.compile_policy(
            policy, facts, command=command, kind=kind, name=name, egress_network=egress_network,
            ceiling=lifetime.ceiling(result.effective), **({"profile": agent.name} if agent else {})))


def plan(ref: str, workspace: str, command: tuple[str, ...] = (), options: LayerOptions = LayerOptions(),
         **how) -> Planned:
    """Load, layer, gather and compile (`how`: kind, name, egress_network, as for `compiled`)."""
    return compiled(layered(ref, workspace, options), workspace, command, **how)
