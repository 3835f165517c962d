"""How each target has the rows whose enforcement depends on who starts the sandbox: the policy's
time limit and the launcher's own protections. Every other row (each field and each ALWAYS entry
of `launcher.check.explain`) is enforced by the container itself in every target, and proven by the
probe, which is the entrypoint of all of them. Below the renderers: a target's loss report (the
Kubernetes header too) reads its cells from here; `Target.cells` loads them on use (the CLI's start
needs only the registry's names)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from launcher.plan.enforcement import Component, Enforcement


def enforced_by_nothing(why: str) -> Enforcement:
    return Enforcement(mechanism="not enforced", component=Component.NOTHING, checks=(), note=why)


# The rows, in the order `explain` lists them: the time limit (a field), then the protections.
ROWS = {"timeout": "limits.timeout", "inspect": "docker inspect matches the plan",
        "binds": "bind sources unchanged since compile", "surfaces": "surface report (files host tools run)"}


def _cells(**cells: Enforcement) -> Mapping[str, Enforcement]:
    """One target's cell for every row (a missing one is a KeyError at import), in ROWS order."""
    return MappingProxyType({row: cells[key] for key, row in ROWS.items()})


_COMPARED = Enforcement(mechanism="compared before start; a difference refuses it (exit 122)",
                        component=Component.LAUNCHER, checks=())
_RESOLVED = Enforcement(mechanism="re-resolved just before start", component=Component.LAUNCHER,
                        checks=("mounts.workspace",))
_FILES = dict(   # another tool starts a container from the files we wrote, and nothing of ours runs after it
    inspect=enforced_by_nothing("another tool creates the container; the probe still checks what it can see"),
    binds=enforced_by_nothing("a path swapped for a symlink after the files were written is mounted as it is then"),
    surfaces=enforced_by_nothing("no launcher runs afterwards: nothing reports what the agent planted (still "
                                 "read-only: workspace.protect, workspace.git)"),
)
_NO_LIFETIME = "has no lifetime limit and the agent is PID 1; stop it yourself"

RUN = _cells(
    timeout=Enforcement(mechanism="the launcher stops the agent (exit 124)", component=Component.LAUNCHER, checks=()),
    inspect=_COMPARED, binds=_RESOLVED,
    surfaces=Enforcement(mechanism="compared after the run (exit 123 under CI)", component=Component.LAUNCHER,
                         checks=()))
_SESSION = "the main process ends the sandbox at limits.session or limits.idle (launcher/plan/lifetime.py)"
UP = _cells(
    timeout=Enforcement(mechanism=_SESSION, component=Component.PROCESS, checks=()),
    inspect=_COMPARED, binds=_RESOLVED,
    surfaces=Enforcement(mechanism="compared on `sandbox down` (exit 123 under CI)", component=Component.LAUNCHER,
                         checks=()))
ARGV = _cells(timeout=enforced_by_nothing(f"`docker run` {_NO_LIFETIME}"), **_FILES)
COMPOSE = _cells(timeout=enforced_by_nothing(f"compose {_NO_LIFETIME}"), **_FILES)
KUBERNETES = _cells(
    timeout=enforced_by_nothing("the Pod's activeDeadlineSeconds asks the kubelet to end it, but nothing here "
                                "proves that (podman kube play ignores it)"),
    inspect=enforced_by_nothing("nothing compares the created Pod with the plan; the probe still checks what it can "
                                "see, and a namespace that enforces the restricted Pod Security level refuses a "
                                "laxer Pod"),
    binds=enforced_by_nothing("the workspace is a claim: its content when the Pod starts decides which protected "
                              "paths exist; they were compiled from the local tree"),
    surfaces=enforced_by_nothing("no launcher runs afterwards: whoever reads the claim back must treat it as "
                                 "untrusted (workspace.protect still holds in the Pod)"))
# The agent-sandbox controller makes the Pod from a SandboxTemplate: Kubernetes' cells, but a warm
# Pod's deadline runs from when the pool starts it, and the controller's own changes go unchecked.
AGENT_SANDBOX = _cells(
    timeout=enforced_by_nothing("the Pod's activeDeadlineSeconds asks the kubelet to end it (not proven here); a "
                                "warm pool's Pod starts its agent and that clock when the pool creates it, not when "
                                "a claim adopts it"),
    inspect=enforced_by_nothing("nothing compares the Pod the agent-sandbox controller makes from the template with "
                                "the plan (it adds its own labels and annotations); the probe still checks what it "
                                "can see, and a namespace that enforces the restricted level refuses a laxer Pod"),
    binds=KUBERNETES[ROWS["binds"]], surfaces=KUBERNETES[ROWS["surfaces"]])
DEVCONTAINER = _cells(
    timeout=Enforcement(mechanism=_SESSION, component=Component.PROCESS, checks=()),
    **_FILES)

CELLS = MappingProxyType({"run": RUN, "up": UP, "argv": ARGV, "compose": COMPOSE, "kubernetes": KUBERNETES,
                          "agent-sandbox": AGENT_SANDBOX, "devcontainer": DEVCONTAINER})


def cannot(cells: Mapping[str, Enforcement]) -> list[tuple[str, str]]:
    """(row, why) for every row of `cells` enforced by nothing (that `run` enforces)."""
    return [(row, cell.note) for row, cell in cells.items() if cell.component is Component.NOTHING]
