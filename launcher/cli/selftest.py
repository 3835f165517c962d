"""The selftest command: prove on this Docker host that the presets hold against hostile attempts."""

from __future__ import annotations

import json
import sys

import click

from launcher.cli import complete, output
from launcher.style import BAD, GOOD


@click.command(short_help="Prove on this host that the presets hold.")
@click.option("--policy", "-p", "policies", multiple=True, metavar="P", shell_complete=complete.presets,
              help="Preset or policy file to test; repeatable (default: every bundled preset).")
@click.option("--json", "as_json", is_flag=True, help="The JSON report on stdout (the tables go to stderr).")
@click.option("--output", "-o", "json_path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the JSON report to FILE.")
def selftest(policies: tuple[str, ...], as_json: bool, json_path: str | None) -> None:
    """Launch real sandboxes and run, as the agent user inside, a matrix of hostile attempts
    (writes outside the workspace, protected paths, credentials, runtime sockets, privilege,
    kernel interfaces, resource bombs, egress and the host's own listener).

    \b
    Exit codes: 0 every attempt was blocked; 1 an attempt succeeded or a case could not run;
    121 engine unavailable; 130/143 interrupted (everything created was removed).

    \b
    Example:
      sandbox selftest -p untrusted -p ci --output selftest.json
    """
    from launcher.engine import engine
    from launcher.selftest import runner as st

    results = st.run(engine.connect(), policies, output.Console().status)
    mark = output.marker(err=as_json)   # with --json, stdout is the report alone
    for result in results:
        click.echo(st.table(result, mark), err=as_json)
        click.echo(err=as_json)
    data = st.to_json(results)
    if json_path:
        with open(json_path, "w") as out:
            json.dump(data, out, indent=2)
    summary = ", ".join(f"{r.policy}: {sum(c.verdict == st.PASS for c in r.cases)}/{len(r.cases)}" for r in results)
    verdict = mark("passed", GOOD) if data["ok"] else mark("FAILED", BAD)
    click.echo(f"selftest {verdict} ({summary})", err=as_json)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    sys.exit(0 if data["ok"] else 1)


COMMANDS = (selftest,)
