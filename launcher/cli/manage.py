"""The `sandbox` commands that manage what exists: exec, ls, down, gc, logs, images."""

from __future__ import annotations

import sys

import click

from launcher.cli import complete
from launcher.cli.options import Defaulted, down_strict_option, json_option, name_argument
from launcher.cli.output import Console, attach, emit, envelope, error, print_changes
from launcher.errors import ExitCode
from launcher.values import show, visible


@click.command(name="exec", short_help="Run a command in a running sandbox.")
@click.option("--interactive", "-i", is_flag=True, help="With -t: COMMAND's stdin is yours, on a terminal (-it).")
@click.option("--tty", "-t", is_flag=True, help="With -i: a terminal for COMMAND, resized with yours; Ctrl-C reaches it.")
@name_argument()
@click.argument("command", nargs=-1, required=True)
@json_option("Its exit code and when NAME was last proven as JSON on stdout (COMMAND's output goes to stderr).")
def exec_(interactive: bool, tty: bool, name: str, command: tuple[str, ...], as_json: bool) -> None:
    """Run COMMAND in the running sandbox NAME, streaming its output (no stdin), or with -it on a
    terminal of its own, as `sandbox shell` runs a shell. It first says when NAME was last proven
    (its start, or `sandbox up` attaching to it again). The exit code is COMMAND's own.

    \b
    Example:
      sandbox exec sandbox-myrepo -- git status
      sandbox exec sandbox-myrepo --json -- make test 2>test.log
      sandbox exec -it sandbox-myrepo -- python3
    """
    from launcher.engine import engine
    from launcher.host import proven
    from launcher.launch import sandboxes

    if interactive or tty:
        if not (interactive and tty) or as_json:
            raise click.UsageError("-i and -t go together (-it: COMMAND on a terminal of its own), without --json")
        sys.exit(attach(name, list(command), "sandbox exec -it"))
    code = sandboxes.exec_in(engine.connect(), name, list(command),
                             Console(agent_stdout=sys.stderr.buffer if as_json else None), say_proven=True)
    if as_json:
        emit(envelope({"argv": list(command), "proven": proven.last(name)}, exit_code=code))
    sys.exit(code)


@click.command(name="ls", short_help="List sandboxes, copies and home volumes.")
@json_option("Every item as JSON on stdout (an array).")
def ls_(as_json: bool) -> None:
    """List sandboxes (and leftovers) created by this tool.

    For copies, CHANGES is what their last checkpoint counted (the end of a run, `sandbox down`,
    `diff`, `checkpoint`): read from the copies' volumes at once, without a tools container.
    TRUST is the key of the policy's reach that a home volume or copy was written under: state is
    only ever mounted into a sandbox of the same key ("unkeyed": made before keys, never mounted
    again). KEEPS (with --json) names what persists after each sandbox. ENDS is when a running
    `up` session ends at the latest (limits.session, or as `sandbox extend` moved it), and the idle
    time that ends it sooner. PORTS are
    those `up --port` forwards from the host's 127.0.0.1, HOST_PORT->PORT ("(stopped)" when its
    forwarding process ended).

    \b
    Example:
      sandbox ls --json
    """
    from dataclasses import asdict

    from launcher.engine import engine
    from launcher.launch import sandboxes

    items = sandboxes.ls(engine.connect())
    if as_json:
        emit([asdict(i) for i in items])
        return
    click.echo(f"{'NAME':40} {'KIND':8} {'STATE':9} {'POLICY':12} {'CHANGES':10} {'TRUST':12} {'ENDS':14} "
               f"{'PORTS':16} WORKSPACE")
    for i in items:
        click.echo(f"{i.name:40} {i.kind:8} {i.state:9} {i.policy:12} {_changes(i):10} {i.trust:12} {_ends(i):14} "
                   f"{_ports(i):16} {i.workspace}")


def _ends(item) -> str:
    """A running session's latest end (local time; the date when not today) and its idle limit."""
    import time

    if not item.ends:
        return "-"
    shown = "%H:%M" if time.localtime(item.ends)[:3] == time.localtime()[:3] else "%d %b %H:%M"
    return f"{time.strftime(shown, time.localtime(item.ends))}/{show('limits.idle', item.idle)}"


def _ports(item) -> str:
    return ",".join(f"{p.host_port}->{p.port}" + ("" if p.forwarded else "(stopped)") for p in item.ports) or "-"


