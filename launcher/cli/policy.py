"""Commands that read policies and run nothing: compile, check, explain, schema."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from launcher.cli import complete, output
from launcher.cli.options import (POLICY_HELP, Defaulted, agent_options, egress_options, either, layer_options, plan, policy_flag,
                                  registries_option,
                                  show_layers_option)
from launcher.errors import ExitCode, PolicyError
from launcher.targets import FORMATS, TARGETS, Target

if TYPE_CHECKING:
    from launcher.plan.plan import LaunchPlan


@click.command(cls=Defaulted, short_help="Compile a policy into a launch plan (no engine).",
               defaults={"policy": "--policy", "agent": "--agent", "registries": "--registries"})
@click.option("--policy", "-p", default="untrusted", show_default=True, help=POLICY_HELP,
              shell_complete=complete.presets)
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Host directory the agent works on.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="json", show_default=True,
              help="json: the whole plan; argv: the equivalent `docker run` command; compose: a compose file; "
                   "kubernetes: NetworkPolicies, proxy and agent Pod for `kubectl apply`; agent-sandbox: the same with "
                   "the Pod as a kubernetes-sigs/agent-sandbox SandboxTemplate.")
@click.option("--claim", default="sandbox-workspace", show_default=True,
              help="kubernetes, agent-sandbox: the PersistentVolumeClaim that holds the workspace.")
@click.option("--workspace-root", default="",
              help="kubernetes, agent-sandbox: the claim's path on the node as the probe sees it (mountinfo root); default / "
                   "(a whole-filesystem volume), for podman its named volume.")
@click.option("--proxy-ip", default="10.96.0.200", show_default=True,
              help="kubernetes, agent-sandbox: the proxy Service's fixed ClusterIP, inside the cluster's service range.")
@click.option("--node", type=click.Choice(["kubelet", "podman"]), default="kubelet", show_default=True,
              help="kubernetes, agent-sandbox: who runs the Pod; the probe expects the mounts that one makes.")
@click.option("--forbidden", multiple=True, metavar="ADDRESS:PORT",
              help="kubernetes, agent-sandbox: an address the Pod's probe must find unreachable (repeatable); "
                   "replaces the default list (metadata services, conventional API server and cluster DNS "
                   "Services, public resolvers; docs/targets.md).")
@click.option("--warm", type=click.IntRange(min=0, max=2 ** 31 - 1), default=None, metavar="N",
              help="agent-sandbox: also a SandboxWarmPool of N Pods (0: none kept warm; claims need a pool).")
@click.option("--host-firewall", type=click.Choice(["cilium", "calico"]), default=None,
              help="kubernetes, agent-sandbox: also that network plugin's cluster-wide objects that deny the agent "
                   "Pod every node (NetworkPolicy may leave its own node open); untested against the plugins' schemas.")
@egress_options
@agent_options
@layer_options
@show_layers_option
@click.argument("command", nargs=-1)
def compile(policy: str, workspace: str, fmt: str, claim: str, workspace_root: str, proxy_ip: str, node: str,
            forbidden: tuple[str, ...], warm: int | None, host_firewall: str | None, allow: tuple[str, ...],
            egress_network: str | None, command: tuple[str, ...]) -> None:
    """Compile a policy into a launch plan, without touching the Docker engine.

    \b
    Example:
      sandbox compile -p ci -w . --allow api.example.com --format argv
    """
    from launcher.host import statefiles

    target = FORMATS[fmt]
    if warm is not None and "warm" not in target.options:
        writers = ", ".join(t.formats[0] for t in TARGETS.values() if "warm" in t.options)
        raise click.UsageError(f"--warm is for --format {writers}, not {fmt}: a warm pool is that format's object")
    if host_firewall and "host_firewall" not in target.options:
        writers = ", ".join(t.formats[0] for t in TARGETS.values() if "host_firewall" in t.options)
        raise click.UsageError(f"--host-firewall is for --format {writers}, not {fmt}: the objects go with the Pod's")
    planned = plan(policy, workspace, command, kind=target.kind, allow=allow, egress_network=egress_network,
                   launched=False)
    launch_plan = planned.plan
    logins = [s.name for s in (launch_plan.proxy.secrets if launch_plan.proxy else ()) if s.login]
    if logins and target.external:
        from launcher.errors import Problem

        raise PolicyError([Problem(file="command line", path="--format", expected="json, or sandbox run/up",
                                   found=f"{fmt} with a subscription login ({', '.join(logins)})",
                                   hint="the login is read and refreshed on the host at launch, which these files "
                                        "cannot do: start it with sandbox run or sandbox up")])
    options = dict(claim=claim, workspace_root=workspace_root, proxy_ip=proxy_ip, node=node, warm=warm,
                   host_firewall=host_firewall or "", **({"forbidden": forbidden} if forbidden else {}))   # each its own
    options["files"] = home_relative(planned.files)
    text = target.write(launch_plan, **options)
    warn_losses(target, launch_plan, **options)
    warn_owner(planned)
    statefiles.write(planned.files)   # what the files for another tool bind from (compiling wrote nothing)
    click.echo(text, nl=False)


def home_relative(files) -> dict[str, str]:
    """The launcher's files by host path, as ${HOME}/... where they are under the home directory
    (the state directory's default): a compose file names no user's home."""
    from launcher.host import host

    home = host.home_dir().rstrip("/") + "/"
    named = {f.path: "${HOME}/" + f.path[len(home):] for f in files if f.path.startswith(home)}
    return named | {f.stands_for: named.get(f.path, f.path) for f in files if f.stands_for}


def warn_losses(target: Target, launch_plan: LaunchPlan, **options) -> None:
    """Never silently: what the sandbox `target` makes of this plan does not enforce that `sandbox run` does."""
    for name, why in target.losses(launch_plan, **options):
        output.status(f"warning: {target.name} does not enforce {name}: {why}")


def warn_owner(planned) -> None:
    """`user: auto` is the agent image's 1000:1000 in files for another tool (the same bytes on every
    machine): said when this checkout's owner is someone else, whom the agent could not write for."""
    owner = planned.facts.workspace.owner
    if planned.policy.user is None and owner and owner != (1000, 1000) and planned.plan.container.user == "1000:1000":
        output.status(f"warning: the agent runs as 1000:1000 in these files (user: auto, the same on every machine); "
                      f"this checkout is owned by {owner[0]}:{owner[1]}: set user: {owner[0]}:{owner[1]} in a policy "
                      "layer if the agent should write it as that owner")


