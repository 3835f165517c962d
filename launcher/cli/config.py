"""`sandbox config`: the defaults the commands take (launcher/policy/settings.py), each with where it came from."""

from __future__ import annotations

import sys

import click

from launcher.cli import output
from launcher.cli.options import SETTINGS, Defaulted, json_option, repo_trust_options


@click.command(cls=Defaulted, short_help="Show the defaults set once, and where each came from.",
               defaults={})
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The workspace whose .sandbox.yaml `defaults:` count.")
@json_option("The settings as JSON (in the --json envelope).")
@repo_trust_options
def config(workspace: str, as_json: bool) -> None:
    """Show the defaults of run, up, compile, explain and images build: for each key its value and
    its source. The first that sets a key wins: a flag, then the environment (SANDBOX_POLICY, …),
    then the repository's `defaults:` in .sandbox.yaml (only when its approval covers the file:
    `sandbox trust approve`, or --trust-repo-policy), then your config.yaml
    ($XDG_CONFIG_HOME/sandbox/config.yaml, default ~/.config), then the built-in.

    \b
    Example:
      sandbox config -w ~/src/repo --json
    """
    from launcher import tables
    from launcher.host import host
    from launcher.policy import settings

    ctx = click.get_current_context()
    resolved, applies = ctx.meta[SETTINGS], defaulted(ctx.find_root().command)
    if as_json:
        output.emit(output.envelope(settings.as_json(resolved, applies) | {"user_file": host.user_config_path()}))
        return
    rows = [("KEY", "VALUE", "SOURCE", "ENVIRONMENT", "DEFAULT OF")]
    for s in resolved.settings:
        key = settings.BY_NAME[s.key]
        source = f"{s.source} {s.where}" if s.source not in (settings.BUILTIN, settings.ENV) else (
            f"env {s.where}" if s.source == settings.ENV else s.source)
        rows.append((s.key, settings.shown(s), source, key.env, applies.get(s.key, "")))
        rows += [("", f"  ({settings.shown(settings.Setting(key=s.key, value=u[2], source=u[0], where=u[1]))}: "
                      f"{u[0]} {u[1]}, not used)", "", "", "") for u in s.unused]
    for line in tables.table(rows, output.columns() or sys.maxsize):
        click.echo(line)
    click.echo(f"user file: {host.user_config_path()}")


def defaulted(group: click.Group, prefix: str = "") -> dict[str, str]:
    """Per key, the options of this version it is the default of ("--timeout of run"); a key no
    command takes yet (ports, before `--port` exists) says so."""
    found: dict[str, dict[str, list[str]]] = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")
            elif isinstance(command, Defaulted):
                for key, flag in command.defaults.items():
                    if any(flag in p.opts for p in command.params):
                        found.setdefault(key, {}).setdefault(flag, []).append(prefix + name)
    walk(group, prefix)
    from launcher.policy import settings

    return {key.name: "; ".join([*(f"{flag} of {', '.join(names)}" for flag, names in found[key.name].items()), *(
            [key.also] if key.also else [])]) if key.name in found
            else "nothing in this version (no command has the option yet)" for key in settings.KEYS}


COMMANDS = (config,)
