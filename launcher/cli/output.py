"""What the CLI writes: for people, status lines, colour (only on a terminal, NO_COLOR unset or
empty, TERM not dumb; --json, reports, step summaries and pipes stay plain), the launch listener;
for programs, the --json objects and the envelope they share (docs/library.md#the---json-envelope);
and the terminal `shell` and `exec -it` open in a running sandbox."""

from __future__ import annotations

import contextlib
import json
import os
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
    from launcher.host import host

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
    import shlex
    import subprocess

    from launcher.host import host

    text = "\n".join(lines)
    command, env = host.pager()
    if not (pager and sys.stdout.isatty()) or command.strip() in ("", "cat"):
        click.echo(text)
        return
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


_WORDS = {"y": "yes", "n": "no", "q": "quit"}


def question(text: str, answers: str = "yn", default: str = "n") -> str | None:
    """A question on the terminal: `text [y/N]: ` on stderr, its answer one line read from stdin
    (never stdout: that is --json's, or a pipe). The answer's letter (a letter of `answers`, or its
    word: yes, no, quit), `default` for an empty line, None at the end of input (Ctrl-D); anything
    else is asked again. Ctrl-C raises KeyboardInterrupt, as everywhere."""
    choices = "/".join(a.upper() if a == default else a for a in answers)
    while True:
        click.echo(f"{text} [{choices}]: ", nl=False, err=True)   # echo flushes: the prompt is out before the read
        line = sys.stdin.readline()
        if not line:
            click.echo(err=True)
            return None
        word = line.strip().lower()
        if not word:
            return default
        if word[0] in answers and word in (word[0], _WORDS.get(word[0])):
            return word[0]
        click.echo("  answer " + ", ".join(f"{a} ({_WORDS.get(a, a)})" for a in answers), err=True)


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


def print_blocked(events) -> None:
    """After a run, on stderr: the blocked requests summarized, and how many a rule in audit mode
    would have refused (`sandbox logs --report FILE` lists each)."""
    from launcher.egress.audit import summarize

    blocked = summarize(tuple(e for e in events if e.denied))
    audited = sum(1 for e in events if e.decision == "would-refuse")
    if not blocked:
        status("egress: nothing was blocked")
    else:
        status(f"egress blocked ({sum(b.count for b in blocked)} requests):")
        for b in blocked:
            click.echo(f"  {visible(b.method, keep_lines=False)} {visible(b.host, keep_lines=False)}:{b.port}  x{b.count}",
                       err=True)
    if audited:
        status(f"egress: {audited} requests would be refused by rules in audit mode (`sandbox logs --report FILE` "
               "lists them, `--suggest` proposes rules)")


def print_changes(changes, failing: bool) -> None:
    """The surface report on stderr: an error when it decides the exit code, else a warning."""
    from launcher.policy.surfaces import render

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


def write_report(result, path: str | None, as_json: bool) -> None:
    """A run's JSON report in the envelope: to --report's file, on stdout with --json, and into the
    CI's step summary. Its exit_code is the process's (an attestation record not written: 118)."""
    from launcher.host import host
    from launcher.targets import report as reports
    from launcher.targets import summary

    data = envelope(result.report | details(result.error), exit_code=result.exit_code,
                    error=result.report["error"] or result.attestation_problem or "",
                    sandbox=result.planned.plan.container.name if result.planned else None)
    if path:
        reports.write(path, data)
    if as_json:
        emit(data)
    summary_path = host.step_summary_path()
    if summary_path:
        summary.append(summary_path, data)


# What options.json_option and options.name_argument leave in the click context (shared by the
# group's and the command's contexts): the error handler answers in JSON with them.
JSON_COMMAND = "sandbox.json"        # --json was given to this command
JSON_LINES = "sandbox.json-lines"    # a stream (port): one object per line
JSON_DONE = "sandbox.json-done"      # the command's object is out: an error after it adds none
NAME = "sandbox.name"                # the sandbox or copy the command was given


def envelope(fields: dict, *, exit_code: int = 0, error: str = "", sandbox: str | None = None,
             command: str | None = None) -> dict:
    """A command's --json object: command, ok, exit_code, sandbox, error first (they win over a
    field of the same name), then the command's own fields."""
    ctx = click.get_current_context()
    head = {"command": command or ctx.command.name, "ok": exit_code == 0, "exit_code": exit_code,
            "sandbox": sandbox if sandbox is not None else ctx.meta.get(NAME), "error": error}
    return head | fields | head


def said(exc: BaseException) -> str:
    """An error's message as stderr says it, with any clean-up failure after it."""
    from launcher.errors import SandboxError, Terminated, secondary_failures

    if isinstance(exc, SandboxError):
        text = str(exc)
    elif isinstance(exc, click.exceptions.ClickException):
        text = exc.format_message()
    elif isinstance(exc, (KeyboardInterrupt, Terminated)):
        text = "interrupted by " + ("SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM")
    else:
        text = f"internal error: {type(exc).__name__}: {exc}"
    return "\n".join([text, *(f"also: {m}" for m in secondary_failures(exc))])


def details(exc: BaseException | None) -> dict:
    """The envelope's fields beside `error` when there is one: what to do, and each problem."""
    from dataclasses import asdict

    from launcher.errors import EngineError, PolicyError

    if exc is None:
        return {}
    return {"hint": exc.hint if isinstance(exc, EngineError) else "",
            "problems": [asdict(p) for p in exc.problems] if isinstance(exc, PolicyError) else []}


def emit(data, *, final: bool = True) -> None:
    """A --json answer on stdout: indented, or one line in a stream; every control character
    escaped (json.dumps leaves DEL as it is). `final`: the command's last object."""
    meta = click.get_current_context().meta
    click.echo(json.dumps(data, indent=None if meta.get(JSON_LINES) else 2).replace("\x7f", "\\u007f"))
    meta[JSON_DONE] = meta.get(JSON_DONE) or final


def failed(exc: BaseException, exit_code: int) -> None:
    """Under --json, an error the command did not answer itself: its envelope on stdout (stderr
    says it in words as well)."""
    meta = click.get_current_context().meta
    if meta.get(JSON_COMMAND) and not meta.get(JSON_DONE):
        emit(envelope(details(exc), exit_code=exit_code, error=said(exc), command=meta[JSON_COMMAND]))


def on_terminal() -> bool:
    """Whether stdin and stdout are both a terminal (an interactive shell needs both)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def attach(name: str | None, argv: list[str], command: str) -> int:
    """`argv` on a terminal in the running sandbox `name` (none: the current workspace's), after the
    line on when it was last proven; its exit code."""
    from launcher.engine import engine
    from launcher.host import proven
    from launcher.launch import sandboxes, terminal

    connected = engine.connect()
    item = sandboxes.chosen(connected, name, os.path.realpath("."))
    if not on_terminal():
        raise click.UsageError(f"{command} needs a terminal (stdin and stdout); "
                               f"a script runs `sandbox exec {item.name} -- CMD`")
    status(proven.said(item.name))
    return terminal.attach(connected, item.id, argv)
