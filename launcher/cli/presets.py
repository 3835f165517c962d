"""`sandbox presets`: the bundled policies `--policy NAME` selects, read as `run` reads them."""

from __future__ import annotations

import json
import sys

import click

from launcher.cli import output


def _writes(policy) -> str:
    from launcher.policy.model import Access, WorkspaceMode

    if policy.workspace.access is Access.READ_ONLY:
        return "no"
    return "only by `sandbox apply`" if policy.workspace.mode is WorkspaceMode.COPY else "yes"


def rows() -> list[dict]:
    """Each bundled preset through the base loader (its `extends` applied)."""
    from launcher import resources
    from launcher.pipeline import stack

    found = []
    for name in resources.preset_names():
        policy = stack.load_base(name).policy
        found.append({"name": name, "purpose": policy.description, "network": policy.network.mode.value,
                      "allow": [str(rule) for rule in policy.network.allow],
                      "workspace": f"{policy.workspace.mode.value}, {policy.workspace.access.value}",
                      "writes_reach_your_tree": _writes(policy), "runtime": policy.runtime.value})
    return found


@click.command(short_help="List the bundled policy presets and what each allows.")
@click.option("--json", "as_json", is_flag=True, help="Every preset as JSON.")
def presets(as_json: bool) -> None:
    """List the presets `--policy NAME` selects: each one's purpose, network mode, workspace mode,
    whether the agent's writes reach your tree (bind read-write: yes; copy: only by `sandbox
    apply`; read-only: no) and the runtime. `sandbox explain NAME` shows every field.

    \b
    Example:
      sandbox presets --json
    """
    from launcher import tables

    found = rows()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    width = output.columns() or sys.maxsize
    for r in found:
        network = r["network"] + (f" ({len(r['allow'])} hosts: `sandbox explain {r['name']}`)" if r["allow"] else "")
        for line in tables.paragraph(f"{r['name']}: {r['purpose']}", width):
            click.echo(line)
        for line in tables.paragraph(f"  network {network}   workspace {r['workspace']}   writes reach your tree: "
                                     f"{r['writes_reach_your_tree']}   runtime {r['runtime']}", width):
            click.echo(line)

COMMANDS = (presets,)
