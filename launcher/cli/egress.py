"""`sandbox egress`: change the allow rules of a running `sandbox up` sandbox, with a reason."""

from __future__ import annotations

import click

from launcher.cli import complete, output
from launcher.cli.options import json_option


@click.command(short_help="Allow or deny a host in a running `up` sandbox, with a reason.")
@click.argument("name", shell_complete=complete.names(complete.SANDBOXES))
@click.option("--allow", "allow", metavar="RULE", help="Add an allow rule: HOST, *.suffix, HOST:PORT, or a YAML "
              "mapping with http: rules ('{host: H, http: {methods: [GET], paths: [/v1/]}}').")
@click.option("--deny", "deny", metavar="HOST[:PORT]", help="Remove the allow rules of HOST (every port) or HOST:PORT.")
@click.option("--reason", required=True, metavar="TEXT", help="Why: kept with the change in the egress log and the "
              "attestation record.")
@json_option("The change and the rules now in force as JSON on stdout.")
def egress(name: str, allow: str | None, deny: str | None, reason: str, as_json: bool) -> None:
    """Add (--allow) or remove (--deny) an allow rule of the running `sandbox up` sandbox NAME
    without restarting it: its egress proxy reloads (the sandbox, its processes and its open
    connections stay), then the probe proves the sandbox again with the new rules before this
    returns. A rule added goes through the same layers as `up --allow`: the org and user
    policies are ceilings (beyond them: exit 120, nothing changed). A rule with http: needs the
    proxy to have intercepted its host from the start (its CA names those hosts alone). The change
    and its reason are listed by `sandbox logs NAME` and in the `up --attest` record; `sandbox up`
    attaching again proves the rules in force. A failed proof puts the earlier rules back (exit 122).
    117: no such sandbox running.

    \b
    Example:
      sandbox egress sandbox-myrepo --allow pypi.org --reason "pip install for the tests"
      sandbox egress sandbox-myrepo --allow '{host: api.github.com, http: {methods: [GET]}}' --reason "read issues"
      sandbox egress sandbox-myrepo --deny pypi.org --reason "dependencies installed"
    """
    from launcher.launch import egresschange

    click.get_current_context().meta[output.NAME] = name
    done = egresschange.change(name, allow=allow, deny=deny, reason=reason, listener=output.Console())
    if as_json:
        output.emit(output.envelope({"action": done.action, "rule": done.rule, "reason": done.reason, "time": done.time,
                                     "rules": list(done.rules), "checks": done.checks}, sandbox=done.sandbox))
        return
    output.status(f"{done.sandbox}: {done.action} {done.rule} ({done.reason}); probe passed again: "
                  f"{done.checks} checks; allowed now: {', '.join(done.rules) or 'nothing'}")


COMMANDS = (egress,)
