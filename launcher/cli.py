"""The `sandbox` command: a thin click layer. The only module that prints or exits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time

import click

from launcher import __version__, cli_output
from launcher.errors import ExitCode, SandboxError

POLICY_HELP = "Preset name (see policies/) or path to a policy file."


class _Terminated(BaseException):
    """SIGTERM, raised like Ctrl-C so every cleanup path runs."""


def _on_sigterm(signum, frame):
    raise _Terminated()


class Console:
    """Listener for the launch stage: status on stderr, agent output passed through."""

    def __init__(self, agent_stdout=None):
        self.agent_stdout = agent_stdout or sys.stdout.buffer

    def status(self, message: str) -> None:
        cli_output.status(message)

    def output(self, stream: str, data: bytes) -> None:
        target = self.agent_stdout if stream == "stdout" else sys.stderr.buffer
        target.write(data)
        target.flush()


def _fail(exc: SandboxError) -> None:
    cli_output.error(str(exc))
    sys.exit(exc.exit_code)


def _plan(policy_ref: str, workspace: str, command: tuple[str, ...], kind: str = "run", name: str | None = None,
          timeout: str | None = None, allow: tuple[str, ...] = (), egress_network: str | None = None):
    from launcher import compiler, host, images, stack
    from launcher.policy import with_allowed

    base = stack.load_base(policy_ref)
    policy = with_allowed(base.policy, allow) if allow else base.policy   # --allow widens the base only
    policy = _layers(base, policy, workspace, timeout).policy
    facts = host.gather(policy, workspace, images.probe_volume_name(), images.proxy_image().tag)
    plan = compiler.compile_policy(policy, facts, command=command, kind=kind, name=name,
                                   egress_network=egress_network)
    for warning in plan.warnings:
        cli_output.status(f"warning: {warning}")
    return policy, plan, facts


_LAYER_OPTIONS = "sandbox.layer-options"


def _layer_option(ctx, param, value):
    from launcher.trust import normalise_pin

    if param.name == "pin" and value is not None:
        if normalise_pin(value) is None:
            raise click.BadParameter("expected a SHA-256 digest (64 hex digits), as `sandbox check` prints it")
        value = normalise_pin(value)
    ctx.meta.setdefault(_LAYER_OPTIONS, {})[param.name] = value


def layer_options(command):
    """--trust-repo-policy and --ignore-repo-policy (compile, run, up, explain), kept in the click
    context where _layers reads them, so that commands need not pass them along."""
    command = click.option("--ignore-repo-policy", "ignore_repo", is_flag=True, expose_value=False, callback=_layer_option,
                           help="Do not apply the workspace's .sandbox.yaml (it stays read-only inside).")(command)
    return click.option("--trust-repo-policy", "pin", metavar="SHA256", expose_value=False, callback=_layer_option,
                        help="Apply the workspace's .sandbox.yaml only if its SHA-256 is this (no prompt; CI).")(command)


def _ask(text: str) -> bool:
    click.echo(text, err=True)
    try:
        return click.confirm("Apply this repository policy?", default=False, err=True)
    except click.exceptions.Abort:
        return False


def _layers(base, policy, workspace: str, timeout: str | None, approved_only: bool = False):
    """The layers after the base (org, user, repository, git hooks path, --timeout), narrowing `policy`.
    An unapproved repository policy is asked about only in a terminal, never in CI."""
    from launcher import host, layers, stack

    opts = click.get_current_context().meta.get(_LAYER_OPTIONS, {})
    if opts.get("pin") and opts.get("ignore_repo"):
        raise click.UsageError("--trust-repo-policy and --ignore-repo-policy exclude each other")
    result = stack.build(policy, base, workspace, timeout=timeout, pin=opts.get("pin"), approved_only=approved_only,
                         ignore_repo=bool(opts.get("ignore_repo")), ask=_ask if host.is_interactive() else None)
    for note in result.notes:
        click.echo(f"sandbox: {note}", err=True)
    if opts.get("show_layers"):
        click.echo(layers.layers_table(result.effective), err=True)
    return result.effective


def egress_options(command):
    """--allow and --egress-network, shared by compile, run and up."""
    command = click.option("--egress-network", metavar="NETWORK",
                           help="Proxy mode: attach the proxy to this existing Docker network instead of a new bridge "
                                "(air-gapped hosts, tests).")(command)
    return click.option("--allow", multiple=True, metavar="HOST",
                        help="Proxy mode: add HOST (or *.suffix, host:port) to the base policy's network.allow; "
                             "repeatable. Later layers can still narrow it.")(command)


def strict_option(command):
    return click.option("--strict", is_flag=True,
                        help=f"Exit {ExitCode.SURFACES_CHANGED} when the agent left new or changed files that host tools "
                             "run or trust (git, direnv, editors, hooks, agents' config; symlinks out of the "
                             "workspace). On by default under CI=true.")(command)


def print_changes(changes, failing: bool) -> None:
    """The surface report on stderr: an error when it decides the exit code, else a warning."""
    from launcher.surfaces import render

    if changes:
        lines = render(changes)
        cli_output.error(lines[0]) if failing else cli_output.status(f"warning: {lines[0]}")
        click.echo("\n".join(lines[1:]), err=True)


def _duration(ctx, param, value):
    import re

    if value is not None and not re.fullmatch(r"[0-9]+[smh]?", value):
        raise click.BadParameter("expected seconds, or a number with s, m or h (for example 90s, 10m)")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sandbox")
def main() -> None:
    """Run AI coding agents in Docker sandboxes whose isolation is declared in a policy file and
    proven by a probe inside the container before the agent starts.

    \b
    Exit codes: the agent's own code, or
      120 policy or input refused   121 engine unavailable / launch failed
      122 probe failed (the sandbox did not take effect; the agent never ran)
      123 the agent left changes to files host tools run (CI=true or --strict)
      124 agent timeout             125 internal error

    Colour only on a terminal; NO_COLOR=1 or TERM=dumb turns it off. --json is never coloured.
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A shell without job control starts background commands with SIGINT ignored, and Python then
    # keeps ignoring it: Ctrl-C (or a CI runner's SIGINT) must always clean up and stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@main.command()
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--format", "fmt", type=click.Choice(["json", "argv", "compose"]), default="json", show_default=True,
              help="json: the whole plan; argv: the equivalent `docker run` command; compose: a compose file.")
