"""Copy mode's commands: diff, apply, discard, checkpoint, checkpoints, rewind, fork."""

from __future__ import annotations

import re
import time

import click

from launcher.cli import complete
from launcher.cli.applying import ask
from launcher.cli.checked import new_name
from launcher.cli.options import json_option, name_argument
from launcher.cli.output import Console, emit, envelope

_COPY = name_argument(complete.COPIES)


def _size(ctx, param, value):
    from launcher.policy.policy import parse_size

    if value is None:
        return None
    if not re.fullmatch(r"[0-9]+[kmg]?", value):
        raise click.BadParameter("expected bytes, or a number with k, m or g (for example 512m, 2g)")
    return parse_size(value)


_MAX_COPY = click.option("--max-copy-size", callback=_size, metavar="SIZE",
                         help="Refuse when all files apply would write add up to more (apparent sizes), or when the "
                              "copy's changes take more disk at a checkpoint (default 8g).")


def limit_options(command):
    """--max-file-size and --max-copy-size (diff, apply): what the way back may cost."""
    return click.option("--max-file-size", callback=_size, metavar="SIZE",
                        help="Refuse when one file apply would write is larger (apparent size; default 1g).")(
        _MAX_COPY(command))


def _limits(max_file: int | None, max_copy: int | None):
    from launcher.copies.limits import Limits

    default = Limits()
    return Limits(file_bytes=default.file_bytes if max_file is None else max_file,
                  copy_bytes=default.copy_bytes if max_copy is None else max_copy)


def _engine():
    from launcher.engine import engine
    from launcher.usecases import copywork

    return copywork.tools_engine(engine.connect(), Console().status)   # the copies' tools run in our image


@click.command(short_help="Show what the agent changed in a copy.")
@_COPY
@click.option("--stat", "as_stat", is_flag=True, help="One line per changed file, then the totals.")
@json_option("Every change as JSON on stdout (paths, status, hashes, patch).")
@click.option("--no-pager", "no_pager", is_flag=True,
              help="Print to the terminal directly, not through $PAGER (a pipe or a file never gets one).")
@limit_options
def diff(name: str, as_stat: bool, as_json: bool, no_pager: bool, max_file_size: int | None,
         max_copy_size: int | None) -> None:
    """Show what the agent changed in the copy NAME, against the tree it was copied from.

    What is shown is frozen first: a checkpoint of the copy (a running sandbox is paused while it
    is taken; an unchanged copy reuses its checkpoint), and `sandbox apply NAME` writes exactly that
    checkpoint, as long as the copy is still that tree (after a rewind or any change it asks for a
    new diff). New, deleted and changed files with their
    modes and sizes, symlinks with their targets; binary files summarised. Changes `sandbox apply`
    never carries back (git directories and protected paths on any case or Unicode spelling, setuid
    files, case collisions, symlinks that resolve outside or into those) are marked REFUSED;
    surfaces at any depth and symlinks are marked NEEDS with the flag that lets `apply` write them.
    What git itself writes into the workspace's .git while the agent uses it (the index, objects,
    reflogs) is refused too, counted in one line rather than listed (--json lists it).

    On a terminal the diff is coloured and shown through $PAGER (default `less -FRX`: short output
    just prints); --no-pager, PAGER=cat or a pipe print it directly; NO_COLOR turns colour off.

    \b
    Example:
      sandbox diff sandbox-myrepo --stat
    """
    from launcher.cli.output import marker, page, status
    from launcher.copies import review
    from launcher.usecases import copywork

    shown = copywork.diff(_engine(), name, _limits(max_file_size, max_copy_size))
    found = list(shown.changes)
    status(f"changes of {name} at checkpoint {shown.checkpoint} (`sandbox apply {name}` writes exactly these)")
    for problem in shown.over:
        status(f"apply will refuse: {problem.path}: {problem.found}, over {problem.expected}")
    if as_json:
        emit(envelope({"copy": name, "workspace": shown.copy.workspace, "checkpoint": shown.checkpoint, "changes": found}))
        return
    records = review.git_records_line(found)
    if records:
        status(records)
    if not any(not review.git_record(c) for c in found):
        status(f"no changes in {name}" + (" that apply could write" if records else ""))
        return
    mark = marker()
    page(review.stat_lines(found, mark) if as_stat else review.patch_lines(found, mark), pager=not no_pager)


