"""Options several commands share, and the one call from the CLI into the pipeline."""

from __future__ import annotations

import gc

import click

from launcher.cli import complete, output
from launcher.cli.checked import REGISTRIES as _REGISTRIES, new_name, registries_option
from launcher.errors import ExitCode

POLICY_HELP = "Preset name (`sandbox presets` lists them) or path to a policy file."
_LAYER_OPTIONS = "sandbox.layer-options"


def _layer_option(ctx, param, value):
    from launcher.policy.trust import normalise_pin

    if param.name == "pin" and value is not None:
        if normalise_pin(value) is None:
            raise click.BadParameter("expected a SHA-256 digest (64 hex digits), as `sandbox check` prints it")
        value = normalise_pin(value)
    ctx.meta.setdefault(_LAYER_OPTIONS, {})[param.name] = value


def layer_options(command):
    """--workspace-mode, --trust-repo-policy and --ignore-repo-policy (compile, run, up, explain), kept in the click
    context where layer_settings reads them, so that commands need not pass them along."""
    command = click.option("--workspace-mode", "workspace_mode", type=click.Choice(["bind", "copy"]), expose_value=False,
                           callback=_layer_option,
                           help="The base policy's workspace.mode: bind (the host directory itself) or copy (a copy; "
                                "changes come back by `sandbox apply`). Later layers can still choose copy.")(command)
    return repo_trust_options(command)


def repo_trust_options(command):
    """--trust-repo-policy and --ignore-repo-policy alone (`sandbox config`: whose repository defaults apply)."""
    command = click.option("--ignore-repo-policy", "ignore_repo", is_flag=True, expose_value=False, callback=_layer_option,
                           help="Do not apply the workspace's .sandbox.yaml (it stays read-only inside).")(command)
    return click.option("--trust-repo-policy", "pin", metavar="SHA256", expose_value=False, callback=_layer_option,
                        help="Apply the workspace's .sandbox.yaml only if its SHA-256 is this (no prompt; CI).")(command)


SETTINGS = "sandbox.settings"   # the resolved defaults (settings.Resolved) of the command being run


