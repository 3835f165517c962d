"""Output targets of a LaunchPlan, as one family: every way a sandbox comes to exist — launched by us
(`run`, `up`; `exec` enters an `up` one), or by another tool from the files we write
(`compile --format argv|compose|kubernetes|agent-sandbox`, `sandbox devcontainer`). TARGETS is the
one registry: `check --target`, `explain --target`, `compile --format` and `sandbox devcontainer`
read it. The run report and its step summary (report.py, summary.py) are outputs of a run, not
targets.

May import: egress, engine, plan, policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # imported by the CLI at start: only names here; the cells and renderers load on use
    from launcher.plan.enforcement import Enforcement
    from launcher.plan.plan import LaunchPlan

Losses = list[tuple[str, str]]   # (policy field or protection, why it is not enforced)


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str                      # what `--target` says
    kind: str                      # the compiler's kind: what check, explain, compile validate against
    external: bool                 # another tool starts it from our files: no login, no report after it
    formats: tuple[str, ...] = ()  # the `compile --format` names that write it
    options: tuple[str, ...] = ()  # the writer's (and loss report's) keyword options, from `compile`
    # plan, **options -> what its tool reads: the text `compile` prints (for devcontainer, the files of
    # .devcontainer/ by name); None: the launcher starts it and writes nothing. Imports its renderer on call.
    writer: Callable[..., str | dict[str, str]] | None = None
    report: Callable[..., Losses] | None = None   # a loss report that depends on the plan; default cannot()
    opt_ins: tuple[tuple[str, str], ...] = ()     # (writer's flag, what it adds): `explain --target` says them

    @property
    def cells(self) -> Mapping[str, "Enforcement"]:
        """How this target has the rows whose enforcement depends on the target (protections.py)."""
        from launcher.targets.protections import CELLS

        return CELLS[self.name]

    def cannot(self) -> Losses:
        """(row, why) for every row this target does not enforce although `run` does."""
        from launcher.targets.protections import cannot

        return cannot(self.cells)

    def losses(self, plan: "LaunchPlan", **options) -> Losses:
        """What the sandbox this plan becomes here does not enforce: said on stderr, never silently."""
        return self.report(plan, **self._mine(options)) if self.report else self.cannot()

    def write(self, plan: "LaunchPlan", **options) -> str | dict[str, str]:
        if self.writer is None:
            raise ValueError(f"target {self.name}: the launcher starts it, there is nothing to write")
        from launcher.plan.plan import unwatched

        return self.writer(unwatched(plan), **self._mine(options))

    def _mine(self, options: dict) -> dict:
        return {key: value for key, value in options.items() if key in self.options}


def _json(plan: "LaunchPlan") -> str:
    import json

    from launcher.targets.argv import plan_to_dict

    return json.dumps(plan_to_dict(plan), indent=2) + "\n"


def _argv(plan: "LaunchPlan") -> str:
    from launcher.targets.argv import argv_text

    return argv_text(plan) + "\n"


def _compose(plan: "LaunchPlan", *, files: dict[str, str] | None = None) -> str:
    from launcher.targets.compose import compose_text

    return compose_text(plan, files)


def _kubernetes(plan: "LaunchPlan", **options) -> str:
    from launcher.targets.kubernetes import KubeOptions, kubernetes_text

    return kubernetes_text(plan, KubeOptions(**options))


def _kubernetes_losses(plan: "LaunchPlan", *, node: str = "kubelet", host_firewall: str = "", **_) -> Losses:
    from launcher.targets.kubernetes.losses import losses

    return losses(plan, node=node, host_firewall=host_firewall)


def _agent_sandbox(plan: "LaunchPlan", *, warm: int | None = None, **options) -> str:
    from launcher.targets.kubernetes import KubeOptions
    from launcher.targets.kubernetes.agentsandbox import agent_sandbox_text

    return agent_sandbox_text(plan, KubeOptions(**options), warm)


def _agent_sandbox_losses(plan: "LaunchPlan", *, warm: int | None = None, node: str = "kubelet",
                          host_firewall: str = "", **_) -> Losses:
    from launcher.targets.kubernetes.agentsandbox import losses

    return losses(plan, warm=warm, node=node, host_firewall=host_firewall)


def _devcontainer(plan: "LaunchPlan", *, state: dict[str, str] | None = None) -> dict[str, str]:
    from launcher.targets.devcontainer import files

    return files(plan, state or {})


HOST_FIREWALL = ("--host-firewall cilium|calico", "the network plugin's cluster-wide objects that deny the agent Pod "
                                                  "every node, which NetworkPolicy may leave open (a Cilium host "
                                                  "policy; a Calico tier with host endpoint policies); untested "
                                                  "against the plugins' schemas")
# In the order `--target` lists them; `compile --format json` prints the plan `run` launches.
TARGETS: Mapping[str, Target] = MappingProxyType({t.name: t for t in (
    Target(name="run", kind="run", external=False, formats=("json",), writer=_json),
    Target(name="up", kind="up", external=False),
    Target(name="argv", kind="external", external=True, formats=("argv",), writer=_argv),
    Target(name="compose", kind="external", external=True, formats=("compose",), options=("files",), writer=_compose),
    # A Pod's workspace is a claim, so copy mode (the claim is the copy) is not refused as for compose.
    Target(name="kubernetes", kind="kubernetes", external=True, formats=("kubernetes",),
           options=("claim", "workspace_root", "proxy_ip", "node", "forbidden", "host_firewall"), writer=_kubernetes,
           report=_kubernetes_losses, opt_ins=(HOST_FIREWALL,)),
    # The same Pod, made by the agent-sandbox controller from a SandboxTemplate.
    Target(name="agent-sandbox", kind="kubernetes", external=True, formats=("agent-sandbox",),
           options=("claim", "workspace_root", "proxy_ip", "node", "forbidden", "warm", "host_firewall"),
           writer=_agent_sandbox, report=_agent_sandbox_losses, opt_ins=(HOST_FIREWALL,)),
    Target(name="devcontainer", kind="devcontainer", external=True, options=("state",), writer=_devcontainer),
)})
# What `compile --format` offers, and the target each format writes.
FORMATS: Mapping[str, Target] = MappingProxyType({fmt: t for t in TARGETS.values() for fmt in t.formats})
