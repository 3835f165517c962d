"""Commands that launch a sandbox: run (one-shot, probed, removed) and up (long-lived, a shell), and\nshell (another shell in a running one)."""

from __future__ import annotations

import sys

import click

from launcher.cli import complete
from launcher.cli import output
from launcher.cli.attest import attest_arguments, attest_option, up_attest_option
from launcher.cli.checked import duration, port_specs
from launcher.cli.options import (POLICY_HELP, Defaulted, WithCommand, agent_options, egress_options,
                                  either, given_options, json_option, layer_options, name_argument,
                                  request, sandbox_name, same_directory, session, strict_option, timeline,
                                  timings_option, trailing_command, workspace_flag)
from launcher.cli.manage import take_down
from launcher.errors import SandboxError, SessionEnded, Terminated
from launcher.values import show


@click.command(cls=Defaulted, short_help="Run a command as the agent in a fresh sandbox.",
               defaults={"policy": "--policy", "agent": "--agent", "timeout": "--timeout", "ports": "--port",
                         "registries": "--registries"})
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP, shell_complete=complete.presets)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--timeout", callback=duration, help="Stop the agent after this long (can only shorten the policy's).")
@click.option("--name", callback=sandbox_name, help="Sandbox name (default: a new one per run). In copy mode, a run "
              "with the name of an existing copy continues its work.")
@json_option("Print the JSON report on stdout (agent output goes to stderr).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the JSON report to this file.")
@click.option("--port", "ports", multiple=True, metavar="[HOST_PORT:]PORT", callback=port_specs,
              help="Forward the host's 127.0.0.1:HOST_PORT to port PORT inside while the agent runs (repeatable; "
                   "as `up --port`). Taken before the sandbox starts: one in use is exit 120, nothing started.")
@attest_option
@strict_option
@egress_options
@agent_options
@layer_options
@timings_option
@click.argument("command", nargs=-1, required=True)
def run(policy: str, workspace: str, timeout: str | None, name: str | None, as_json: bool, report_path: str | None,
        ports: tuple, attest_path: str | None, attest_key, strict: bool, allow: tuple[str, ...], egress_network: str | None, timings: bool,
        command: tuple[str, ...]) -> None:
    """Run COMMAND as the agent in a fresh sandbox, then remove it.

    The probe runs first; if any check fails the command never starts. Output is streamed; the
    exit code is the agent's, or one of the codes in `sandbox --help`.

    \b
    Example:
      sandbox run -p ci --allow pypi.org -w . -- make test
      sandbox run --registries pypi -w . -- pip install -r requirements.txt
    """
    line = timeline(timings)
    console = output.Console(agent_stdout=sys.stderr.buffer if as_json else None, timeline=line)
    asked = request(policy, workspace, command, timeout=timeout, allow=allow, strict=strict, name=name,
                    egress_network=egress_network, ports=ports, **attest_arguments(attest_path, attest_key, workspace))
    result = session(line).run(asked, console, timings=line)
    if result.attestation_problem:
        output.error(result.attestation_problem)
    output.write_report(result, report_path, as_json)
    outcome = result.outcome
    if outcome and result.planned.plan.proxy:
        output.print_blocked(outcome.egress)
    if outcome and outcome.copy:
        output.print_copy(outcome)
    output.print_changes(result.changes, failing=result.status == "surfaces-changed")
    if line is not None:
        output.print_timings(line)
    if result.internal or isinstance(result.error, SandboxError):
        raise result.error   # the group's handler prints it (and any clean-up failure) and exits with its code
    if isinstance(result.error, (KeyboardInterrupt, Terminated)):
        from launcher.launch.session import interrupted

        output.error(interrupted(result.error))
    elif outcome and outcome.timed_out:
        output.status(f"agent timed out after {result.planned.plan.timeout_seconds} s")
    sys.exit(result.exit_code)


@click.command(cls=WithCommand, short_help="Start a long-lived sandbox (or attach to it) and open a terminal in it.",
               defaults={"policy": "--policy", "agent": "--agent", "session": "--timeout", "idle": "--idle",
                         "ports": "--port", "registries": "--registries"})
@click.argument("workspace", required=False, type=click.Path(file_okay=False))
@workspace_flag
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP, shell_complete=complete.presets)
@click.option("--name", callback=sandbox_name, help="Sandbox name (default: sandbox-<directory name>; with --new, "
              "the next free sandbox-<directory name>-N).")
@click.option("--new", is_flag=True, help="Start another sandbox on WORKSPACE even when one runs for it (a name "
              "and, in copy mode, a copy of its own).")
@click.option("--no-shell", is_flag=True, help="Start the sandbox (or attach) but open no terminal in it.")
@click.option("--fresh", is_flag=True, help="Copy mode: start on a new copy of WORKSPACE instead of continuing the "
              "kept one. A kept copy with changes stays (the new sandbox then gets a name of its own); one without "
              "goes.")