def _changes(item) -> str:
    """A copy's changes as its last checkpoint counted them (a copy in use may hold others by now)."""
    if item.kind != "copy":
        return "-"
    if item.changes is None:
        return "?"
    return "none" if not item.changes else f"{item.changes} file" + ("s" if item.changes > 1 else "")


def _print_surfaces(reports, failing: bool) -> None:
    """Each removed sandbox's surface report on stderr. `failing`: exit 123 once the caller has said the rest."""
    for report in reports:
        click.echo(f"sandbox: {report.sandbox} on {report.workspace}:", err=True)
        print_changes(report.changes, failing)


def _finish(as_json: bool, data: dict, code: int) -> None:
    """The command's JSON object on stdout (--json), then its exit code."""
    if as_json:
        emit(envelope(data, exit_code=code))
    sys.exit(code)


@click.command(short_help="Stop and remove a sandbox.")
@name_argument()
@click.option("--purge", is_flag=True, help="Also remove the agent's home volumes of NAME's workspace (home.mode "
              "volume: logins, settings, history; whatever the agent left there).")
@down_strict_option
@json_option("What was removed and kept, and the surfaces the agent changed, as JSON on stdout.")
def down(name: str, purge: bool, strict: bool, as_json: bool) -> None:
    """Stop (SIGTERM, then a grace period) and remove the sandbox NAME, then say what the agent
    changed among the files host tools run or trust (exit 123 for that under CI=true or --strict).

    \b
    Example:
      sandbox down sandbox-myrepo --purge
    """
    _finish(as_json, *take_down(name, purge, strict))


def take_down(name: str, purge: bool = False, strict: bool = False) -> tuple[dict, int]:
    """`sandbox down NAME` (launcher.usecases.remove.down) said on stderr (also before `up` starts
    an ended sandbox anew): its --json fields and its exit code."""
    from launcher.engine import engine
    from launcher.usecases import remove

    done = remove.down(engine.connect(), name, purge=purge, strict=strict)
    gone = done.down
    click.echo(f"sandbox: removed {name}" + "".join(f", {v}" for v in gone.removed), err=True)
    for volume in gone.kept:
        click.echo(f"sandbox: kept the home volume {volume}", err=True)
    copy = gone.copy
    if copy and gone.dropped:
        click.echo(f"sandbox: no changes: copy {copy} dropped", err=True)
    elif copy:
        counted = "" if gone.changes is None else f" ({gone.changes} changed)"
        click.echo(f"sandbox: its work stays in the copy {copy}{counted}: `sandbox diff {copy}`, "
                   f"`sandbox apply {copy}`, `sandbox discard {copy}`", err=True)
    reports = (done.surfaces,) if done.surfaces else ()
    _print_surfaces(reports, done.failing)
    _say_record(done.record)
    written = done.record
    return {"removed": [name, *gone.removed], "kept": list(gone.kept),
            "copy": copy and {"name": copy, "changes": gone.changes, "dropped": gone.dropped},
            "workspace_changes": remove.to_json(reports).get(name, []),
            "attestation": written and {"path": written.path, "signed": written.signed,
                                        "written": not written.problem, "error": written.problem}}, done.exit_code


def _say_record(written) -> None:
    """`up --attest`: the removed sandbox's record, written or kept (records.Written; None: none asked)."""
    if written is None:
        return
    if written.problem:
        error(f"{written.problem} (kept: `sandbox gc` tries again)")
    else:
        click.echo(f"sandbox: attestation record written to {written.path} "
                   f"({'signed' if written.signed else 'unsigned'})", err=True)


@click.command(short_help="Remove what a killed launcher left behind.")
@click.option("--all", "everything", is_flag=True,
              help="Also remove running `up` sandboxes and those compose or `docker run` launched.")