class Defaulted(click.Command):
    """A command whose options take their defaults from settings.py (`defaults`: key -> the
    option's flag). Applied once the command line is parsed: the repository's `defaults:` depend on
    the workspace it names, which a default_map, fixed before parsing, cannot know. A flag of this
    version that the command lacks (`up --port` before it exists) is skipped. `instead`: key -> an
    argument that, when given, stands for the flag (explain POLICY, check POLICIES)."""

    def __init__(self, *args, defaults: dict[str, str] | None = None, instead: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.defaults, self.instead = defaults or {}, instead or {}

    def parse_args(self, ctx, args):
        rest = super().parse_args(ctx, args)
        if not ctx.resilient_parsing:
            settle(ctx, self)
        return rest


def _flag_given(ctx, param, instead: str | None) -> bool:
    from click.core import ParameterSource

    if instead and ctx.params.get(instead) not in (None, ()):
        return True   # given as the argument instead
    return ctx.get_parameter_source(param.name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def settle(ctx, command: Defaulted) -> None:
    """Resolve the defaults (flag > environment > repository, approved only > user > built-in),
    put each into its option, and say on stderr which came from where and what was not applied."""
    from launcher.errors import PolicyError, Problem
    from launcher.pipeline import stack
    from launcher.policy import settings
    from launcher.values import visible

    params = {key: next((p for p in command.params if flag in p.opts), None) for key, flag in command.defaults.items()}
    params = {key: p for key, p in params.items() if p is not None}
    given = {key: (command.defaults[key], ctx.params.get(p.name, ctx.meta.get(_AGENT, {}).get(p.name)))
             for key, p in params.items() if _flag_given(ctx, p, command.instead.get(key))}
    names = {p.name for p in command.params}
    workspace = (ctx.params.get("workspace_flag") or ctx.params.get("workspace") or ".") if "workspace" in names else None
    opts = ctx.meta.get(_LAYER_OPTIONS, {})
    resolved = stack.defaults(workspace, flags=given, pin=opts.get("pin"), ignore_repo=bool(opts.get("ignore_repo")))
    ctx.meta[SETTINGS] = resolved
    used = []
    for key, param in params.items():
        setting = resolved.get(key)
        if setting.source in (settings.FLAG, settings.BUILTIN):
            continue
        try:
            value = param.process_value(ctx, setting.value)
        except click.BadParameter as exc:
            raise PolicyError([Problem(file=setting.where, path=key, expected=f"a value {command.defaults[key]} takes",
                                       found=repr(settings.shown(setting)), hint=exc.format_message())]) from None
        if param.expose_value:
            ctx.params[param.name] = value
        used.append(f"{key} {settings.shown(setting)} ({setting.source} {setting.where})")
    for note in resolved.ignored:   # values from a repository's file: never raw on the terminal
        output.status(f"warning: {visible(note, keep_lines=False)}")
    if used:
        output.status(visible("defaults: " + "; ".join(used), keep_lines=False))


def origins() -> tuple[tuple[str, str, str], ...]:
    """(timeout|session|idle, source, file) of each limit a settings file or variable gave this command."""
    from launcher.policy import settings

    resolved = click.get_current_context().meta.get(SETTINGS)
    if resolved is None:
        return ()
    return tuple((s.key, s.source, s.where) for s in resolved.settings
                 if s.key in ("timeout", "session", "idle") and s.source not in (settings.FLAG, settings.BUILTIN))


def show_layers_option(command):
    return click.option("--show-layers", is_flag=True, expose_value=False, callback=_layer_option,
                        help="Show on stderr which layer (base, org, user, repository, flags) decided each field.")(command)


def egress_options(command):
    """--allow and --egress-network, shared by compile, run and up."""
    command = click.option("--egress-network", metavar="NETWORK",
                           help="Proxy mode: attach the proxy to this existing Docker network instead of a new bridge "
                                "(air-gapped hosts, tests).")(command)
    command = click.option("--allow-private", multiple=True, metavar="HOST", expose_value=False, callback=_private,
                           help="Like --allow, for an internal host whose address is private (10/8, 172.16/12, "
                                "192.168/16, CGNAT, loopback): such addresses are refused for every other rule.")(command)
    command = registries_option(command)
    return click.option("--allow", multiple=True, metavar="HOST",
                        help="Proxy mode: add HOST (or *.suffix, host:port) to the base policy's network.allow; "
                             "repeatable. Later layers can still narrow it.")(command)


_PRIVATE = "sandbox.allow-private"


def _private(ctx, param, value):
    ctx.meta[_PRIVATE] = tuple({"host": host, "private": True} for host in value)


_AGENT = "sandbox.agent"


def _agent_option(ctx, param, value):
    ctx.meta.setdefault(_AGENT, {})[param.name] = value


def agent_options(command):
    """--agent and the model key's reference (run, up, compile)."""
    for flag, name, metavar, text in reversed((
            ("--agent", "agent", "NAME", "An agent profile (`sandbox agents`): its image, environment and home files."),
            ("--model-key-env", "key_env", "VAR", "The host variable holding the agent's model API key or "
                                                  "subscription token: the sandbox reaches that model API alone, "
                                                  "through the proxy, which alone holds it (the sandbox gets an "
                                                  "endpoint and, for a login, placeholders; a policy without a "
                                                  "network gets proxy mode for it, unless network.model: false)."),
            ("--model-key-file", "key_file", "FILE", "Like --model-key-env, from a file (Codex's ChatGPT sign-in: "
                                                     "~/.codex/auth.json, refreshed on the host)."),
            ("--model-key-kind", "kind", "KIND", "api-key, oauth (Claude Code: sk-ant-oat01-… from `claude setup-token`) "
                                                 "or chatgpt (Codex's auth.json): a subscription login the proxy "
                                                 "brokers. By default recognised by the key's shape; `sandbox agents` "
                                                 "lists each agent's logins."),
            ("--model-upstream", "upstream", "URL", "The model API to send the agent to instead of the profile's "
                                                     "(a company gateway)."))):
        command = click.option(flag, name, metavar=metavar, expose_value=False, callback=_agent_option, help=text,
                               shell_complete=complete.agents if flag == "--agent" else None)(command)
    return command


def agent_choice():
    """The --agent options as the pipeline's AgentChoice, or None."""
    from launcher.pipeline.pipeline import AgentChoice

    opts = click.get_current_context().meta.get(_AGENT, {})
    if not opts.get("agent"):
        if opts.get("key_env") or opts.get("key_file") or opts.get("upstream") or opts.get("kind"):
            raise click.UsageError("--model-key-env, --model-key-file, --model-key-kind and --model-upstream go with --agent")
        return None
    if opts.get("key_env") and opts.get("key_file"):
        raise click.UsageError("--model-key-env and --model-key-file exclude each other")
    if opts.get("kind") and not (opts.get("key_env") or opts.get("key_file")):
        raise click.UsageError("--model-key-kind goes with --model-key-env or --model-key-file")
    resolved = click.get_current_context().meta.get(SETTINGS)   # ca_files: the user's, for a build of its image
    cas = resolved.get("ca_files").value if resolved is not None else None
    return AgentChoice(name=opts["agent"], key_env=opts.get("key_env") or "", key_file=opts.get("key_file") or "",
                       ca_files=tuple(cas or ()),
                       upstream=opts.get("upstream") or "", kind=opts.get("kind") or "")


_SURFACES = (f"Exit {ExitCode.SURFACES_CHANGED} when the agent left new or changed files that host tools run or trust "
             "(git, direnv, editors, hooks, agents' config; symlinks out of the workspace)")


def strict_option(command):
    return click.option("--strict", is_flag=True,
                        help=f"{_SURFACES}, and refuse (exit 120) when a ceiling removes an explicit --allow or "
                             "--timeout. On by default under CI=true.")(command)


def down_strict_option(command):
    return click.option("--strict", is_flag=True, help=f"{_SURFACES}. On by default under CI=true.")(command)


_COMMAND = "sandbox.command"
# up's option (click's parameter name) for each option a sandbox stores (launcher/launch/upoptions.py FIELDS)
_STORED = {"policy": "policy", "workspace_mode": "workspace_mode", "pin": "pin", "ignore_repo": "ignore_repo",
           "allow": "allow", "allow_private": "allow_private", "registries": "registries", "egress_network": "egress_network", "timeout": "session",
           "idle": "idle", "ports": "ports", "agent": "agent", "key_env": "key_env", "key_file": "key_file",
           "kind": "kind", "upstream": "upstream"}


class WithCommand(Defaulted):
    """A command that takes `-- CMD ARGS` after its own arguments (up: WORKSPACE is optional, so click
    alone would take CMD for it): what follows `--` is kept aside for trailing_command. Its options'
    defaults come from settings.py, as Defaulted's."""

    def parse_args(self, ctx, args):
        if "--" in args:
            at = args.index("--")
            ctx.meta[_COMMAND], args = tuple(args[at + 1:]), args[:at]
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx):
        return super().collect_usage_pieces(ctx) + ["[-- CMD [ARGS]...]"]


def trailing_command() -> tuple[str, ...]:
    return click.get_current_context().meta.get(_COMMAND, ())


def given_options() -> frozenset[str]:
    """The stored options (upoptions.FIELDS) this command line gives, and "workspace" when it gives one;
    a running sandbox's own fill the rest."""
    ctx = click.get_current_context()
    defaulted = (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP, None)
    given = {field for param, field in _STORED.items() if ctx.get_parameter_source(param) not in defaulted}
    if any(ctx.get_parameter_source(p) not in defaulted for p in ("workspace", "workspace_flag")):
        given.add("workspace")   # not stored, but without it `up --name N` attaches to N's own
    return frozenset(given)


def either(argument, flag, name: str, default, same=lambda a, b: False):
    """A value that may be given as an argument or as its --flag (`name`), not both (unless `same`
    says the two mean one thing): a usage error, exit 2."""
    if argument is not None and flag is not None and not same(argument, flag):
        raise click.UsageError(f"{name.upper()} given twice: as an argument and as --{name}; give one")
    return flag if flag is not None else argument if argument is not None else default


def same_directory(a: str, b: str) -> bool:
    import os

    return os.path.realpath(a) == os.path.realpath(b)


def json_option(text: str, *, lines: bool = False):
    """--json: the command's answer as JSON on stdout, in the envelope (output.envelope); errors too,
    which the group's handler writes (`lines`: a stream, one object per line)."""
    def asked(ctx, param, value):
        if value:
            ctx.meta[output.JSON_COMMAND], ctx.meta[output.JSON_LINES] = ctx.command.name, lines
        return value
    # eager: known before any other value is checked, so that a usage error found then is JSON too
    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=asked, help=text)