@click.command(name="apply", short_help="Write the changes in a copy to the host tree.")
@_COPY
@click.option("--to", "branch", metavar="BRANCH", help="Commit the changes on this new branch of the host "
              "repository instead (from the commit the copy was taken from); the work tree stays as it is.")
@click.option("--message", "-m", default="Changes made in sandbox copy", show_default=True,
              help="Commit message for --to.")
@click.option("--interactive", "-i", is_flag=True,
              help="Ask yes or no for each changed path (on a terminal only; q: no to it and the rest) and write only "
                   "those answered yes; "
                   "a yes to a path `sandbox diff` marks NEEDS is its --allow-surface or --allow-symlink.")
@click.option("--allow-surface", "surfaces", metavar="PATH", multiple=True,
              help="Also write this file that host tools run or trust (a surface `sandbox diff` marks NEEDS "
                   "--allow-surface, e.g. packages/x/.npmrc), or everything below this surface directory. "
                   "Repeat it per path.")
@click.option("--allow-symlink", "symlinks", metavar="PATH", multiple=True,
              help="Also write this symlink, if it resolves inside the workspace and out of every refused path "
                   "on the tree apply leaves. Repeat it per link.")
@click.option("--checkpoint", "number", type=int, metavar="N",
              help="Apply checkpoint N (`sandbox checkpoints NAME`) instead of the one `sandbox diff` showed last.")
@json_option("What was written (or committed) and refused, as JSON on stdout.")
@limit_options
def apply_(name: str, branch: str | None, message: str, interactive: bool, surfaces: tuple[str, ...],
           symlinks: tuple[str, ...], number: int | None, as_json: bool, max_file_size: int | None,
           max_copy_size: int | None) -> None:
    """Write the agent's changes in the copy NAME to the host tree (or a new branch).

    What is written is the checkpoint `sandbox diff NAME` showed last, and only while the copy is
    still that tree: after a rewind or any change since, nothing is written and a new diff is asked
    for (exit 120); --checkpoint N writes checkpoint N on purpose; with no diff yet, the copy as it
    is now, frozen into a new checkpoint first. All or nothing: where the host tree changed since
    the copy was taken, nothing is written and the conflicts are listed (exit 119); a write that
    fails half-way (a full disk) is undone, the tree left as it was (exit 120). Refused changes (see `sandbox diff`)
    never leave the copy; surfaces and symlinks only with a per-path --allow-surface /
    --allow-symlink (or a yes to -i), and a yes that cannot be honoured writes nothing (exit 120), nor
    do files over the size limits (exit 120). -i asks before anything is written and writes the paths
    answered yes, all or nothing as ever (q: no to that path and the rest; Ctrl-C or the end of input:
    nothing is written, exit 130 or 120); without a terminal on stdin it is refused (exit 120).
    The last line (and "remaining" in --json) says how many changes wait for a per-path yes or were
    answered no. The copy stays until `sandbox discard NAME`; applying again is a no-op.

    \b
    Examples:
      sandbox apply sandbox-myrepo -i
      sandbox apply sandbox-myrepo --to agent-work   # onto a new branch
    """
    import sys

    from launcher.copies import review
    from launcher.errors import PolicyError, Problem
    from launcher.usecases import copywork

    if branch and symlinks:   # links are judged on the tree apply leaves; a branch is no such tree
        raise click.UsageError("--allow-symlink goes without --to: apply to the tree, then commit it yourself")
    if interactive and not sys.stdin.isatty():
        raise PolicyError([Problem(file="command line", path="-i", expected="a terminal on stdin to ask on",
                                   found="stdin is not a terminal; nothing was written",
                                   hint=f"name the paths with --allow-surface / --allow-symlink, or review with "
                                        f"`sandbox diff {name}` and apply without -i")])
    done = copywork.apply(_engine(), name, number=number, cap=_limits(max_file_size, max_copy_size),
                          allowed=review.Allowed.given(surfaces=surfaces, symlinks=symlinks), branch=branch or "",
                          message=message, choose=ask if interactive else None,
                          refusals=lambda refused: [click.echo(f"sandbox: {line}", err=True)
                                                    for line in review.refusal_lines(refused)])
    left = "; ".join(([f"{len(done.skipped)} answered no"] if done.skipped else [])
                     + ([f"{len(done.needing)} not written without a per-path yes"] if done.needing else []))
    left = f"; {left}: work remains in the copy (`sandbox diff {name}` shows it)" if left else ""
    fields = {"copy": name, "workspace": done.copy.workspace, "checkpoint": done.checkpoint,
              "refused": [c["path"] for c in done.refused], "remaining": done.remaining}
    if branch:
        click.echo(f"sandbox: committed {done.committed} changes of checkpoint {done.checkpoint} as {done.commit[:12]} "
                   f"on branch {branch}{left}", err=True)
        if as_json:
            emit(envelope(fields | {"branch": branch, "commit": done.commit, "committed": done.committed}))
        return
    listed = sum(1 for c in done.refused if c["path"] not in done.needing and not review.git_record(c))
    click.echo(f"sandbox: applied {done.written} changes of checkpoint {done.checkpoint} to {done.copy.workspace}"
               + (f" ({done.already} were there already)" if done.already else "")
               + (f"; {listed} refused" if listed else "") + left, err=True)
    if as_json:
        emit(envelope(fields | {"written": done.written, "already": done.already}))