@click.option("--force", is_flag=True, help="Also drop copies whose changes were never applied (says how many).")
@click.option("--volumes", is_flag=True, help="Also remove the agents' home volumes (home.mode volume) no sandbox uses.")
@json_option("What was removed and kept as JSON on stdout.")
def gc(everything: bool, force: bool, volumes: bool, as_json: bool) -> None:
    """Remove sandboxes of ours left behind (stopped, or whose launcher died) with their proxies
    and networks, probe volumes and files of earlier probe versions, and copies whose work is on the host
    tree already. A copy with unapplied changes stays unless --force; home volumes stay unless --volumes.

    \b
    Example:
      sandbox gc --force   # also copies whose changes were never applied
    """
    from launcher.engine import engine
    from launcher.usecases import remove

    done = remove.gc(engine.connect(), everything=everything, force=force, volumes=volumes, progress=Console().status)
    named, copies = list(done.removed), []
    for verdict in done.copies:
        copies.append({"name": verdict.name, "removed": verdict.removed, "unapplied": verdict.pending}
                      | ({"error": verdict.error} if verdict.error else {}))
        if verdict.removed:
            named.append(verdict.name + (f" (with {verdict.pending} unapplied changes)" if verdict.pending else
                                         " (its changes could not be counted)" if verdict.pending is None else ""))
        elif verdict.error:
            click.echo(f"sandbox: kept the copy {verdict.name}: it could not be read ({visible(verdict.error, keep_lines=False)}); "
                       f"`sandbox discard {verdict.name}` drops it", err=True)
        else:
            click.echo(f"sandbox: kept the copy {verdict.name}: {verdict.pending} changes not applied "
                       f"(`sandbox diff {verdict.name}`; `sandbox gc --force` drops them)", err=True)
    click.echo(f"sandbox: removed {len(named)}: {', '.join(named)}" if named else "sandbox: nothing to remove", err=True)
    _print_surfaces(done.surfaces, failing=False)
    for _, written in done.records:
        _say_record(written)
    _finish(as_json, {"removed": list(done.removed) + [c["name"] for c in copies if c["removed"]], "copies": copies,
                      "workspace_changes": remove.to_json(done.surfaces)}, 0)


@click.command(short_help="Show what a sandbox tried to reach (egress), per request.")
@name_argument(required=False)
@click.option("--egress", is_flag=True, help="The egress proxy's record (the only log kept, so the default).")
@click.option("--allowed", is_flag=True, help="List every request, not only the refused and would-refuse ones.")
@json_option("Every request as JSON on stdout (an array; [] when the preset has no egress).")
@click.option("--format", "fmt", type=click.Choice(["text", "ocsf"]), default="text", show_default=True,
              help="ocsf: every request as an OCSF HTTP Activity event (class 4002), one JSON object per line.")
@click.option("--suggest", is_flag=True, help="Learn mode: print the narrowest network.allow entries that would have "
              "admitted what was refused, and from a run with rules per request (best in audit mode) an http: "
              "{methods, paths} rule per host, as a policy snippet (never applied).")
@click.option("--report", "report_path", type=click.Path(exists=True, dir_okay=False),
              help="Read the requests from a `sandbox run --report` file instead (the sandbox is gone after a run).")
def logs(name: str | None, egress: bool, allowed: bool, as_json: bool, fmt: str, suggest: bool,
         report_path: str | None) -> None:
    """Show what the sandbox NAME (or a run's report) tried to reach through its egress proxy, one
    request per line: time, decision (refused; would-refuse: let through by a rule in audit mode;
    allowed), method, host:port, path (known for a request the proxy read: plain HTTP, or decrypted
    for a host with http: rules; a tunnel has none) and why. Without --allowed only the refused and
    would-refuse requests are listed. A sandbox whose preset has no network (network: none) has no
    egress to show, and says so. The probe's own test requests are never shown nor suggested.

    \b
    Example:
      sandbox logs sandbox-myrepo --allowed
      sandbox logs sandbox-myrepo --suggest          # after a run with http: {mode: audit}
      sandbox logs sandbox-myrepo --format ocsf > egress.ocsf.jsonl
    """
    from launcher.egress.audit import counts, from_report, listing, suggest as learn, suggestion_yaml, with_changes
    from launcher.egress.learn import suggest_http

    if bool(name) == bool(report_path):
        raise click.UsageError("give a sandbox NAME or --report FILE")
    if fmt == "ocsf" and (as_json or suggest):
        raise click.UsageError("--format ocsf writes JSON lines of its own: without --json or --suggest")
    if report_path:
        events = from_report(report_path)
    else:
        from launcher.engine import engine
        from launcher.launch import sandboxes

        connected = engine.connect()
        events = sandboxes.egress_log(connected, name)
    if events is None:
        _no_egress(as_json, suggest, fmt)
        return
    if suggest:
        entries, skipped = learn(events)
        http, unsuggested = suggest_http(events)
        click.echo(suggestion_yaml(entries, skipped + unsuggested, sum(1 for e in events if e.denied and e.reason == "-"),
                                    tuple(http)))
        return
    changes = () if report_path else sandboxes.rule_changes(connected, name)   # `sandbox egress`
    if fmt == "ocsf":
        from launcher.egress.ocsf import lines

        for line in lines(events, sandbox=name or "", changes=changes):
            click.echo(line)
        return
    if as_json:
        emit(with_changes(events, changes))
        return
    import time

    from launcher import tables
    from launcher.cli.output import columns
    from launcher.values import visible

    click.echo(counts(events))
    for change in changes:
        click.echo(f"  {time.strftime('%H:%M:%S', time.gmtime(change.time))}  rule changed: {change.action} "
                   f"{visible(change.rule, keep_lines=False)}  reason: {visible(change.reason, keep_lines=False)}")
    rows = listing(events, allowed)
    if len(rows) > 1:
        for line in tables.table(rows, columns() or sys.maxsize):
            click.echo("  " + line)
    if not allowed and any(e.decision == "allowed" for e in events):
        click.echo("  (--allowed lists the allowed requests too)")