@click.command(cls=Defaulted, short_help="Lint policies and layers without running anything.",
               defaults={"policy": "--policy"}, instead={"policy": "policies"})
@click.argument("policies", nargs=-1, shell_complete=complete.presets)
@policy_flag(text=POLICY_HELP + " The base: with it, every POLICIES argument is a layer after it.")
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose .sandbox.yaml and git config count.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--target", type=click.Choice(list(TARGETS)), default="run", show_default=True,
              help="How the sandbox will be started; with --strict, what this target cannot enforce is an error.")
@click.option("--strict", is_flag=True, help="Fail (exit 120) on the rows --target does not enforce.")
def check(policies: tuple[str, ...], policy_flag: str | None, workspace: str, fmt: str, as_json: bool, target: str,
          strict: bool) -> None:
    """Lint POLICIES without running anything: the first is the base (default: untrusted; with
    --policy, that one), further files are layers after it; the org, user and repository layers
    follow as `run` applies them. Exit code 120 when there is an error.

    \b
    Example:
      sandbox check -p untrusted -w ~/src/repo --json
    """
    from launcher.check import lint, lintstack

    stack = (policy_flag, *policies) if policy_flag else policies or ("untrusted",)
    findings, docs = lintstack.check(stack, workspace, target=target, strict=strict)
    click.echo(lint.render(findings, docs, "json" if as_json else fmt, mark=output.marker()))
    sys.exit(ExitCode.POLICY_INVALID if any(f.severity is lint.Severity.ERROR for f in findings) else ExitCode.OK)


@click.command(cls=Defaulted, short_help="Show what enforces and proves each policy field.",
               defaults={"policy": "--policy", "agent": "--agent", "registries": "--registries"},
               instead={"policy": "policy"})
@click.argument("policy", required=False, shell_complete=complete.presets)
@policy_flag()
@click.option("--workspace", "-w", default=".", show_default=True, help="Workspace whose layers count.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--target", type=click.Choice(list(TARGETS)), default="run", show_default=True,
              help="How the sandbox is started: run, up (and exec into it), the argv, compose or Kubernetes files, a dev "
                   "container. "
                   "Rows this target cannot enforce are marked.")
@click.option("--engine", "ask_engine", is_flag=True,
              help="Ask the engine (DOCKER_HOST) what it enforces: rootless, id maps, the limits it would ignore.")
@registries_option
@layer_options
@agent_options
def explain(policy: str | None, policy_flag: str | None, workspace: str, fmt: str, as_json: bool, target: str,
            ask_engine: bool) -> None:
    """For every effective field: value, Docker mechanism, enforcing component and the probe check
    that proves it, for one target; fields enforced by nothing or not probed are flagged. Never
    asks or runs (--engine: reads the engine's /info, nothing else; a limit it would ignore is
    marked, and the command then exits 120 as `run` would refuse it).

    \b
    Example:
      sandbox explain -p ci --target compose
    """
    from launcher.check import explain as table
    from launcher.cli.options import layer_settings, tell
    from launcher.pipeline import pipeline

    fmt = "json" if as_json else fmt
    policy = either(policy, policy_flag, "policy", "untrusted")
    result = pipeline.layered(policy, workspace, layer_settings(approved_only=True))
    tell(result)
    facts = refused = None
    if ask_engine:
        from launcher.engine import engine
        from launcher.host import engineid

        facts = engineid.asked(engine.connect())
    pipeline.compiled(result, workspace, kind=TARGETS[target].kind)   # refused as `compile` would refuse it
    if facts is not None:
        try:   # and as `run` would refuse it on this engine: after the table, which says which fields
            pipeline.compiled(result, workspace, kind=TARGETS[target].kind, engine=facts)
        except PolicyError as exc:
            refused = exc
    eff = result.effective
    click.echo(json.dumps(table.to_json(eff, target, facts), indent=2) if fmt == "json"
               else table.render(eff, fmt == "markdown", target, width=None if fmt == "markdown" else output.columns(),
                                 engine=facts))
    if refused:
        raise refused


@click.command(short_help="Print the policy format's JSON Schema.")
def schema() -> None:
    """Print the policy format's JSON Schema (for editors: `# yaml-language-server: $schema=FILE`).

    \b
    Example:
      sandbox schema > policy.schema.json
    """
    from importlib import resources

    click.echo(resources.files("launcher").joinpath("policy-v1.schema.json").read_text(), nl=False)


COMMANDS = (compile, check, explain, schema)
