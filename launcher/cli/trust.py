"""`sandbox trust list|approve|revoke`: the repository policies (`.sandbox.yaml`) approved on this
machine, the same approvals `run` records when you answer yes in a terminal."""

from __future__ import annotations

import json
import shlex

import click

from launcher.cli import output


@click.group(short_help="List, approve or revoke repository policies.")
def trust() -> None:
    """A workspace's .sandbox.yaml is applied only once its exact content was approved on this
    machine (its SHA-256, recorded outside every workspace). These commands show, record and
    remove those approvals; `run` and `up` ask the same question in a terminal.

    \b
    Example:
      sandbox trust approve -w ~/src/repo    # shows the file and its digest, asks y/N
      sandbox trust list
      sandbox trust revoke -w ~/src/repo
    """


def _state(approval) -> str:
    """Whether the workspace's file is still the approved one."""
    from launcher.errors import PolicyError
    from launcher.host import hostfiles
    from launcher.policy import trust as tofu

    try:
        source = hostfiles.repo_policy_file(approval.workspace)
    except PolicyError as exc:   # a symlink or a FIFO there now: say so, list the rest
        return f"unreadable now: {exc.problems[0].found}"
    if source is None:
        return "no .sandbox.yaml now"
    return "current" if tofu.sha256(source.approval) == approval.sha256 else "changed since"


@trust.command(name="list", short_help="List the approved repository policies.")
@click.option("--json", "as_json", is_flag=True, help="The approvals as JSON.")
def list_(as_json: bool) -> None:
    """List the approved (workspace, SHA-256) pairs, when each was approved, and whether the
    workspace's .sandbox.yaml is still that content.

    \b
    Example:
      sandbox trust list --json
    """
    from launcher.host import approvals
    from launcher.values import visible

    store_path, items = approvals.listed()
    rows = [{"workspace": a.workspace, "sha256": a.sha256, "approved_at": a.approved_at, "state": _state(a)}
            for a in items]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        output.status(f"no repository policy is approved on this machine ({store_path})")
    for row in rows:
        click.echo(f"{visible(row['workspace'], keep_lines=False)}  sha256 {row['sha256']}  "
                   f"{row['approved_at']}  {row['state']}")


def _source(workspace: str):
    """(the workspace's real path, its .sandbox.yaml), validated; errors in words when there is none."""
    from launcher.errors import PolicyError, Problem
    from launcher.host import hostfiles, hostpaths
    from launcher.pipeline import stack
    from launcher.policy.layers import LayerKind

    ws = hostpaths.workspace_real(workspace)
    source = hostfiles.repo_policy_file(ws)
    if source is None:
        raise PolicyError([Problem(file=f"{ws}/.sandbox.yaml", path="", expected="a repository policy to approve",
                                   found="no such file", hint="a repository policy is the file .sandbox.yaml at the "
                                                              "workspace root; -w names the workspace")])
    stack.parse_layer(source.data, source.path, LayerKind.REPO)   # an invalid file is refused, never approved
    return ws, source


@trust.command(short_help="Approve a workspace's .sandbox.yaml after showing it.")
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The workspace whose .sandbox.yaml to approve.")
@click.option("--yes", "-y", is_flag=True, help="Approve without asking (what is shown is still printed).")
@click.option("--sha256", "pin", metavar="SHA256",
              help="Approve only if the file's SHA-256 is this (non-interactive; as `sandbox check` prints it).")
def approve(workspace: str, yes: bool, pin: str | None) -> None:
    """Show the workspace's .sandbox.yaml (or its diff against the content approved last) with its
    SHA-256, then record the approval. In a terminal it asks y/N; elsewhere it needs --yes, or
    --sha256 with the digest you reviewed.

    \b
    Example:
      sandbox trust approve -w ~/src/repo --sha256 SHA256   # without a terminal: only this content
    """
    from launcher.host import approvals, host
    from launcher.pipeline import stack
    from launcher.policy import trust as tofu

    wanted = None if pin is None else tofu.normalise_pin(pin)
    if pin is not None and wanted is None:
        raise click.BadParameter("expected a SHA-256 digest (64 hex digits), as `sandbox check` prints it",
                                 param_hint="--sha256")
    ws, source = _source(workspace)
    digest, last = tofu.sha256(source.approval), approvals.previous(ws)
    if last is not None and last.sha256 == digest:
        output.status(f"{source.path} is approved already (sha256 {digest}, {last.approved_at})")
        return
    effect = f"  it can only narrow; `sandbox check -w {shlex.quote(ws)}` says what, on your base policy"
    effect += stack.defaults_effect(source.data, source.path, "`sandbox config -w` shows them")
    click.echo(tofu.review_text(source.path, source.approval, last, effect), err=True)
    if wanted is not None and wanted != digest:
        raise tofu.refusal(source.path, source.approval, tofu.Status.NEW, wanted, flag="--sha256")
    if wanted is None and not yes:
        if not host.is_interactive():
            raise click.UsageError(f"no terminal to ask: after review, pass --sha256 {digest} (or --yes)")
        try:
            answer = click.confirm("Approve this repository policy?", default=False, err=True)
        except click.exceptions.Abort:   # Ctrl-D: no answer is a no
            answer = False
        if not answer:
            raise tofu.declined(source.path)
    store_path = approvals.record(ws, source.approval)
    output.status(f"approved {source.path} (sha256 {digest}), recorded in {store_path}")


@trust.command(short_help="Revoke the approval of a workspace's .sandbox.yaml.")
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The workspace whose approval to remove (it need not exist any more).")
def revoke(workspace: str) -> None:
    """Remove the approval of the workspace's repository policy: the next `run` asks again (or
    refuses, outside a terminal).

    \b
    Example:
      sandbox trust revoke -w ~/src/repo
    """
    from launcher.host import approvals, hostpaths

    removed = approvals.revoke(hostpaths.workspace_real(workspace))
    output.status(f"revoked the approval of {removed.workspace}/.sandbox.yaml (sha256 {removed.sha256})")


COMMANDS = (trust,)