@click.command(short_help="Drop a copy and its checkpoints.")
@_COPY
@click.option("--yes", "-y", is_flag=True, help="Drop it without asking, also with changes not applied to the host tree.")
@click.option("--dry-run", is_flag=True, help="Say what dropping it would lose; drop nothing.")
@json_option("Whether it was dropped and what it held that the host tree lacks, as JSON on stdout.")
def discard(name: str, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Drop the copy NAME with its checkpoints (the host tree is not touched).

    It says how many of the copy's changes are not on the host tree (`sandbox apply` never wrote
    them) and asks on a terminal; elsewhere a copy with such work, or one that cannot be read, is
    dropped only with --yes (exit 120 without). A copy whose work is all on the host goes as is.

    \b
    Example:
      sandbox discard sandbox-myrepo --dry-run
    """
    from launcher.host import host
    from launcher.usecases import copywork

    asking = host.is_interactive() and not yes and not dry_run
    done = copywork.discard(_engine(), name, yes=yes, dry_run=dry_run, confirm=_confirm if asking else None)
    if dry_run:
        said, code = f"would discard {done.what}; nothing was dropped", 0
    elif not done.dropped:
        said, code = f"kept {name}: nothing was dropped", 1
    else:
        said, code = f"discarded {done.what}", 0
    click.echo(f"sandbox: {said}", err=True)
    if as_json:   # unapplied: None when the copy could not be read (uncounted says why)
        emit(envelope({"workspace": done.copy.workspace, "dropped": done.dropped, "dry_run": dry_run,
                       "unapplied": done.unapplied, "uncounted": done.why}, exit_code=code, error=said if code else ""))
    if code:
        raise click.exceptions.Exit(code)


def _confirm(text: str) -> bool:
    try:
        return click.confirm(text, default=False, err=True)
    except click.exceptions.Abort:
        return False


@click.command(short_help="Take a checkpoint of a copy now.")
@_COPY
@click.option("--message", "-m", default="by hand", show_default=True, help="What this checkpoint is.")
@_MAX_COPY
@json_option("The checkpoint taken as JSON on stdout (as `sandbox checkpoints --json` lists it).")
def checkpoint(name: str, message: str, max_copy_size: int | None, as_json: bool) -> None:
    """Take a checkpoint of the copy NAME now (a running sandbox is paused meanwhile).

    \b
    Example:
      sandbox checkpoint sandbox-myrepo -m "before the refactor"
    """
    from launcher.copies import store

    taken = store.checkpoint(_engine(), name, message, _limits(None, max_copy_size))
    click.echo(f"sandbox: checkpoint {taken['id']} of {name}", err=True)
    if as_json:
        emit(envelope({"checkpoint": taken}))


@click.command(short_help="List the checkpoints of a copy.")
@_COPY
@json_option("Every checkpoint as JSON on stdout (an array).")
def checkpoints(name: str, as_json: bool) -> None:
    """List the checkpoints of the copy NAME (0: the copy as made, or a fork's start; one at the end of each run).

    \b
    Example:
      sandbox checkpoints sandbox-myrepo --json
    """
    from launcher.copies import store

    found = store.checkpoints(_engine(), name)
    if as_json:
        emit(found)
        return
    click.echo(f"{'ID':>4}  {'TAKEN':19}  {'ENTRIES':>7}  WHAT")
    for c in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["time"]))
        mark = "   (shown by the last `sandbox diff`: what `sandbox apply` writes while the copy is unchanged)" if c.get("reviewed") else ""
        click.echo(f"{c['id']:>4}  {when}  {c['entries']:>7}  {c['message']}{mark}")


@click.command(short_help="Put a copy back to an earlier checkpoint.")
@_COPY
@click.argument("checkpoint_id", metavar="ID", type=int)
@_MAX_COPY
@json_option("The checkpoint it is back at and the one taken of what it held, as JSON on stdout.")
def rewind(name: str, checkpoint_id: int, max_copy_size: int | None, as_json: bool) -> None:
    """Put the copy NAME back as it was at checkpoint ID. What it held before becomes a new
    checkpoint first, so a rewind can be undone with another rewind.

    \b
    Example:
      sandbox rewind sandbox-myrepo 1
    """
    from launcher.copies import store

    before = store.rewind(_engine(), name, checkpoint_id, _limits(None, max_copy_size))
    click.echo(f"sandbox: {name} is back at checkpoint {checkpoint_id}; what it held is checkpoint {before['id']}",
               err=True)
    if as_json:
        emit(envelope({"checkpoint": checkpoint_id, "before": before}))


@click.command(name="fork", short_help="Make an independent copy of a copy, as it is or at a checkpoint.")
@_COPY
@click.argument("new", metavar="NEW", callback=new_name)
@click.option("--at", "number", type=int, metavar="CHECKPOINT",
              help="Fork checkpoint CHECKPOINT (`sandbox checkpoints NAME`) instead of the copy as it is now.")
@_MAX_COPY
@json_option("The new copy, its origin and the checkpoint it was made from, as JSON on stdout.")
def fork_(name: str, new: str, number: int | None, max_copy_size: int | None, as_json: bool) -> None:
    """Make the copy NEW from the copy NAME as it is now (frozen into a checkpoint first, a running
    sandbox paused meanwhile) or at --at CHECKPOINT, so that two agents can try two approaches.

    NEW has the same workspace, base and trust key as NAME, and volumes of its own: what one agent
    does never reaches the other. `sandbox diff NEW` shows NAME's changes up to the fork and NEW's
    own; `sandbox up --name NEW` or `sandbox run --name NEW` works on it. After one of them is
    applied, `sandbox apply` of the other refuses where both changed a path differently (exit 119).

    \b
    Example:
      sandbox fork sandbox-myrepo sandbox-myrepo-b --at 2
    """
    from launcher.copies import fork

    made = fork.fork(_engine(), name, new, number, _limits(None, max_copy_size))
    held = "no changes" if made.changes == 0 else "changes not counted" if made.changes is None else \
        f"{made.changes} change{'s' if made.changes != 1 else ''}"
    click.echo(f"sandbox: forked {name} at checkpoint {made.checkpoint} as {new} in {made.seconds:.1f} s ({held}); "
               f"work on it: sandbox up --name {new} {made.workspace}", err=True)
    if as_json:
        emit(envelope({"copy": new, "origin": name, "checkpoint": made.checkpoint, "workspace": made.workspace,
                       "changes": made.changes, "seconds": round(made.seconds, 3)}))


COMMANDS = (diff, apply_, discard, checkpoint, checkpoints, rewind, fork_)
