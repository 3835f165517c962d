"""The `sandbox` command: a thin click layer. The only module that prints or exits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time

import click

from launcher import __version__
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
        click.echo(f"sandbox: {message}", err=True)

    def output(self, stream: str, data: bytes) -> None:
        target = self.agent_stdout if stream == "stdout" else sys.stderr.buffer
        target.write(data)
        target.flush()


def _fail(exc: SandboxError) -> None:
    click.echo(f"sandbox: error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _plan(policy_ref: str, workspace: str, command: tuple[str, ...], kind: str = "run", name: str | None = None,
          timeout: str | None = None):
    from launcher import compiler, host, images
    from launcher.policy import load_policy, parse_duration

    policy = load_policy(policy_ref)
    facts = host.gather(policy, workspace, images.probe_volume_name())
    plan = compiler.compile_policy(policy, facts, command=command, kind=kind, name=name)
    for warning in plan.warnings:
        click.echo(f"sandbox: warning: {warning}", err=True)
    if timeout:
        from dataclasses import replace

        plan = replace(plan, timeout_seconds=min(plan.timeout_seconds, parse_duration(timeout)))
    return policy, plan


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
      124 agent timeout             125 internal error
    """
    signal.signal(signal.SIGTERM, _on_sigterm)


@main.command()
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--format", "fmt", type=click.Choice(["json", "argv"]), default="json", show_default=True,
              help="json: the whole plan; argv: the equivalent `docker run` command.")
@click.argument("command", nargs=-1)
def compile(policy: str, workspace: str, fmt: str, command: tuple[str, ...]) -> None:
    """Compile a policy into a launch plan, without touching the Docker engine."""
    from launcher import render

    try:
        _, plan = _plan(policy, workspace, command)
    except SandboxError as exc:
        _fail(exc)
    if fmt == "argv":
        click.echo(render.argv_text(plan))
    else:
        click.echo(json.dumps(render.plan_to_dict(plan), indent=2))


def _engine_and_images(plan, console: Console):
    from launcher import engine, images

    eng = engine.connect()
    images.ensure_for(eng, plan.container.image, console.status)
    return eng


@main.command()
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--timeout", callback=_duration, help="Stop the agent after this long (can only shorten the policy's).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout (agent output goes to stderr).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the JSON report to this file.")
@click.argument("command", nargs=-1, required=True)
def run(policy: str, workspace: str, timeout: str | None, as_json: bool, report_path: str | None,
        command: tuple[str, ...]) -> None:
    """Run COMMAND as the agent in a fresh sandbox, then remove it.

    The probe runs first; if any check fails the command never starts. Output is streamed; the
    exit code is the agent's, or one of the codes in `sandbox --help`.
    """
    from launcher import launch, report
    from launcher.errors import ProbeFailed

    started, plan, probe, outcome, error = time.monotonic(), None, None, None, None
    console = Console(agent_stdout=sys.stderr.buffer if as_json else None)
    code, status = ExitCode.INTERNAL, "error"
    try:
        _, plan = _plan(policy, workspace, command, timeout=timeout)
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
        if as_json or report_path:
            data = report.build(status=status, exit_code=code, started=started, plan=plan, probe=probe,
                                agent_exit=outcome.exit_code if outcome else None,
                                timed_out=bool(outcome and outcome.timed_out), error=str(error or ""))
            if report_path:
                report.write(report_path, data)
            if as_json:
                click.echo(json.dumps(data, indent=2))
    if error:
        click.echo(f"sandbox: error: {error}", err=True)
    elif outcome and outcome.timed_out:
        click.echo(f"sandbox: agent timed out after {plan.timeout_seconds} s", err=True)
    sys.exit(code)


@main.command()
@click.argument("workspace", default=".", type=click.Path(file_okay=False))
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--name", help="Sandbox name (default: sandbox-<directory name>).")
@click.option("--no-shell", is_flag=True, help="Start the sandbox but do not open a shell in it.")
def up(workspace: str, policy: str, name: str | None, no_shell: bool) -> None:
    """Start a long-lived sandbox on WORKSPACE and open an interactive shell in it.

    The sandbox stays after the shell ends: `sandbox ls`, `sandbox exec NAME -- CMD`,
    `sandbox down NAME`. Running `sandbox up` again opens another shell in the same sandbox.
    """
    from launcher import launch
    from launcher.errors import NotFound

    console = Console()
    try:
        pol, plan = _plan(policy, workspace, (), kind="up", name=name)
        eng = _engine_and_images(plan, console)
        try:
            launch.find(eng, plan.container.name)
            console.status(f"{plan.container.name} is already running; opening a shell in it")
        except NotFound:
            launch.up(eng, plan, console)
            console.status(f"{plan.container.name} is up; `sandbox down {plan.container.name}` removes it")
    except SandboxError as exc:
        _fail(exc)
    except (KeyboardInterrupt, _Terminated):
        sys.exit(130)
    shell = list(pol.command)
    if no_shell:
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()) or shutil.which("docker") is None:
        console.status(f"no terminal (or no docker CLI) for an interactive shell; use `sandbox exec {plan.container.name} -- CMD`")
        return
    # An interactive TTY needs raw-mode terminal plumbing the docker CLI already does well.
    os.execvp("docker", ["docker", "exec", "-it", plan.container.name, *shell])