def _named(ctx, param, value):
    if value is not None:
        ctx.meta[output.NAME] = value
    return value


def name_argument(kinds: tuple[str, ...] = complete.SANDBOXES, required: bool = True):
    """NAME of a sandbox (or of a copy: kinds complete.COPIES), completed from the engine; kept
    for the envelope of an error."""
    return click.argument("name", required=required, shell_complete=complete.names(kinds), callback=_named)


def policy_flag(default: str = "untrusted", text: str = POLICY_HELP):
    """--policy/-p for a command that also takes the policy as an argument."""
    return click.option("--policy", "-p", "policy_flag", default=None, metavar="TEXT", show_default=default,
                        help=text, shell_complete=complete.presets)


def workspace_flag(command):
    """-w/--workspace for a command that also takes the workspace as an argument."""
    return click.option("--workspace", "-w", "workspace_flag", default=None, type=click.Path(file_okay=False),
                        show_default=".", help="Host directory the agent works on (or give it as WORKSPACE).")(command)


def sandbox_name(ctx, param, value):
    """--name of a sandbox to create (new_name), kept for the envelope of an error."""
    return _named(ctx, param, new_name(ctx, param, value))


def _ask(text: str) -> bool:
    click.echo(text, err=True)
    try:
        return click.confirm("Apply this repository policy?", default=False, err=True)
    except click.exceptions.Abort:
        return False


