"""The `sandbox` commands for CI and teams: doctor (is this host fit?) and devcontainer."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from launcher.cli import complete, output
from launcher.cli.options import POLICY_HELP, egress_options, either, layer_options, plan, same_directory, workspace_flag
from launcher.errors import ExitCode


@click.command(short_help="Check that this host can run sandboxes.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable findings.")
@click.option("--fix", "fix", is_flag=True, help="Register gVisor (runsc) in /etc/docker/daemon.json (merged, "
              "a backup kept) and reload dockerd with SIGHUP (no restart); then check again. Docker only: "
              "under podman it changes nothing and says why.")
def doctor(as_json: bool, fix: bool) -> None:
    """Check this host: engine reachable and its version, runc/engine/containerd against known
    container-escape fixes, seccomp, cgroups, rootless, user-namespace remapping, AppArmor/SELinux,
    gVisor (runsc installed and registered), images and debootstrap; then a row per engine found on
    this host (DOCKER_HOST, the docker CLI's context, Docker's and podman's usual sockets) with its
    identity and verdict, and how to point `sandbox` at it. Each finding is ok, warn or fail with a
    fix; exit code 121 on a fail (only the engine in use can fail).

    \b
    Example:
      sandbox doctor --fix
    """
    import shutil

    from launcher.doctor import doctor as checks, registration
    from launcher.engine import engine, hostengines
    from launcher.host import hostpaths

    runsc = shutil.which("runsc")
    if fix:
        _fix(engine, registration, runsc)
    findings = checks.run(engine.connect, more=lambda info, kind, present: registration.findings(info, runsc, kind, present),
                          seen=hostengines.sightings, present=hostpaths.runtime_installed)
    if as_json:
        click.echo(json.dumps([asdict(f) | {"status": f.status.value} for f in findings], indent=2))
    else:
        click.echo(checks.render(findings, mark=output.marker()))
    sys.exit(ExitCode.ENGINE if any(f.status is checks.Status.FAIL for f in findings) else ExitCode.OK)


def _fix(engine, registration, runsc: str | None) -> None:
    from launcher.engine import hostengines
    from launcher.errors import EngineError

    if not runsc:
        raise EngineError(("runsc is not installed: nothing to register.\n    hint: apt-get install runsc "
                                "(Debian), or gVisor's release binary on PATH"))
    eng = engine.connect()
    if (dialect := eng.dialect.plan).gvisor_refused:
        raise EngineError(f"the engine is {dialect.name}: `doctor --fix` registers gVisor in Docker's {registration.DAEMON_JSON} "
                          f"only, and changed nothing. Under {dialect.name} {dialect.gvisor_refused}.\n"
                          f"    hint: {dialect.gvisor_hint}")
    names = list(registration.runtimes.registration(runsc))
    present = hostengines.runtime_check(eng)
    done = registration.fix(runsc, registered=lambda: not registration.findings(eng.info(), runsc, present=present)[0].fix)
    if done.changed:
        click.echo(f"sandbox: registered {', '.join(names)} in {registration.DAEMON_JSON}"
                   + (f" (backup: {done.backup})" if done.backup else ""), err=True)
    click.echo(f"sandbox: {'reloaded dockerd (SIGHUP): ' if done.reloaded else ''}the engine has "
               f"{', '.join(names)}", err=True)


@click.command(short_help="Write .devcontainer/ from the effective policy.")
@click.argument("workspace", required=False, type=click.Path(file_okay=False))
@workspace_flag
@click.option("--policy", "-p", default="devcontainer", show_default=True, help=POLICY_HELP,
              shell_complete=complete.presets)
@click.option("--force", is_flag=True, help="Replace generated files that exist already.")
@egress_options
@layer_options
def devcontainer(workspace: str | None, workspace_flag: str | None, policy: str, force: bool, allow: tuple[str, ...],
                 egress_network: str | None) -> None:
    """Write WORKSPACE/.devcontainer/ (devcontainer.json, a Dockerfile whose entrypoint is the probe,
    and compose.yaml in proxy mode) from the effective policy, for `devcontainer up` and editors.
    Regenerate it when the policy, the layers or the workspace's location change.

    \b
    Example:
      sandbox devcontainer -p devcontainer ~/src/repo
    """
    from launcher.targets import TARGETS, devcontainer as dc

    from launcher.cli.policy import warn_losses, warn_owner

    target = TARGETS["devcontainer"]
    workspace = either(workspace, workspace_flag, "workspace", ".", same=same_directory)
    with dc.folder(workspace):
        planned = plan(policy, workspace, (), kind=target.kind, allow=allow, egress_network=egress_network,
                       launched=False)
        launch_plan = planned.plan
        warn_losses(target, launch_plan)
        warn_owner(planned)
        # The launcher's files it binds from go into .devcontainer/ too: no host path in what is written.
        written = dc.write(workspace, target.write(launch_plan, state={f.path: f.text for f in planned.files}), force)
    for path in written:
        click.echo(f"sandbox: wrote {path}", err=True)


COMMANDS = (doctor, devcontainer)
