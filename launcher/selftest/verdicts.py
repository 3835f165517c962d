"""The selftest's verdicts: a case's and a preset's results, and the judgments only the outside
can make, as pure functions of what was seen (no engine)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.errors import SandboxError
from launcher.plan.compiler import compile_policy
from launcher.policy.model import HomeMode
from launcher.selftest import scratch
from launcher.selftest.cases import OUTSIDE, PLANTED
from launcher.values import visible

PASS, FAIL, ERROR = "pass", "FAIL", "ERROR"


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    id: str
    expected: str
    observed: str
    verdict: str
    ms: int = 0             # how long the case ran inside the sandbox


@dataclass(frozen=True, kw_only=True)
class PresetResult:
    policy: str
    mode: str
    cases: tuple[CaseResult, ...]
    probe_checks: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.cases) and all(c.verdict == PASS for c in self.cases)


def judged(case_id: str, good: bool, observed: str, error: bool = False) -> CaseResult:
    return CaseResult(id=case_id, expected=OUTSIDE[case_id][0], observed=observed,
                      verdict=ERROR if error else PASS if good else FAIL)


def judge_listener(peers: list[str]) -> CaseResult:
    return judged("outside.host_listener_silent", not peers, f"connections from: {', '.join(peers)}" if peers else "none")


def judge_host_dir(now: tuple[str, ...], before: tuple[str, ...]) -> CaseResult:
    return judged("outside.host_dir_untouched", now == before, "unchanged" if now == before else f"now: {now}")


def judge_canary(seen: list[str]) -> CaseResult:
    return judged("outside.canary_silent", not seen, "; ".join(seen[:3]) or "nothing")


def judge_surfaces_reported(planted: tuple[str, ...], reported: tuple[str, ...], writable: bool = True) -> CaseResult:
    """`planted`: what the plants (cases.PLANTS) left in the workspace; `reported`: the paths the
    report names. In a writable workspace every plant must be there: one that is not was never judged."""
    if writable and (absent := [p for p in PLANTED.values() if p not in planted]):
        return judged("outside.surfaces_reported", False, f"not planted, so not judged: {', '.join(absent)}")
    if not writable:
        return judged("outside.surfaces_reported", not planted, f"planted in a read-only workspace: {', '.join(planted)}"
                       if planted else "read-only workspace: nothing could be planted (the fs and protect cases prove it)")
    missing = [p for p in planted if p not in reported]
    return judged("outside.surfaces_reported", not missing, f"not reported: {', '.join(missing)}" if missing
                   else f"all {len(planted)} planted surfaces reported ({len(reported)} changes)")


def judge_host_git(canary_seen: bool, modified: tuple[str, ...], status: str, diff: str) -> CaseResult:
    """After host `git status` and `git diff` ran: the planted command never ran (its canary file is
    absent) and every modified file shows in both."""
    shown = {line[3:] for line in status.splitlines() if "M" in line[:2]}
    hidden = [m for m in modified if m not in shown or f"diff --git a/{m} b/{m}" not in diff]
    bad = (["host git ran a planted command (canary written)"] if canary_seen else []) + \
          ([f"modified but not shown: {', '.join(hidden)} (git: {status.strip()[:80]!r})"] if hidden else [])
    return judged("outside.host_git", not bad, "; ".join(bad) or
                   f"no canary; {len(modified)} modified file(s) shown by git status and git diff")


def judge_way_back(changes: list[dict], fifo_possible: bool = True) -> list[CaseResult]:
    """What WAY_BACK planted, as `apply` would judge it: README.md a directory (its file at depth
    written), tracked.txt a FIFO (refused, named), and every control-character name refused.
    Under gVisor (`fifo_possible` false) no FIFO can be made on the copy's overlay (mkfifo leaves
    nothing readable there): tracked.txt must then show as deleted, never as anything written."""
    by_path = {c["path"]: c for c in changes}
    made_dir, fifo = by_path.get("README.md", {}), by_path.get(scratch.TRACKED, {})
    deep = by_path.get("README.md/in/deep/f", {})
    fifo_judged = ((fifo.get("new") or {}).get("kind") == "fifo" and bool(fifo.get("refused")) if fifo_possible
                   else fifo.get("status") == "deleted")
    typed = (made_dir.get("status") == "type-changed" and made_dir.get("dir") == "new" and deep.get("status") == "added"
             and not deep.get("refused") and fifo_judged)
    named = [c for c in changes if c["path"].startswith("wayback/")]
    carried = [visible(c["path"], keep_lines=False) for c in named if not c["refused"]]
    return [judged("outside.copy_type_changes", typed, "README.md a directory, tracked.txt a FIFO: "
                    + (("diffed, the FIFO refused" if fifo_possible else "diffed; no FIFO can be made under gVisor: tracked.txt "
                        "deleted") if typed else f"seen as {made_dir.get('status')}/{fifo.get('status')}/{fifo.get('new')}")),
            judged("outside.copy_control_names", len(named) == 4 and not carried,
                    f"would carry back: {', '.join(carried)}" if carried else f"{len(named)} of 4 names seen, all refused")]


def judge_home_trust(policy, facts) -> CaseResult:
    """The preset with `home: {mode: volume}`, and the same policy one step wider in each way that
    needs no other host facts (a capability, a host variable passed in, another user): each wider
    one compiles to a home volume of its own, and each plan's probe expects its own volume."""
    mine = replace(policy, home=replace(policy.home, mode=HomeMode.VOLUME))
    wider = {"a capability": replace(mine, capabilities=mine.capabilities + ("NET_BIND_SERVICE",)),
             "a variable passed": replace(mine, env=replace(mine.env, pass_names=mine.env.pass_names + ("EDITOR",))),
             "another user": replace(mine, user=(4242, 4242))}
    try:
        plans = {what: compile_policy(p, facts) for what, p in {"this preset": mine, **wider}.items()}
    except SandboxError as exc:
        return judged("outside.home_trust", False, str(exc).splitlines()[0], error=True)
    own = plans["this preset"].home.volume
    shared = [what for what in wider if plans[what].home.volume == own]
    astray = [what for what, plan in plans.items() if plan.probe.homesrc != f"/{plan.home.volume}/_data"]
    bad = ([f"shares {own} with {', '.join(shared)}"] if shared else []) + \
          ([f"the probe expects another home for {', '.join(astray)}"] if astray else [])
    return judged("outside.home_trust", not bad, "; ".join(bad) or
                   f"{own}: none of the {len(wider)} wider policies gets it")


def judge_time_limit(timed_out: bool, exit_code: int | None) -> CaseResult:
    return judged("outside.time_limit", timed_out, "stopped after 2 s" if timed_out else f"ran to exit code {exit_code}")


def judge_leftovers(left: list[str], workspace_now: tuple[str, ...], workspace_before: tuple[str, ...]) -> CaseResult:
    bad = left or workspace_now != workspace_before
    return judged("outside.nothing_left", not bad, f"resources: {left}; workspace: {workspace_now}" if bad else "nothing")