def _no_egress(as_json: bool, suggest: bool, fmt: str = "text") -> None:
    """`logs` of a sandbox without a network: nothing left it, so nothing to show or learn."""
    said = "no egress in this preset (network: none)"
    if suggest:
        click.echo(f"# {said}: nothing to allow")
    elif fmt == "ocsf":
        click.echo(f"sandbox: {said}", err=True)
    elif as_json:
        emit([])
        click.echo(f"sandbox: {said}", err=True)
    else:
        click.echo(said)


@click.group(short_help="Build the bundled images.")
def images() -> None:
    """Build the bundled images (agent, probe, proxy).

    \b
    Example:
      sandbox images build --agent claude-code
    """


@images.command(cls=Defaulted, short_help="Build the bundled images that are missing.", defaults={"ca_files": "--ca-bundle"})
@click.option("--force", is_flag=True, help="Rebuild even if present.")
@click.option("--full", is_flag=True, help="Also build the full agent image (sandbox/agent:bookworm-full: git, make, "
                                            "gcc, pip and venv, Node and npm, jq, ripgrep, curl, unzip, less).")
@click.option("--agent", "agent_names", multiple=True, metavar="NAME", shell_complete=complete.agents,
              help="Also build this agent's image (`sandbox agents`); repeatable.")
@click.option("--ca-bundle", "ca_bundles", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Trust these CA certificates (PEM) while an agent image downloads its CLI, e.g. behind a "
                   "TLS-intercepting proxy (default: the host's extra CAs in /usr/local/share/ca-certificates). "
                   "Certificates only: a private key is refused.")
def build(force: bool, full: bool, agent_names: tuple[str, ...], ca_bundles: tuple[str, ...]) -> None:
    """Build the bundled images that are missing (makes the base image if needed).

    \b
    Example:
      sandbox images build --force
    """
    from pathlib import Path

    from launcher import agents
    from launcher.engine import engine, images as imgs

    console = Console()
    eng = engine.connect()
    for image in (imgs.probe_image(), imgs.proxy_image(), imgs.agent_image()) + ((imgs.full_image(),) if full else ()):
        if not imgs.build(eng, image, console.status, force=force):
            console.status(f"{image.tag} is present")
    cas = [Path(p) for p in ca_bundles] or imgs.extra_ca_files()
    for name in agent_names:
        try:
            profile = agents.get(name)
        except KeyError as exc:
            raise click.BadParameter(str(exc).strip("'\""), param_hint="--agent") from None
        if profile.image:
            image = imgs.build_agent(eng, profile.image, console.status, cas, force=force)
            console.status(f"{image.tag} is ready")


@images.command(short_help="Create debian:bookworm-slim with debootstrap.")
def bootstrap() -> None:
    """Create debian:bookworm-slim locally with debootstrap (for hosts without a registry).

    \b
    Example:
      sandbox images bootstrap && sandbox images build
    """
    from launcher.engine import engine, images as imgs

    imgs.bootstrap(engine.connect(), Console().status)


COMMANDS = (exec_, ls_, down, gc, logs, images)
