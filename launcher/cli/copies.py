"""Copy mode's commands: diff, apply, discard, checkpoint, checkpoints, rewind."""

from __future__ import annotations

import json
import time

import click

from launcher.cli.output import Console


def _engine():
    from launcher import engine, images

    eng = engine.connect()
    images.build(eng, images.agent_image(), Console().status)   # the tools container's image
    return eng


@click.command()
@click.argument("name")
@click.option("--stat", "as_stat", is_flag=True, help="One line per changed file, then the totals.")
@click.option("--json", "as_json", is_flag=True, help="Every change as JSON (paths, status, hashes, patch).")
def diff(name: str, as_stat: bool, as_json: bool) -> None:
    """Show what the agent changed in the copy NAME, against the tree it was copied from.

    New, deleted and changed files with their modes and sizes, symlinks with their targets; binary
    files summarised. Changes `sandbox apply` never carries back (git directories and protected
    paths on any case or Unicode spelling, setuid files, case collisions, symlinks that resolve
    outside or into those) are marked REFUSED; surfaces at any depth and symlinks are marked NEEDS
    with the flag that lets `apply` write them.
    """
    from launcher.copies import apply, review, store

    eng = _engine()
    copy = store.find(eng, name)
    found = apply.judged(copy.workspace, store.changes(eng, name, patch=True)["changes"], copy.protected,
                         review.Allowed(), preview=True)
    if as_json:
        click.echo(json.dumps({"copy": name, "workspace": copy.workspace, "changes": found}, indent=2))
        return
    if not found:
        click.echo(f"sandbox: no changes in {name}", err=True)
        return
    click.echo("\n".join(review.stat_lines(found) if as_stat else review.patch_lines(found)))


@click.command(name="apply")
@click.argument("name")
@click.option("--to", "branch", metavar="BRANCH", help="Commit the changes on this new branch of the host "
              "repository instead (from the commit the copy was taken from); the work tree stays as it is.")
@click.option("--message", "-m", default="Changes made in sandbox copy", show_default=True,
              help="Commit message for --to.")
@click.option("--allow-surface", "surfaces", metavar="PATH", multiple=True,
              help="Also write this file that host tools run or trust (a surface `sandbox diff` marks NEEDS "
                   "--allow-surface, e.g. packages/x/.npmrc), or everything below this surface directory. "
                   "Repeat it per path.")
@click.option("--allow-symlink", "symlinks", metavar="PATH", multiple=True,
              help="Also write this symlink, if it resolves inside the workspace and out of every refused path "
                   "on the tree apply leaves. Repeat it per link.")
def apply_(name: str, branch: str | None, message: str, surfaces: tuple[str, ...], symlinks: tuple[str, ...]) -> None:
    """Write the agent's changes in the copy NAME to the host tree (or a new branch).

    All or nothing: where the host tree changed since the copy was taken, nothing is written
    and the conflicts are listed (exit 119). Refused changes (see `sandbox diff`) never leave
    the copy; surfaces and symlinks only with a per-path --allow-surface / --allow-symlink, and a
    yes that cannot be honoured writes nothing (exit 120). The copy stays until `sandbox discard
    NAME`; applying again is a no-op.
    """
    from launcher.copies import apply, branch as branches, review, store
    from launcher.errors import PolicyError, Problem

    if branch and symlinks:   # links are judged on the tree apply leaves; a branch is no such tree
        raise PolicyError([Problem(file="command line", path="--allow-symlink", expected="no --to",
                                   found="--to " + branch, hint="apply to the tree, then commit it yourself")])
    eng = _engine()
    copy = store.find(eng, name)
    exported = apply.reviewed(copy.workspace, apply.read_export(store.export(eng, name), copy.protected),
                              copy.protected, review.Allowed.given(surfaces=surfaces, symlinks=symlinks))
    refused = [c for c in exported.changes if c["refused"]]
    for line in review.refusal_lines(refused):
        click.echo(f"sandbox: {line}", err=True)
    if branch:
        commit = branches.commit_to_branch(copy.workspace, exported, branch, message)
        click.echo(f"sandbox: committed {len(exported.applicable)} changes as {commit[:12]} on branch {branch}", err=True)
        return
    written, already = apply.apply_to_tree(copy.workspace, exported)
    click.echo(f"sandbox: applied {written} changes to {copy.workspace}"
               + (f" ({already} were there already)" if already else "")
               + (f"; {len(refused)} refused" if refused else ""), err=True)


@click.command()
@click.argument("name")
def discard(name: str) -> None:
    """Drop the copy NAME with its checkpoints (the host tree is not touched)."""
    from launcher.copies import store

    eng = _engine()
    store.find(eng, name)
    count = len(store.changes(eng, name)["changes"])
    store.discard(eng, name)
    click.echo(f"sandbox: discarded {name}" + (f" and its {count} unapplied changes" if count else ""), err=True)


@click.command()
@click.argument("name")
@click.option("--message", "-m", default="by hand", show_default=True, help="What this checkpoint is.")
def checkpoint(name: str, message: str) -> None:
    """Take a checkpoint of the copy NAME now (a running sandbox is paused meanwhile)."""
    from launcher.copies import store

    taken = store.checkpoint(_engine(), name, message)
    click.echo(f"sandbox: checkpoint {taken['id']} of {name}", err=True)


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def checkpoints(name: str, as_json: bool) -> None:
    """List the checkpoints of the copy NAME (0: the copy as made; one at the end of each run)."""
    from launcher.copies import store

    found = store.checkpoints(_engine(), name)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"{'ID':>4}  {'TAKEN':19}  {'ENTRIES':>7}  WHAT")
    for c in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["time"]))
        click.echo(f"{c['id']:>4}  {when}  {c['entries']:>7}  {c['message']}")


@click.command()
@click.argument("name")
@click.argument("checkpoint_id", metavar="ID", type=int)
def rewind(name: str, checkpoint_id: int) -> None:
    """Put the copy NAME back as it was at checkpoint ID. What it held before becomes a new
    checkpoint first, so a rewind can be undone with another rewind."""
    from launcher.copies import store

    before = store.rewind(_engine(), name, checkpoint_id)
    click.echo(f"sandbox: {name} is back at checkpoint {checkpoint_id}; what it held is checkpoint {before['id']}",
               err=True)


COMMANDS = (diff, apply_, discard, checkpoint, checkpoints, rewind)