@click.option("--timeout", callback=duration,
              help="End the session this long after it starts, whoever is attached (limits.session; can only "
                   "shorten the policy's).")
@click.option("--idle", callback=duration,
              help="End the session after this long without input or output on any of its terminals "
                   "(limits.idle; can only shorten the policy's).")
@click.option("--port", "ports", multiple=True, metavar="[HOST_PORT:]PORT", callback=port_specs,
              help="Forward the host's 127.0.0.1:HOST_PORT to port PORT inside while the sandbox runs (repeatable; "
                   "host first, as docker run -p; a bare PORT is the same port on both sides, HOST_PORT 0 picks a "
                   "free one). Taken before the sandbox starts: one in use is exit 120, nothing started.")
@json_option("What was started (or reused) and proven, as JSON on stdout before any shell opens.")
@up_attest_option
@egress_options
@agent_options
@layer_options
@timings_option
def up(workspace: str | None, workspace_flag: str | None, policy: str, name: str | None, new: bool, no_shell: bool,
       fresh: bool,
       timeout: str | None, idle: str | None, ports: tuple, as_json: bool, attest_path: str | None, attest_key,
       allow: tuple[str, ...],
       egress_network: str | None, timings: bool) -> None:
    """Start a long-lived sandbox on WORKSPACE and open a terminal in it: a shell, the agent's own CLI
    with --agent NAME (its interactive form), or CMD after `--`; the exit code is theirs.

    The sandbox stays after the terminal ends: `sandbox shell` (another shell), `sandbox ls`,
    `sandbox exec NAME -- CMD`, `sandbox down NAME`. The options it was started with (policy, agent,
    ports, layer flags, limits) are stored with it: `sandbox up` again in the workspace, with none
    of them, attaches to it with its own, proves it again (the probe in it, exit 122 and nothing
    started if it no longer holds) and opens the terminal asked for (--agent NAME or `-- CMD`: per
    attach, never stored). Options that differ from the stored ones are refused (exit 120, both
    shown); --new starts a second sandbox on the workspace instead. The session ends when
    limits.session (10h by default; --timeout) has passed since it started, attached
    or not, or after limits.idle (1h by default; --idle) without input or output on any of its terminals; its
    terminals are warned first. Its copy and home stay: `sandbox up` again takes the ended sandbox
    down (saying what `sandbox down` says) and starts a new one on them.
    With --json, what was started is said on stdout first; a shell opens only when stdin and stdout
    are a terminal (a script gets none).

    Without a terminal (a script) nothing opens: it says what to run.

    Each --port is forwarded as `sandbox port` does it (a relay over the engine's exec stream; no
    network and no published port are added) by a process of its own on the host that ends with
    the sandbox; `sandbox ls` lists them. A running sandbox keeps the ports it started with.

    \b
    Example:
      sandbox up ~/src/repo --timeout 2h
      sandbox up --registries pypi,npm ~/src/repo
      sandbox up -p ci --agent codex --model-key-env OPENAI_API_KEY --port 3000
      sandbox up                      # later, in the same directory: attaches, a shell
      sandbox up -- make test         # attaches, runs make test on the terminal
      sandbox up --new                # a second sandbox on this workspace
      sandbox up ~/src/repo --no-shell --json
      sandbox up ~/src/repo --port 5173 --port 18000:8000
    """
    workspace = either(workspace, workspace_flag, "workspace", ".", same=same_directory)
    command = trailing_command()
    if no_shell and command:
        raise click.UsageError("--no-shell opens no terminal; CMD after `--` runs on one: give one or the other")
    line = timeline(timings)
    asked = request(policy, workspace, command, session=timeout, idle=idle, allow=allow, name=name,
                    egress_network=egress_network, fresh=fresh, ports=ports, new=new, given=given_options(),
                    **attest_arguments(attest_path, attest_key, workspace))
    library = session(line)
    try:
        started = library.up(asked, output.Console(timeline=line), timings=line)
    except SessionEnded as ended:   # its copy and home stay; what `down` reports is said first
        output.status(f"{ended.sandbox}'s session ended ({ended.state}); taking it down before a new one starts")
        code = take_down(ended.sandbox)[1]   # (its --json fields, its exit code)
        if code:
            sys.exit(code)
        started = library.up(asked, output.Console(timeline=line), timings=line)
    if line is not None:
        output.print_timings(line)
    if as_json:
        output.emit(output.envelope(up_fields(started, command), sandbox=started.sandbox))
    if no_shell:
        return
    import shlex

    what = shlex.join(command) if command else f"{_agent(started, command)}'s CLI" if _agent(started, command) \
        else "an interactive shell"
    if not output.on_terminal():
        output.status(f"no terminal for {what}; use `sandbox exec {started.sandbox} -- "
                      f"{shlex.join(command) if command else 'CMD'}`")
        return
    from launcher.engine import engine
    from launcher.launch import terminal

    if command or _agent(started, command):
        output.status(f"opening {what} in {started.sandbox}")
    sys.exit(terminal.attach(engine.connect(), started.sandbox, list(started.runs)))