@main.command(name="exec")
@click.argument("name")
@click.argument("command", nargs=-1, required=True)
def exec_(name: str, command: tuple[str, ...]) -> None:
    """Run COMMAND in the running sandbox NAME (non-interactive; streams output)."""
    from launcher import engine, launch

    try:
        sys.exit(launch.exec_in(engine.connect(), name, list(command), Console()))
    except SandboxError as exc:
        _fail(exc)


@main.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ls_(as_json: bool) -> None:
    """List sandboxes (and leftovers) created by this tool."""
    from dataclasses import asdict

    from launcher import engine, launch

    try:
        items = launch.ls(engine.connect())
    except SandboxError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps([asdict(i) for i in items], indent=2))
        return
    click.echo(f"{'NAME':40} {'KIND':4} {'STATE':9} {'POLICY':12} WORKSPACE")
    for i in items:
        click.echo(f"{i.name:40} {i.kind:4} {i.state:9} {i.policy:12} {i.workspace}")


@main.command()
@click.argument("name")
def down(name: str) -> None:
    """Stop (SIGTERM, then a grace period) and remove the sandbox NAME."""
    from launcher import engine, launch

    try:
        launch.down(engine.connect(), name)
    except SandboxError as exc:
        _fail(exc)
    click.echo(f"sandbox: removed {name}", err=True)


@main.command()
@click.option("--all", "everything", is_flag=True, help="Also remove running `up` sandboxes.")
def gc(everything: bool) -> None:
    """Remove containers of ours left behind (stopped, or whose launcher died)."""
    from launcher import engine, launch

    try:
        removed = launch.gc(engine.connect(), everything)
    except SandboxError as exc:
        _fail(exc)
    click.echo(f"sandbox: removed {len(removed)}: {', '.join(removed)}" if removed else "sandbox: nothing to remove", err=True)


@main.group()
def images() -> None:
    """Build the bundled images (agent, probe)."""


@images.command()
@click.option("--force", is_flag=True, help="Rebuild even if present.")
def build(force: bool) -> None:
    """Build the agent and probe images that are missing (makes the base image if needed)."""
    from launcher import engine, images as imgs

    console = Console()
    try:
        eng = engine.connect()
        for image in (imgs.probe_image(), imgs.agent_image()):
            if not imgs.build(eng, image, console.status, force=force):
                console.status(f"{image.tag} is present")
    except SandboxError as exc:
        _fail(exc)


@images.command()
def bootstrap() -> None:
    """Create debian:bookworm-slim locally with debootstrap (for hosts without a registry)."""
    from launcher import engine, images as imgs

    try:
        imgs.bootstrap(engine.connect(), Console().status)
    except SandboxError as exc:
        _fail(exc)
