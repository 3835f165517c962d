"""Commands that read policies and run nothing: compile, check, explain, schema."""

from __future__ import annotations

import json
import sys

import click

from launcher.cli import output
from launcher.cli.options import POLICY_HELP, egress_options, layer_options, plan, show_layers_option
from launcher.errors import ExitCode
from launcher.targets import FORMATS


@click.command()
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="json", show_default=True,
              help="json: the whole plan; argv: the equivalent `docker run` command; compose: a compose file.")
@egress_options
@layer_options
@show_layers_option
@click.argument("command", nargs=-1)
def compile(policy: str, workspace: str, fmt: str, allow: tuple[str, ...], egress_network: str | None,
            command: tuple[str, ...]) -> None:
    """Compile a policy into a launch plan, without touching the Docker engine."""
    render, external = FORMATS[fmt]
    launch_plan = plan(policy, workspace, command, kind="external" if external else "run", allow=allow,
                       egress_network=egress_network).plan
    click.echo(render(launch_plan), nl=False)


@click.command()
@click.argument("policies", nargs=-1)
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose .sandbox.yaml and git config count.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def check(policies: tuple[str, ...], workspace: str, fmt: str, as_json: bool) -> None:
    """Lint POLICIES without running anything: the first is the base (default: untrusted), further
    files are layers after it; the org, user and repository layers follow as `run` applies them.
    Exit code 120 when there is an error."""
    from launcher import lint

    findings, docs = lint.check(policies or ("untrusted",), workspace)
    click.echo(lint.render(findings, docs, "json" if as_json else fmt, mark=output.marker()))
    sys.exit(ExitCode.POLICY_INVALID if any(f.severity is lint.Severity.ERROR for f in findings) else ExitCode.OK)


@click.command()
@click.argument("policy", default="untrusted")
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose layers count.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@layer_options
def explain(policy: str, workspace: str, fmt: str, as_json: bool) -> None:
    """For every effective field: value, Docker mechanism, enforcing component and the probe check
    that proves it; fields enforced by nothing or not probed are flagged. Never asks or runs."""
    from launcher import explain as table, pipeline
    from launcher.cli.options import layer_settings, tell

    fmt = "json" if as_json else fmt
    result = pipeline.layered(policy, workspace, layer_settings(approved_only=True))
    tell(result)
    eff = result.effective
    click.echo(json.dumps(table.to_json(eff), indent=2) if fmt == "json" else table.render(eff, fmt == "markdown"))


@click.command()
def schema() -> None:
    """Print the policy format's JSON Schema (for editors: `# yaml-language-server: $schema=FILE`)."""
    from importlib import resources

    click.echo(resources.files("launcher").joinpath("policy-v1.schema.json").read_text(), nl=False)


COMMANDS = (compile, check, explain, schema)