def layer_settings(*, allow: tuple[str, ...] = (), timeout: str | None = None, session: str | None = None,
                   idle: str | None = None, approved_only: bool = False, strict: bool = False):
    """The pipeline's LayerOptions from this command's flags. An unapproved repository policy is
    asked about only in a terminal, never in CI."""
    from launcher.host import host
    from launcher.pipeline.pipeline import LayerOptions

    opts = click.get_current_context().meta.get(_LAYER_OPTIONS, {})
    if opts.get("pin") and opts.get("ignore_repo"):
        raise click.UsageError("--trust-repo-policy and --ignore-repo-policy exclude each other")
    ask = _ask if host.is_interactive() and not approved_only else None
    registries = click.get_current_context().meta.get(_REGISTRIES, ())
    return LayerOptions(allow=allow, registries=registries, timeout=timeout, session=session, idle=idle, pin=opts.get("pin"), ignore_repo=bool(opts.get("ignore_repo")),
                        ask=ask, approved_only=approved_only, strict=strict, workspace_mode=opts.get("workspace_mode"),
                        agent=agent_choice(), origins=origins())


def tell(layered) -> None:
    """The layers' notes, and the layer table when --show-layers asked for it."""
    from launcher.policy import layers

    from launcher.values import visible

    for note in layered.notes:   # values from a repository's file: never raw on the terminal
        click.echo(f"sandbox: {visible(note, keep_lines=False)}", err=True)
    if click.get_current_context().meta.get(_LAYER_OPTIONS, {}).get("show_layers"):
        click.echo(layers.layers_table(layered.effective), err=True)


def request(policy_ref: str, workspace: str, command: tuple[str, ...] = (), *, timeout: str | None = None,
            session: str | None = None, idle: str | None = None, allow: tuple[str, ...] = (), strict: bool = False,
            **how):
    """The library's session.Request from this command's flags (`how`: name, egress_network,
    attest, fresh)."""
    from launcher.launch.session import Request

    allow = tuple(allow) + click.get_current_context().meta.get(_PRIVATE, ())
    return Request(policy=policy_ref, workspace=workspace, command=tuple(command),
                   options=layer_settings(allow=allow, timeout=timeout, session=session, idle=idle, strict=strict),
                   **how)


def session(timings=None):
    """launcher.launch.session, its imports (the pipeline's) made like the commands' (launcher/cli/__init__.py);
    the CLI's imports phase ends here."""
    gc.disable()
    try:
        from launcher.launch import session
    finally:
        gc.freeze()
        gc.enable()
    if timings is not None:
        from launcher.timings import FIRST

        timings.since(FIRST, timings.origin)
    return session


def plan(policy_ref: str, workspace: str, command: tuple[str, ...], *, kind: str = "run", name: str | None = None,
         timeout: str | None = None, allow: tuple[str, ...] = (), egress_network: str | None = None,
         strict: bool = False, timings=None, launched: bool = True):
    """The pipeline for a command that writes or checks a sandbox's files (launched=False: files
    for another tool); says its notes and warnings."""
    planned = session(timings).prepare(request(policy_ref, workspace, command, timeout=timeout, allow=allow, strict=strict,
                                  name=name, egress_network=egress_network),
                          output.Console(), kind=kind, launched=launched, timings=timings)
    if click.get_current_context().meta.get(_LAYER_OPTIONS, {}).get("show_layers"):
        from launcher.policy import layers

        click.echo(layers.layers_table(planned.layered.effective), err=True)
    return planned


def timings_option(command):
    return click.option("--timings", "timings", is_flag=True,
                        help="Print on stderr how long each launch phase took (also SANDBOX_TIMINGS=1).")(command)


def timeline(asked: bool):
    """A Timeline from the CLI's first import on, when --timings or SANDBOX_TIMINGS=1 asked for one."""
    from launcher import timings
    from launcher.host import host

    if not (asked or host.timings_requested()):
        return None
    return timings.Timeline(origin=timings.IMPORTED)
