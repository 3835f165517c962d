"""The `sandbox` command: a thin click layer over the library, and the only package that prints or
exits. One error handler for every command: a SandboxError gives its stable exit code, anything else
125 with a one-line message (the traceback with --debug); SIGINT and SIGTERM give 130 and 143.

May import: agents, check, copies, doctor, egress, engine, host, launch, pipeline, plan, policy, selftest, targets, usecases."""

from __future__ import annotations

from launcher import timings  # noqa: F401 - first: --timings counts the imports from here

import gc

gc.disable()   # while the commands import (the end of this module says why); so the imports follow it

from launcher import classcode  # noqa: E402

classcode.install()   # before the commands import: their dataclasses' methods compiled once, not per start

import signal  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

import click  # noqa: E402

from launcher import __version__  # noqa: E402
from launcher.cli import (agents, attest, config, copies, egress, helper, launch, manage, output, policy,  # noqa: E402
                          port, presets, selftest, team, trust)
from launcher.errors import ExitCode, SandboxError, Terminated, kept_copy, secondary_failures  # noqa: E402

_DEBUG = "sandbox.debug"


def _version(ctx, param, value):
    """Only when asked: finding the commit may run git."""
    if not value or ctx.resilient_parsing:
        return
    from launcher import build_commit

    commit = build_commit()
    click.echo(f"sandbox {__version__}" + (f" (commit {commit})" if commit else ""))
    ctx.exit()


def _on_sigterm(signum, frame):
    raise Terminated()


def _report(exc: BaseException) -> None:
    for message in secondary_failures(exc):
        output.error(f"also: {message}")
    if kept_copy(exc) and isinstance(exc, SandboxError):   # an interrupted run says it in its own line
        output.error(f"the copy {kept_copy(exc)} was kept with the agent's work: `sandbox diff {kept_copy(exc)}`")


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        # Under --json each error is also the command's JSON object on stdout (output.failed).
        try:
            return super().invoke(ctx)
        except SandboxError as exc:
            output.failed(exc, exc.exit_code)
            output.error(str(exc))
            _report(exc)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            output.failed(exc, 130)
            _report(exc)
            sys.exit(130)
        except Terminated as exc:
            output.failed(exc, 143)
            _report(exc)
            sys.exit(143)
        except click.exceptions.ClickException as exc:   # a usage error: click says it on stderr
            output.failed(exc, exc.exit_code)
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:   # a bug of ours: say it in one line, never as "the agent failed"
            output.failed(exc, ExitCode.INTERNAL)
            if ctx.meta.get(_DEBUG):
                traceback.print_exc()
            output.error(f"internal error: {type(exc).__name__}: {exc}"
                         + ("" if ctx.meta.get(_DEBUG) else " (run with --debug for the traceback)"))
            _report(exc)
            sys.exit(ExitCode.INTERNAL)


def _debug(ctx, param, value):
    ctx.meta[_DEBUG] = value


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version (and the commit it was built from) and exit.")
@click.option("--debug", is_flag=True, expose_value=False, callback=_debug, is_eager=True,
              help="Show the traceback of an internal error.")
def main() -> None:
    """Run AI coding agents in Docker sandboxes whose isolation is declared in a policy file and
    proven by a probe inside the container before the agent starts.

    \b
    Exit codes: the agent's own code, or
      117 no such sandbox (`shell`: none running for this workspace; the engine answered)
      118 `sandbox verify-attestation`: a digest or signature does not match (`--attest`: record not written)
      119 `sandbox apply`: the host tree changed where the agent's changes go (nothing written)
      120 policy or input refused   121 engine unavailable / launch failed
      122 probe failed (the sandbox did not take effect; the agent never ran)
      123 the agent left changes to files host tools run (CI=true or --strict)
      124 agent timeout             125 internal error
      130 / 143 interrupted by SIGINT / SIGTERM (everything created was removed; a copy-mode run keeps its copy and says so)

    Colour only on a terminal; NO_COLOR=1 or TERM=dumb turns it off. --json is never coloured; its
    objects share one envelope (command, ok, exit_code, sandbox, error), errors included.
    """
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A shell without job control starts background commands with SIGINT ignored, and Python then
    # keeps ignoring it: Ctrl-C (or a CI runner's SIGINT) must always clean up and stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)


for _module in (policy, presets, launch, copies, agents, manage, port, team, trust, selftest, attest, config, egress,
                helper):
    for _command in _module.COMMANDS:
        main.add_command(_command)

# The imports above allocate ~100 000 objects and leave no garbage: collecting during them cost
# ~35 ms per command here, and checking them again when the interpreter exits ~20 ms more. They
# are frozen (never scanned again; still freed at exit as before) and collection resumes.
gc.freeze()
gc.enable()
