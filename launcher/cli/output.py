"""What the CLI writes for people: status lines, colour (only on a terminal, NO_COLOR unset or
empty, TERM not dumb; --json, reports, step summaries and pipes stay plain), the launch listener."""

from __future__ import annotations

import contextlib
import sys

import click

from launcher.style import ADDED, BAD, GOOD, HEADER, HUNK, REMOVED, WARN, Mark, plain
from launcher.values import visible

_LOOK = {GOOD: {"fg": "green"}, WARN: {"fg": "yellow"}, BAD: {"fg": "red", "bold": True},
         ADDED: {"fg": "green"}, REMOVED: {"fg": "red"}, HEADER: {"bold": True}, HUNK: {"fg": "cyan"}}
# Status lines that open with a verdict; only that word is coloured, the message stays as it is.
_STATUS = (("probe passed", GOOD), ("error:", BAD), ("warning:", WARN), ("egress blocked", WARN),
           ("agent timed out", WARN), ("built", GOOD), ("created", GOOD))


def colour_on(err: bool = False) -> bool:
    """Whether stdout (stderr with `err`) may carry colour now."""
    from launcher import host

    isatty = getattr(sys.stderr if err else sys.stdout, "isatty", None)
    return bool(isatty and isatty()) and host.colour_allowed()


def marker(err: bool = False) -> Mark:
    """A Mark for renderers: colour for this stream when allowed, else the text unchanged."""
    if not colour_on(err):
        return plain
    return lambda text, kind: click.style(text, **_LOOK[kind])


def columns() -> int | None:
    """The terminal's width (COLUMNS first), or None when stdout is no terminal: a pipe or a file
    gets whole lines, for grep."""
    import shutil

    return shutil.get_terminal_size(fallback=(0, 0)).columns or None


def page(lines: list[str], pager: bool = True) -> None:
    """lines on stdout; on a terminal (and with `pager`) through $PAGER, by default `less -FRX`
    (short text just prints, colour passes, the screen is left as it was). PAGER set empty or to
    `cat` prints directly; so does a pager that cannot start, after a warning. A pipe or a file
    never gets a pager."""
    import os
    import shlex
    import subprocess

    text = "\n".join(lines)
    command = os.environ.get("PAGER", "less -FRX" if os.environ.get("TERM") != "dumb" else "")
    if not (pager and sys.stdout.isatty()) or command.strip() in ("", "cat"):
        click.echo(text)
        return
    # as git does: less without options of the user's own gets these (a bare PAGER=less too)
    env = {"LESS": "FRX", "LV": "-c"} | dict(os.environ)
    try:
        proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, env=env)
    except (OSError, ValueError) as exc:
        status(f"warning: the pager {visible(command, keep_lines=False)} did not start ({exc}); printed directly")
        click.echo(text)
        return
    data = (text + "\n").encode(sys.stdout.encoding or "utf-8", errors="replace")
    try:
        proc.stdin.write(data)
    except (BrokenPipeError, KeyboardInterrupt):   # the reader quit the pager early, or pressed Ctrl-C in it
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        while proc.poll() is None:   # the pager owns the terminal until it ends; Ctrl-C is its own
            with contextlib.suppress(KeyboardInterrupt):
                proc.wait()


def status(message: str) -> None:
    """`sandbox: MESSAGE` on stderr, its opening verdict word coloured on a terminal."""
    mark = marker(err=True)
    for word, kind in _STATUS:
        if message.startswith(word):
            message = mark(word, kind) + message[len(word):]
            break
    click.echo(f"sandbox: {message}", err=True)


def error(message: str) -> None:
    status(f"error: {message}")


class Console:
    """Listener for the launch stage: status on stderr, agent output passed through; with a
    timeline (--timings), the phases too."""

    def __init__(self, agent_stdout=None, timeline=None):
        self.agent_stdout = agent_stdout or sys.stdout.buffer
        self.timeline = timeline

    def phase(self, name: str):
        return self.timeline.phase(name) if self.timeline is not None else contextlib.nullcontext()

    def status(self, message: str) -> None:
        status(message)

    def output(self, stream: str, data: bytes) -> None:
        target = self.agent_stdout if stream == "stdout" else sys.stderr.buffer
        target.write(data)
        target.flush()


def print_blocked(events, data: bool = False) -> None:
    """The blocked requests: a status line on stderr after a run; `data` (sandbox logs): on stdout."""
    from launcher.egress.audit import summarize

    blocked = summarize(tuple(e for e in events if e.denied))
    say = (lambda text: click.echo(text)) if data else status
    if not blocked:
        say("egress: nothing was blocked")
        return
    say(f"egress blocked ({sum(b.count for b in blocked)} requests):")
    for b in blocked:
        click.echo(f"  {visible(b.method, keep_lines=False)} {visible(b.host, keep_lines=False)}:{b.port}  x{b.count}",
                   err=not data)


def print_changes(changes, failing: bool) -> None:
    """The surface report on stderr: an error when it decides the exit code, else a warning."""
    from launcher.surfaces import render

    if changes:
        lines = render(changes)
        error(lines[0]) if failing else status(f"warning: {lines[0]}")
        click.echo("\n".join(lines[1:]), err=True)


def print_timings(timeline) -> None:
    """Each phase on stderr: when it began and how long it took, in ms from the CLI's imports."""
    status("timings (ms since the launcher's imports began; proxy-mode phases overlap):")
    for p in timeline.phases:
        click.echo(f"  {p.name:<14} {p.began * 1000:7.1f} {p.seconds * 1000:7.1f}", err=True)
    click.echo(f"  {'total':<14} {'':7} {timeline.total() * 1000:7.1f}", err=True)


def print_copy(outcome) -> None:
    """Where the agent's work is, and the commands that take it further (what the run's last
    checkpoint counted: no second look at the copy)."""
    name, count = outcome.copy, outcome.copy_changes
    if outcome.copy_dropped:
        status(f"no changes: copy {name} dropped")
    elif count == 0:
        status(f"no changes in the copy {name} now; it stays for its checkpoints "
               f"(`sandbox checkpoints {name}`; `sandbox discard {name}` drops it)")
    else:
        counted = f"{count} changed" if count is not None else "changes not counted"
        status(f"the agent's changes are in the copy {name} ({counted}); the host tree is as it was."
               f"\n  review: sandbox diff {name}   apply: sandbox apply {name}   drop: sandbox discard {name}")


def write_report(report: dict, path: str | None, as_json: bool) -> None:
    """A run's JSON report: to --report's file, on stdout with --json, and into the CI's step summary."""
    import json

    from launcher import host
    from launcher.targets import report as reports
    from launcher.targets import summary

    if path:
        reports.write(path, report)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    summary_path = host.step_summary_path()
    if summary_path:
        summary.append(summary_path, report)
