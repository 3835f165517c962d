"""The machine-readable run report (`--json`, `--report FILE`)."""

from __future__ import annotations

import json
import os
import tempfile
import time

from dataclasses import asdict

from launcher.__version__ import __version__
from launcher.egress.audit import as_json, summarize
from launcher.engine.verify import ProbeReport
from launcher.plan import checks
from launcher.plan.plan import LaunchPlan
from launcher.policy import surfaces
from launcher.targets.argv import plain, plan_to_dict


def build(*, status: str, exit_code: int, started: float, plan: LaunchPlan | None = None,
          probe: ProbeReport | None = None, agent_exit: int | None = None, timed_out: bool = False,
          error: str = "", egress: tuple = (), changes: tuple = (), layer_notes: tuple = ()) -> dict:
    return {
        "sandbox_version": __version__,
        "status": status,
        "exit_code": exit_code,
        "error": error,
        "duration_seconds": round(time.monotonic() - started, 3),
        "policy": {"name": plan.policy_name, "sha256": plan.policy_digest} if plan else None,
        # What a ceiling (org, user, repository layer, a flag) took away from what was asked.
        "layer_notes": [{"layer": n.layer, "field": n.field, "asked": n.asked, "left": n.left, "kind": n.kind,
                         "explicit": n.explicit} for n in layer_notes],
        "plan": plan_to_dict(plan) if plan else None,
        "probe": None if probe is None else {
            "ok": probe.ok, "finished": probe.finished,
            "checks": [{"id": c.id, "ok": c.ok, "verdict": c.verdict or ("pass" if c.ok else "fail"), "expected": c.expected,
                        "observed": c.observed,
                        # n/a: why the plan said so, and what proves it instead
                        **({"not_applicable": checks.reason(c.id, kernel=plan.probe.kernel, net=plan.probe.net)}
                           if c.verdict == "n/a" and plan else {})} for c in probe.checks],
        },
        "agent": {"exit_code": agent_exit, "timed_out": timed_out},
        # New, changed or removed files that host tools run or trust, and symlinks leaving the workspace.
        "workspace_changes": surfaces.to_json(changes),
        "egress": egress_json(egress, plan) if plan and plan.proxy else None,
    }


def egress_json(egress: tuple, plan: LaunchPlan | None = None) -> dict:
    """The report's egress: the rules in force (each with its enforcer), the blocked requests
    summarized, and every request with its decision and why."""
    return {**({"rules": rules_json(plan)} if plan else {}),
            "blocked": [asdict(s) for s in summarize(tuple(e for e in egress if e.denied))],
            "requests": [as_json(e) for e in egress]}


def rules_json(plan: LaunchPlan) -> list[dict]:
    """The allow rules as the proxy enforces them (host, ports, methods, paths, mode, enforcer)."""
    return [plain(r) for r in plan.proxy.rules] if plan.proxy else []


def write(path: str, report: dict) -> None:
    """Write atomically: a reader never sees half a report."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sandbox-report-", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(report, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