@click.command(short_help="Open a shell in a running sandbox.")
@name_argument(required=False)
def shell(name: str | None) -> None:
    """Open an interactive shell in the running sandbox NAME as `sandbox up` opens it: the agent's
    user, in the workspace, with the sandbox's environment (bash, else sh). Without NAME, the
    sandbox running for the current directory's workspace; when several are, they are listed.
    Ctrl-C and the terminal's size reach the shell. The exit code is the shell's; 117 when no such
    sandbox runs, 121 when the engine is unreachable.

    \b
    Example:
      sandbox shell
      sandbox shell sandbox-myrepo
    """
    from launcher.launch import terminal

    sys.exit(output.attach(name, list(terminal.SHELL), "sandbox shell"))


def _agent(started, command: tuple[str, ...]) -> str | None:
    """The agent whose own CLI the terminal runs, or None (a shell, or a command)."""
    if command or tuple(started.runs) == tuple(started.planned.policy.command):
        return None
    return started.options.agent if started.options else None


@click.command(short_help="Give a running sandbox's session more time, within its ceiling.")
@click.argument("words", nargs=-1, metavar="[NAME] DURATION", shell_complete=complete.names(complete.SANDBOXES))
@json_option("The new end, the one before and the latest the ceiling allows (epoch seconds) as JSON on stdout.")
def extend(words: tuple[str, ...], as_json: bool) -> None:
    """Move the end of the running `sandbox up` session NAME (without NAME: this workspace's, as
    `sandbox shell` chooses it) DURATION (90s, 30m, 2h) past its current end, or past now once
    that passed; the sandbox's terminals are warned again before the new end. The ceiling is
    limits.session as the policy and its layers allow it (10h by default) counted from the
    sandbox's start: `up --timeout` shortened only that session, so extend may go back up to
    the ceiling, never past it (exit 120, with the ceiling, where it comes from and the latest
    end). limits.idle still ends a session without terminal activity sooner. 117: no such
    sandbox running.

    \b
    Example:
      sandbox extend 2h
      sandbox extend sandbox-myrepo 30m --json
    """
    import os

    from launcher.engine import engine
    from launcher.launch import sandboxes
    from launcher.policy import policy

    if len(words) not in (1, 2):
        raise click.UsageError("expected [NAME] DURATION, for example `sandbox extend 2h` or `sandbox extend NAME 30m`")
    name, amount = (words[0] if len(words) == 2 else None), words[-1]
    if name:
        click.get_current_context().meta[output.NAME] = name
    duration(None, None, amount, hint="'DURATION'")
    done = sandboxes.extend(engine.connect(), name, os.path.realpath("."), policy.parse_duration(amount))
    if as_json:
        output.emit(output.envelope({"ends": done.ends, "was": done.was, "latest": done.latest,
                                     "ceiling": done.ceiling.seconds, "ceiling_source": done.ceiling.source,
                                     "idle": done.idle}, sandbox=done.name))
        return
    output.status(f"{done.name} now ends at {_when(done.ends)} (was {_when(done.was)}); its ceiling allows "
                  f"{_when(done.latest)} at the latest (limits.session {show('limits.session', done.ceiling.seconds)}, "
                  f"{done.ceiling.source}); {show('limits.idle', done.idle)} without terminal activity ends it sooner")


def _when(epoch: int) -> str:
    """Local time of day, with the date when not today."""
    import time

    same_day = time.localtime(epoch)[:3] == time.localtime()[:3]
    return time.strftime("%H:%M:%S" if same_day else "%d %b %H:%M:%S", time.localtime(epoch))


def up_fields(started, command: tuple[str, ...] = ()) -> dict:
    """`up --json`'s own fields."""
    from launcher.host import proven
    from launcher.labels import COPY
    from launcher.launch import upoptions

    plan = started.planned.plan
    return {"reused": started.reused, "policy": {"name": plan.policy_name, "sha256": plan.policy_digest},
            "workspace": started.planned.facts.workspace.real, "copy": dict(plan.container.labels).get(COPY),
            "network": plan.container.network_mode if plan.proxy is None else "proxy",
            "stops_at": started.ends or None, "proven": proven.last(started.sandbox),
            "shell": list(started.planned.policy.command), "runs": list(started.runs),
            "agent": _agent(started, command),
            "options": upoptions.as_dict(started.options) if started.options else None,
            "ports": [{"address": p.address, "host_port": p.host_port, "port": p.port} for p in started.ports]}


COMMANDS = (run, up, shell, extend)