@egress_options
@layer_options
@click.option("--show-layers", is_flag=True, expose_value=False, callback=_layer_option,
              help="Show on stderr which layer (base, org, user, repository, flags) decided each field.")
@click.argument("command", nargs=-1)
def compile(policy: str, workspace: str, fmt: str, allow: tuple[str, ...], egress_network: str | None,
            command: tuple[str, ...]) -> None:
    """Compile a policy into a launch plan, without touching the Docker engine."""
    from launcher import render

    try:
        # argv and compose are launched by other tools: labelled so that `gc` leaves them alone.
        kind = "external" if fmt in ("argv", "compose") else "run"
        _, plan, _ = _plan(policy, workspace, command, kind=kind, allow=allow, egress_network=egress_network)
    except SandboxError as exc:
        _fail(exc)
    if fmt == "argv":
        click.echo(render.argv_text(plan))
    elif fmt == "compose":
        from launcher.compose import compose_text

        click.echo(compose_text(plan), nl=False)
    else:
        click.echo(json.dumps(render.plan_to_dict(plan), indent=2))


@main.command()
@click.argument("policies", nargs=-1)
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose .sandbox.yaml and git config count.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def check(policies: tuple[str, ...], workspace: str, fmt: str, as_json: bool) -> None:
    """Lint POLICIES without running anything: the first is the base (default: untrusted), further
    files are layers after it; the org, user and repository layers follow as `run` applies them.
    Exit code 120 when there is an error."""
    from launcher import lint

    fmt = "json" if as_json else fmt
    try:
        findings, docs = lint.check(policies or ("untrusted",), workspace)
    except SandboxError as exc:
        _fail(exc)
    click.echo(lint.render(findings, docs, fmt, mark=cli_output.marker()))
    sys.exit(ExitCode.POLICY_INVALID if any(f.severity is lint.Severity.ERROR for f in findings) else ExitCode.OK)


@main.command()
@click.argument("policy", default="untrusted")
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose layers count.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@layer_options
def explain(policy: str, workspace: str, fmt: str, as_json: bool) -> None:
    """For every effective field: value, Docker mechanism, enforcing component and the probe check
    that proves it; fields enforced by nothing or not probed are flagged. Never asks or runs."""
    from launcher import explain as table, stack

    fmt = "json" if as_json else fmt
    try:
        base = stack.load_base(policy)
        eff = _layers(base, base.policy, workspace, None, approved_only=True)
    except SandboxError as exc:
        _fail(exc)
    click.echo(json.dumps(table.to_json(eff), indent=2) if fmt == "json" else table.render(eff, fmt == "markdown"))


def _engine_and_images(plan, console: Console):
    from launcher import engine, images

    eng = engine.connect()
    images.ensure_for(eng, plan.container.image, console.status, proxy=plan.proxy is not None)
    return eng


def _print_blocked(events) -> None:
    from launcher.audit import summarize

    blocked = summarize(tuple(e for e in events if e.denied))
    if not blocked:
        cli_output.status("egress: nothing was blocked")
        return
    cli_output.status(f"egress blocked ({sum(b.count for b in blocked)} requests):")
    for b in blocked:
        click.echo(f"  {b.method} {b.host}:{b.port}  x{b.count}", err=True)


