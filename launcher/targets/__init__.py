"""Output targets of a LaunchPlan: the JSON plan, `docker run` argv, compose, Kubernetes and
devcontainer files, the run report and its step summary. FORMATS is what `sandbox compile --format`
offers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:   # imported by the CLI at start: only names here, the renderers load on use
    from launcher.plan import LaunchPlan

# How a sandbox comes to exist: launched by us (`run`, `up`; `exec` enters an `up` one), or by
# another tool from the files we write (`compile --format argv|compose|kubernetes`, `sandbox devcontainer`).
TARGETS = ("run", "up", "argv", "compose", "kubernetes", "devcontainer")
# The compiler's `kind` for each: what `check --target T` and `explain --target T` validate against.
TARGET_KIND = {"run": "run", "up": "up", "argv": "external", "compose": "external", "kubernetes": "kubernetes",
               "devcontainer": "devcontainer"}


def _json(plan: "LaunchPlan") -> str:
    from launcher.targets.argv import plan_to_dict

    return json.dumps(plan_to_dict(plan), indent=2) + "\n"


def _argv(plan: "LaunchPlan") -> str:
    from launcher.targets.argv import argv_text

    return argv_text(plan) + "\n"


def _compose(plan: "LaunchPlan") -> str:
    from launcher.targets.compose import compose_text

    return compose_text(plan)


def _kubernetes(plan: "LaunchPlan", **options) -> str:
    from launcher.targets.kubernetes import KubeOptions, kubernetes_text

    return kubernetes_text(plan, KubeOptions(**options))


# format -> (renderer, whether another tool launches it: labelled kind=external, which `gc` leaves alone)
FORMATS: dict[str, tuple[Callable[["LaunchPlan"], str], bool]] = {
    "json": (_json, False),
    "argv": (_argv, True),
    "compose": (_compose, True),
    "kubernetes": (_kubernetes, True),
}
# The compile's `kind` for a format whose sandbox is not an external Docker container: a Pod's
# workspace is a claim, so copy mode (the claim is the copy) is not refused as for compose.
FORMAT_KIND = {"kubernetes": "kubernetes"}
