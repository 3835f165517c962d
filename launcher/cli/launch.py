"""Commands that launch a sandbox: run (one-shot, probed, removed) and up (long-lived, a shell)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import click

from launcher.cli import complete
from launcher.cli import output
from launcher.cli.attest import attest_option
from launcher.cli.options import (POLICY_HELP, agent_choice, agent_options, duration, egress_options, either,
                                  layer_options, plan, same_directory, strict_option, timeline, timings_option,
                                  workspace_flag)
from launcher.errors import ExitCode, SandboxError, Terminated, secondary_failures


def _engine_and_images(launch_plan, console: output.Console):
    with console.phase("connect"):
        from launcher import engine, images

        eng = engine.connect()
    with console.phase("images"):
        agent = agent_choice()
        if agent and agent.profile.image:   # the CLI's image, on ours: built here when missing (minutes, once)
            images.build_agent(eng, agent.profile.image, console.status, images.extra_ca_files())
        images.ensure_for(eng, launch_plan.container.image, console.status, proxy=launch_plan.proxy is not None)
        if launch_plan.copy or launch_plan.home:   # their tools run in our agent image, whatever the policy's image
            images.build(eng, images.agent_image(), console.status)
    return eng


def _tell_copy(outcome) -> None:
    """Where the agent's work is, and the commands that take it further (what the run's last
    checkpoint counted: no second look at the copy)."""
    name, count = outcome.copy, outcome.copy_changes
    if outcome.copy_dropped:
        output.status(f"no changes: copy {name} dropped")
    elif count == 0:
        output.status(f"no changes in the copy {name} now; it stays for its checkpoints "
                      f"(`sandbox checkpoints {name}`; `sandbox discard {name}` drops it)")
    else:
        counted = f"{count} changed" if count is not None else "changes not counted"
        output.status(f"the agent's changes are in the copy {name} ({counted}); the host tree is as it was."
                      f"\n  review: sandbox diff {name}   apply: sandbox apply {name}   drop: sandbox discard {name}")


@click.command(short_help="Run a command as the agent in a fresh sandbox.")
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP, shell_complete=complete.presets)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--timeout", callback=duration, help="Stop the agent after this long (can only shorten the policy's).")
@click.option("--name", help="Sandbox name (default: a new one per run). In copy mode, a run with the name of an "
              "existing copy continues its work.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report on stdout (agent output goes to stderr).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the JSON report to this file.")
@attest_option
@strict_option
@egress_options
@agent_options
@layer_options
@timings_option
@click.argument("command", nargs=-1, required=True)
def run(policy: str, workspace: str, timeout: str | None, name: str | None, as_json: bool, report_path: str | None,
        attest_path: str | None, strict: bool, allow: tuple[str, ...], egress_network: str | None, timings: bool,
        command: tuple[str, ...]) -> None:
    """Run COMMAND as the agent in a fresh sandbox, then remove it.

    The probe runs first; if any check fails the command never starts. Output is streamed; the
    exit code is the agent's, or one of the codes in `sandbox --help`.

    \b
    Example:
      sandbox run -p ci --allow pypi.org -w . -- make test
    """
    from launcher import baseline, host, launch
    from launcher.cli import attest
    from launcher.targets import report
    from launcher.targets import summary
    from launcher.errors import ProbeFailed

    started, launch_plan, facts, probe, outcome, error, changes = time.monotonic(), None, None, None, None, None, ()
    internal, notes, planned, eng = None, (), None, None
    line = timeline(timings)
    console = output.Console(agent_stdout=sys.stderr.buffer if as_json else None, timeline=line)
    listener = attest.listener(console, attest_path)
    code, status = ExitCode.INTERNAL, "error"
    try:
        planned = plan(policy, workspace, command, timeout=timeout, allow=allow, egress_network=egress_network,
                       strict=strict, name=name, timings=line)
        launch_plan, facts, notes = planned.plan, planned.facts, planned.layered.effective.notes
        eng = _engine_and_images(launch_plan, console)
        outcome = launch.run(eng, launch_plan, listener)
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
    except (KeyboardInterrupt, Terminated) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else 143
        status, error = "interrupted", "interrupted; the sandbox was removed"
    except Exception as exc:   # the report says 125 too; the group's handler says the rest
        internal, error = exc, f"internal error: {type(exc).__name__}: {exc}"
    finally:
        if facts and facts.surfaces is not None:   # a writable workspace: the agent may have written there
            changes = baseline.changes(facts.workspace.real, dict(facts.surfaces))
            if changes and (strict or host.in_ci()) and status in ("ok", "agent-failed", "timeout"):
                code, status = ExitCode.SURFACES_CHANGED, "surfaces-changed"
        summary_path = host.step_summary_path()
        if as_json or report_path or summary_path or attest_path:
            text = "\n".join([str(error or "")] + [f"also: {m}" for m in secondary_failures(error)]).strip()
            data = report.build(status=status, exit_code=code, started=started, plan=launch_plan, probe=probe,
                                changes=changes, layer_notes=notes, egress=outcome.egress if outcome else (),
                                agent_exit=outcome.exit_code if outcome else None,
                                timed_out=bool(outcome and outcome.timed_out), error=text)
            if attest_path and planned:   # a record once there is a policy to attest; 118 if it cannot be written
                unwritten = attest.record(attest_path, listener, planned, eng, data)
                if unwritten:
                    output.error(unwritten)
                    code = ExitCode.ATTESTATION_INVALID if status in ("ok", "agent-failed") else code
            if report_path:
                report.write(report_path, data)
            if as_json:
                click.echo(json.dumps(data, indent=2))
            if summary_path:
                summary.append(summary_path, data)
    if outcome and launch_plan.proxy:
        output.print_blocked(outcome.egress)
    if outcome and outcome.copy:
        _tell_copy(outcome)
    output.print_changes(changes, failing=status == "surfaces-changed")
    if line is not None:
        output.print_timings(line)
    if internal is not None:
        raise internal
    if isinstance(error, SandboxError):
        raise error      # the group's handler prints it (and any clean-up failure) and exits with its code
    if error:
        output.error(str(error))
    elif outcome and outcome.timed_out:
        output.status(f"agent timed out after {launch_plan.timeout_seconds} s")
    sys.exit(code)


@click.command(short_help="Start a long-lived sandbox and open a shell in it.")
@click.argument("workspace", required=False, type=click.Path(file_okay=False))
@workspace_flag
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP, shell_complete=complete.presets)
@click.option("--name", help="Sandbox name (default: sandbox-<directory name>).")
@click.option("--no-shell", is_flag=True, help="Start the sandbox but do not open a shell in it.")
@click.option("--fresh", is_flag=True, help="Copy mode: start on a new copy of WORKSPACE instead of continuing the "
              "kept one. A kept copy with changes stays (the new sandbox then gets a name of its own); one without "
              "goes.")
@click.option("--timeout", callback=duration,
              help="Stop the sandbox this long after it starts, whoever is attached (can only shorten the policy's).")
@egress_options
@agent_options
@layer_options
@timings_option
def up(workspace: str | None, workspace_flag: str | None, policy: str, name: str | None, no_shell: bool, fresh: bool,
       timeout: str | None, allow: tuple[str, ...], egress_network: str | None, timings: bool) -> None:
    """Start a long-lived sandbox on WORKSPACE and open an interactive shell in it.

    The sandbox stays after the shell ends: `sandbox ls`, `sandbox exec NAME -- CMD`,
    `sandbox down NAME`. Running `sandbox up` again opens another shell in the same sandbox, if it
    has the same effective policy and workspace (otherwise exit 120). It stops when limits.timeout
    (or --timeout) has passed since it started, attached or not; there is no idle timeout.

    \b
    Example:
      sandbox up ~/src/repo --timeout 2h
    """
    from launcher import baseline, launch, sandboxes
    from launcher.errors import NotFound, PolicyError

    workspace = either(workspace, workspace_flag, "workspace", ".", same=same_directory)
    line = timeline(timings)
    console = output.Console(timeline=line)
    planned = plan(policy, workspace, (), kind="up", name=name, timeout=timeout, allow=allow,
                   egress_network=egress_network, timings=line)
    launch_plan, sandbox = planned.plan, planned.plan.container.name
    eng = _engine_and_images(launch_plan, console)
    if fresh and launch_plan.copy:
        planned = _fresh(eng, planned, workspace, egress_network, line)
        launch_plan, sandbox = planned.plan, planned.plan.container.name
    try:
        found = sandboxes.find(eng, sandbox)
    except NotFound:
        found = None
    if found is not None:
        problem = sandboxes.reuse_problem(found, launch_plan)
        if problem:
            raise PolicyError([problem])
        console.status(f"{sandbox} is already running; opening a shell in it")
    else:
        launch.up(eng, launch_plan, console)
        agent = agent_choice()
        if agent:   # the profile's home files (and, for its shells, its variables)
            from launcher.agents.wiring import wrapped

            seed = wrapped(agent.profile, ("true",), agent.keyed, shells=True)[1]
            if len(seed) > 1 and sandboxes.exec_in(eng, sandbox, list(seed), console) != 0:
                console.status(f"warning: writing {agent.name}'s home files failed")
        if planned.facts.surfaces is not None:   # compared on `sandbox down`
            baseline.save(sandbox, planned.facts.workspace.real, dict(planned.facts.surfaces))
        ends = time.strftime("%H:%M:%S", time.localtime(time.time() + launch_plan.timeout_seconds))
        console.status(f"{sandbox} is up until {ends} (limits.timeout); `sandbox down {sandbox}` removes it")
    if line is not None:
        output.print_timings(line)
    if no_shell:
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()) or shutil.which("docker") is None:
        console.status(f"no terminal (or no docker CLI) for an interactive shell; use `sandbox exec {sandbox} -- CMD`")
        return
    # An interactive TTY needs raw-mode terminal plumbing the docker CLI already does well.
    os.execvp("docker", ["docker", "exec", "-it", sandbox, *planned.policy.command])


def _fresh(eng, planned, workspace: str, egress_network: str | None, line):
    """`up --fresh`: the kept copy of this name goes when it holds no change (nor does any of its
    checkpoints); otherwise it stays, said so, and the plan is made again under the next free
    name (NAME-2, NAME-3…), whose copy is new. Never while a sandbox uses the copy."""
    from itertools import count

    from launcher import pipeline, sandboxes
    from launcher.copies import store
    from launcher.errors import NotFound, PolicyError, Problem

    name = planned.plan.copy.name
    try:
        copy = store.find(eng, name)
    except NotFound:
        return planned                       # no copy yet: the one made now is fresh
    if copy.users:   # the running sandbox of this name among them
        raise PolicyError([Problem(file="command line", path="--fresh", expected="a copy no sandbox uses",
                                   found=f"{name} is in use by {', '.join(copy.users)}",
                                   hint=f"`sandbox down {copy.users[0]}` first (the copy stays if it holds changes)")])
    taken = store.checkpoint(eng, name, "before up --fresh")
    if store.drop_if_clean(eng, name, taken):
        output.status(f"--fresh: the copy {name} held no changes: dropped")
        return planned

    def free(candidate: str) -> bool:
        try:
            sandboxes.find(eng, candidate)
            return False
        except NotFound:
            return all(eng.volume_info(f"{candidate}-{part}") is None for part in ("base", "upper", "tree"))

    new = next(f"{name}-{n}" for n in count(2) if free(f"{name}-{n}"))
    held = f"{taken['changes']} changes" if taken.get("changes") else "checkpoints with changes"
    output.status(f"--fresh: the copy {name} holds {held} and stays (`sandbox diff {name}`, `sandbox apply {name}`, "
                  f"`sandbox discard {name}`); the new sandbox and its copy are {new}")
    return pipeline.compiled(planned.layered, workspace, (), kind="up", name=new, egress_network=egress_network,
                             agent=agent_choice(), timings=line)


COMMANDS = (run, up)