@main.command()
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--timeout", callback=_duration, help="Stop the agent after this long (can only shorten the policy's).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout (agent output goes to stderr).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the JSON report to this file.")
@strict_option
@egress_options
@layer_options
@click.argument("command", nargs=-1, required=True)
def run(policy: str, workspace: str, timeout: str | None, as_json: bool, report_path: str | None, strict: bool,
        allow: tuple[str, ...], egress_network: str | None, command: tuple[str, ...]) -> None:
    """Run COMMAND as the agent in a fresh sandbox, then remove it.

    The probe runs first; if any check fails the command never starts. Output is streamed; the
    exit code is the agent's, or one of the codes in `sandbox --help`.
    """
    from launcher import baseline, host, launch, report, summary
    from launcher.errors import ProbeFailed

    started, plan, facts, probe, outcome, error, changes = time.monotonic(), None, None, None, None, None, ()
    console = Console(agent_stdout=sys.stderr.buffer if as_json else None)
    code, status = ExitCode.INTERNAL, "error"
    try:
        _, plan, facts = _plan(policy, workspace, command, timeout=timeout, allow=allow, egress_network=egress_network)
        eng = _engine_and_images(plan, console)
        outcome = launch.run(eng, plan, console)
        probe = outcome.probe
        if outcome.timed_out:
            code, status = ExitCode.AGENT_TIMEOUT, "timeout"
        else:
            code, status = outcome.exit_code, "ok" if outcome.exit_code == 0 else "agent-failed"
    except SandboxError as exc:
        error, code = exc, exc.exit_code
        probe = exc.report if isinstance(exc, ProbeFailed) else None
        status = {ExitCode.POLICY_INVALID: "policy-invalid", ExitCode.ENGINE: "engine-error",
                  ExitCode.PROBE_FAILED: "probe-failed"}.get(code, "error")
    except (KeyboardInterrupt, _Terminated) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else 143
        status, error = "interrupted", "interrupted; the sandbox was removed"
    finally:
        if facts and facts.surfaces is not None:   # a writable workspace: the agent may have written there
            changes = baseline.changes(facts.workspace.real, dict(facts.surfaces))
            if changes and (strict or host.in_ci()) and status in ("ok", "agent-failed", "timeout"):
                code, status = ExitCode.SURFACES_CHANGED, "surfaces-changed"
        summary_path = host.step_summary_path()
        if as_json or report_path or summary_path:
            data = report.build(status=status, exit_code=code, started=started, plan=plan, probe=probe, changes=changes,
                                egress=outcome.egress if outcome else (),
                                agent_exit=outcome.exit_code if outcome else None,
                                timed_out=bool(outcome and outcome.timed_out), error=str(error or ""))
            if report_path:
                report.write(report_path, data)
            if as_json:
                click.echo(json.dumps(data, indent=2))
            if summary_path:
                summary.append(summary_path, data)
    if outcome and plan.proxy:
        _print_blocked(outcome.egress)
    print_changes(changes, failing=status == "surfaces-changed")
    if error:
        cli_output.error(str(error))
    elif outcome and outcome.timed_out:
        cli_output.status(f"agent timed out after {plan.timeout_seconds} s")
    sys.exit(code)


@main.command()
@click.argument("workspace", default=".", type=click.Path(file_okay=False))
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--name", help="Sandbox name (default: sandbox-<directory name>).")
@click.option("--no-shell", is_flag=True, help="Start the sandbox but do not open a shell in it.")
@egress_options
@layer_options
def up(workspace: str, policy: str, name: str | None, no_shell: bool, allow: tuple[str, ...],
       egress_network: str | None) -> None:
    """Start a long-lived sandbox on WORKSPACE and open an interactive shell in it.

    The sandbox stays after the shell ends: `sandbox ls`, `sandbox exec NAME -- CMD`,
    `sandbox down NAME`. Running `sandbox up` again opens another shell in the same sandbox.
    """
    from launcher import baseline, launch, sandboxes
    from launcher.errors import NotFound, PolicyError

    console = Console()
    try:
        pol, plan, facts = _plan(policy, workspace, (), kind="up", name=name, allow=allow, egress_network=egress_network)
        eng = _engine_and_images(plan, console)
        try:
            found = sandboxes.find(eng, plan.container.name)
        except NotFound:
            found = None
        if found is not None:
            problem = sandboxes.reuse_problem(found, plan)
            if problem:
                raise PolicyError([problem])
            console.status(f"{plan.container.name} is already running; opening a shell in it")
        else:
            launch.up(eng, plan, console)
            if facts.surfaces is not None:   # compared on `sandbox down`
                baseline.save(plan.container.name, facts.workspace.real, dict(facts.surfaces))
            console.status(f"{plan.container.name} is up; `sandbox down {plan.container.name}` removes it")
    except SandboxError as exc:
        _fail(exc)
    except (KeyboardInterrupt, _Terminated) as exc:
        sys.exit(130 if isinstance(exc, KeyboardInterrupt) else 143)
    shell = list(pol.command)
    if no_shell:
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()) or shutil.which("docker") is None:
        console.status(f"no terminal (or no docker CLI) for an interactive shell; use `sandbox exec {plan.container.name} -- CMD`")
        return
    # An interactive TTY needs raw-mode terminal plumbing the docker CLI already does well.
    os.execvp("docker", ["docker", "exec", "-it", plan.container.name, *shell])


# The management commands register themselves on `main` (kept apart to keep files short).
from launcher import cli_manage, cli_selftest, cli_team  # noqa: E402,F401
