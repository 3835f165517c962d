"""Options several commands share, and the one call from the CLI into the pipeline."""

from __future__ import annotations

import gc
import re

import click

from launcher.cli import complete, output
from launcher.errors import ExitCode

POLICY_HELP = "Preset name (`sandbox presets` lists them) or path to a policy file."
_LAYER_OPTIONS = "sandbox.layer-options"


def _layer_option(ctx, param, value):
    from launcher.trust import normalise_pin

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
    command = click.option("--ignore-repo-policy", "ignore_repo", is_flag=True, expose_value=False, callback=_layer_option,
                           help="Do not apply the workspace's .sandbox.yaml (it stays read-only inside).")(command)
    return click.option("--trust-repo-policy", "pin", metavar="SHA256", expose_value=False, callback=_layer_option,
                        help="Apply the workspace's .sandbox.yaml only if its SHA-256 is this (no prompt; CI).")(command)


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
    from launcher.pipeline import AgentChoice

    opts = click.get_current_context().meta.get(_AGENT, {})
    if not opts.get("agent"):
        if opts.get("key_env") or opts.get("key_file") or opts.get("upstream") or opts.get("kind"):
            raise click.UsageError("--model-key-env, --model-key-file, --model-key-kind and --model-upstream go with --agent")
        return None
    if opts.get("key_env") and opts.get("key_file"):
        raise click.UsageError("--model-key-env and --model-key-file exclude each other")
    if opts.get("kind") and not (opts.get("key_env") or opts.get("key_file")):
        raise click.UsageError("--model-key-kind goes with --model-key-env or --model-key-file")
    return AgentChoice(name=opts["agent"], key_env=opts.get("key_env") or "", key_file=opts.get("key_file") or "",
                       upstream=opts.get("upstream") or "", kind=opts.get("kind") or "")


_SURFACES = (f"Exit {ExitCode.SURFACES_CHANGED} when the agent left new or changed files that host tools run or trust "
             "(git, direnv, editors, hooks, agents' config; symlinks out of the workspace)")


def strict_option(command):
    return click.option("--strict", is_flag=True,
                        help=f"{_SURFACES}, and refuse (exit 120) when a ceiling removes an explicit --allow or "
                             "--timeout. On by default under CI=true.")(command)


def down_strict_option(command):
    return click.option("--strict", is_flag=True, help=f"{_SURFACES}. On by default under CI=true.")(command)


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


def duration(ctx, param, value, *, hint: str | None = None):
    """A duration option's callback (`hint`: the name of an argument checked by hand)."""
    from launcher.policy import MAX_TIMEOUT_SECONDS, parse_duration

    if value is not None and not re.fullmatch(r"[0-9]+[smh]?", value):
        raise click.BadParameter("expected seconds, or a number with s, m or h (for example 90s, 10m)", param_hint=hint)
    if value is not None and not 0 < parse_duration(value) <= MAX_TIMEOUT_SECONDS:
        raise click.BadParameter("expected a duration above zero and at most 168h (a week)", param_hint=hint)
    return value


# Docker's (and podman's) rule for a container name; the sandbox's volumes and networks are named after it.
_SANDBOX_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def sandbox_name(ctx, param, value):
    """--name of a sandbox to create, checked before anything is: the engine would refuse it halfway."""
    if value is not None and not _SANDBOX_NAME.fullmatch(value):
        raise click.BadParameter(f"expected a letter or digit, then at least one more of letters, digits, '_', '.' "
                                 f"and '-' (as Docker names containers); found {value!r}")
    return _named(ctx, param, value)


def port_specs(ctx, param, values):
    """--port: each [HOST_PORT:]PORT parsed (exit 2 when malformed), no host port twice."""
    from launcher import ports

    specs = []
    for text in values:
        try:
            specs.append(ports.parse_spec(text))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    hosts = [s.host_port for s in specs if s.host_port]
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise click.BadParameter(f"expected each host port once, found {', '.join(map(str, twice))} more than once")
    return tuple(specs)


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
    from launcher import host
    from launcher.pipeline import LayerOptions

    opts = click.get_current_context().meta.get(_LAYER_OPTIONS, {})
    if opts.get("pin") and opts.get("ignore_repo"):
        raise click.UsageError("--trust-repo-policy and --ignore-repo-policy exclude each other")
    ask = _ask if host.is_interactive() and not approved_only else None
    return LayerOptions(allow=allow, timeout=timeout, session=session, idle=idle, pin=opts.get("pin"), ignore_repo=bool(opts.get("ignore_repo")),
                        ask=ask, approved_only=approved_only, strict=strict, workspace_mode=opts.get("workspace_mode"),
                        agent=agent_choice())


def tell(layered) -> None:
    """The layers' notes, and the layer table when --show-layers asked for it."""
    from launcher import layers

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
    from launcher.session import Request

    allow = tuple(allow) + click.get_current_context().meta.get(_PRIVATE, ())
    return Request(policy=policy_ref, workspace=workspace, command=tuple(command),
                   options=layer_settings(allow=allow, timeout=timeout, session=session, idle=idle, strict=strict),
                   **how)


def session(timings=None):
    """launcher.session, its imports (the pipeline's) made like the commands' (launcher/cli/__init__.py);
    the CLI's imports phase ends here."""
    gc.disable()
    try:
        from launcher import session
    finally:
        gc.freeze()
        gc.enable()
    if timings is not None:
        timings.since("imports", timings.origin)
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
        from launcher import layers

        click.echo(layers.layers_table(planned.layered.effective), err=True)
    return planned


def timings_option(command):
    return click.option("--timings", "timings", is_flag=True,
                        help="Print on stderr how long each launch phase took (also SANDBOX_TIMINGS=1).")(command)


def timeline(asked: bool):
    """A Timeline from the CLI's first import on, when --timings or SANDBOX_TIMINGS=1 asked for one."""
    from launcher import host, timings

    if not (asked or host.timings_requested()):
        return None
    return timings.Timeline(origin=timings.IMPORTED)
