"""`sandbox selftest`: real sandboxes per preset, a matrix of hostile attempts run inside as the
agent user (cases in cases.py), and the checks only the outside can make."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from importlib import resources as pkg_resources
from typing import Callable

from launcher import labels as label
from launcher import resources
from launcher.engine import hostengines, images
from launcher.engine.engine import Engine
from launcher.errors import ProbeFailed, SandboxError
from launcher.host import baseline, host, hostpaths, scan
from launcher.launch import session
from launcher.pipeline import pipeline, stack
from launcher.plan import runtimes
from launcher.plan.plan import PROBE_BUSYBOX, MountKind
from launcher.policy.model import WorkspaceMode
from launcher.selftest import scratch
from launcher.selftest.cases import PLANTED, PLANTS, WAY_BACK, Case, for_mode
from launcher.selftest.verdicts import (  # noqa: F401 - the judgments: callers and tests find them here too
    ERROR, FAIL, PASS, CaseResult, PresetResult, judge_canary, judge_home_trust, judge_host_dir, judge_host_git,
    judge_leftovers, judge_listener, judge_surfaces_reported, judge_time_limit, judge_way_back, judged)
from launcher.style import BAD, GOOD, Mark, plain
from launcher.values import visible

# Proxy-mode presets get these allow rules; the test network's upstream answers for them.
# Our upstreams live on a private test network: the rules opt in (see network.allow private).
ALLOW = ({"host": "allowed.test", "private": True}, {"host": "*.wild.test", "private": True})
Progress = Callable[[str], None]


class HostListener:
    """A TCP listener on the host's 0.0.0.0 (free port) that records every connection it gets."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.peers.append(peer[0])
            conn.close()

    def close(self) -> None:
        self.sock.close()


class _Collector:
    """Launch listener: keeps the script's output, passes status lines on."""

    def __init__(self, progress: Progress):
        self.progress, self.out = progress, b""

    def status(self, message: str) -> None:
        self.progress(message)

    def output(self, stream: str, data: bytes) -> None:
        if stream == "stdout":
            self.out += data


def script(cases: tuple[Case, ...], params: dict[str, str], plants: tuple[Case, ...] = ()) -> str:
    """The in-sandbox bash script: parameters, helpers, one function per case, then the runner;
    `plants` (cases.PLANTS) run after the cases, as SELFTEST-PLANT lines that are no verdict."""
    lib = pkg_resources.files("launcher.selftest").joinpath("lib.sh").read_text()
    head = "".join(f"export {k}={_quote(v)}\n" for k, v in params.items())
    funcs = "".join(f"c_{i}() {{\n{c.body}\n}}\n" for i, c in enumerate(cases + plants))
    # A case cut off by its time limit (timeout's 137 for KILL) fails, whatever it printed before:
    # what it had not yet tried was not observed.
    runner = r'''
run_case() {
	local out rc line start=$EPOCHREALTIME ms
	out="$(timeout -s KILL "$2" bash -c "$(declare -f); $3" </dev/null 2>&1)"; rc=$?
	ms=$(( (${EPOCHREALTIME/./} - ${start/./}) / 1000 ))
	line="$(printf '%s\n' "$out" | grep -a "^VERDICT	" | tail -n 1)"
	if [ "$rc" = 137 ]; then
		printf '%s\t%s\t%s\tFAIL\ttimed out after %s s (%s)\n' "$4" "$1" "$ms" "$2" "$(printf '%s' "${line:-no verdict}" | one_line)"
	elif [ -z "$line" ]; then
		printf '%s\t%s\t%s\tERROR\tno verdict (exit %s): %s\n' "$4" "$1" "$ms" "$rc" "$(printf '%s' "$out" | one_line)"
	else
		printf '%s\t%s\t%s\t%s\n' "$4" "$1" "$ms" "${line#VERDICT	}"
	fi
}
'''
    calls = "".join(f"run_case {c.id} {c.timeout} c_{i} SELFTEST\n" for i, c in enumerate(cases))
    calls += "".join(f"run_case {c.id} {c.timeout} c_{len(cases) + i} SELFTEST-PLANT\n" for i, c in enumerate(plants))
    return head + lib + funcs + runner + calls + "echo SELFTEST-END\n"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def parse(output: str, cases: tuple[Case, ...]) -> list[CaseResult]:
    """One result per case; a case the script did not report is an error."""
    seen: dict[str, tuple[str, str, str]] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0] == "SELFTEST":
            seen[parts[1]] = (parts[2], parts[3], parts[4] if len(parts) > 4 else "")
    results = []
    for case in cases:
        ms, verdict, observed = seen.get(case.id, ("0", ERROR, "the case did not report (script stopped early?)"))
        results.append(CaseResult(id=case.id, expected=case.expected, observed=observed, ms=int(ms) if ms.isdigit() else 0,
                                  verdict=verdict if verdict in (PASS, FAIL, ERROR) else ERROR))
    return results


def _request(ref: str, workspace: str, command: tuple[str, ...], network: str | None, copy: bool = False,
             timeout: str | None = None) -> session.Request:
    """What `sandbox run` would be asked on this host: every layer after the base applies (org,
    user, repository once approved), never a prompt. The case matrix runs on the bind workspace
    (its protections are what `--workspace-mode bind` gives); `copy`: copy mode's pass."""
    mode = stack.load_base(ref).policy.network.mode.value
    options = pipeline.LayerOptions(allow=ALLOW if mode == "proxy" else (), approved_only=True, timeout=timeout,
                                    workspace_mode="copy" if copy else "bind")
    return session.Request(policy=ref, workspace=workspace, command=command, options=options, egress_network=network)


def _launched(engine: Engine, request: session.Request, listener) -> session.RunResult:
    """The run as the CLI makes it; a launch that failed before the agent ran raises (a probe
    that refused it: ProbeFailed)."""
    result = session.run(request, listener, engine=engine)
    if result.outcome is None and result.error is not None:
        raise result.error
    return result


def leftovers(engine: Engine, workspace: str) -> list[str]:
    ours = label.selector(label.WORKSPACE, hostpaths.workspace_real(workspace))
    return [c.name for c in engine.list(ours)] + [n.name for n in engine.list_networks(ours)]


def run_preset(engine: Engine, ref: str, *, listener: HostListener, internet, progress: Progress,
               cases_for: Callable[[str], tuple[Case, ...]] = for_mode) -> PresetResult:
    """Run every case for one preset in a fresh sandbox on a scratch workspace, then the outside checks."""
    started = time.monotonic()
    workspace = scratch.scratch_workspace("sandbox-selftest-")
    canary_dir = scratch.scratch_workspace("sandbox-selftest-hostdir-")
    before, canary_before = scratch.tree_listing(workspace), scratch.tree_listing(canary_dir)
    surfaces_before = scan.snapshot(workspace)
    # Where the cases' planted core.fsmonitor would write when host git ran it (uid 1000 may write here).
    git_canary = os.path.join(canary_dir, "git-canary")
    try:
        mode = stack.load_base(ref).policy.network.mode.value
        if mode == "proxy" and internet is None:
            raise SandboxError("proxy mode needs the test network")
        cases = cases_for(mode, stack.load_base(ref).policy.runtime.value)
        network = internet.network if mode == "proxy" else None
        prepared = session.prepare(_request(ref, workspace, ("true",), network), _Collector(lambda m: None))
        probe = prepared.plan
        params = {
            "MODE": mode, "WS": probe.probe.workspace, "BB": PROBE_BUSYBOX, "LISTEN_PORT": str(listener.port),
            "HOST_IPS": " ".join(scratch.ipv4_addresses()), "CANARY_IP": internet.canary_ip if internet else "",
            "HOST_CANARY_DIR": canary_dir, "HOST_CANARY": git_canary, "TRACKED": scratch.TRACKED,
            "TMPFS": " ".join(f"{m.target}:{m.size_bytes}" for m in probe.container.mounts
                              if m.kind is MountKind.TMPFS and not m.read_only and m.size_bytes),
            # the file an engine binds into every container (podman's): sock.parent_dirs holds it to empty and read-only
            "ENGINE_MARKER": "".join(engine.dialect.plan.marker_mounts[:1]),
        }
        request = _request(ref, workspace, ("bash", "-c", script(cases, params, PLANTS)), network)
        collector = _Collector(progress)
        seen_before = len(listener.peers)
        try:
            checks = len(_launched(engine, request, collector).outcome.probe.checks)
            results = parse(collector.out.decode(errors="replace"), cases)
        except ProbeFailed as exc:
            checks = 0
            results = [CaseResult(id=c.id, expected=c.expected, observed=f"probe failed: {str(exc).splitlines()[-1]}",
                                  verdict=ERROR) for c in cases]
        results += git_judgments(workspace, surfaces_before, git_canary,
                                 writable=probe.probe.workspace in probe.probe.writable)
        if stack.load_base(ref).policy.workspace.mode is WorkspaceMode.COPY:
            results += copy_judgments(engine, ref, workspace, network,
                                      ("bash", "-c", script(cases, params, PLANTS) + "\n" + WAY_BACK))
        results += _outside(engine, ref, mode, workspace, canary_dir, before, canary_before, listener, seen_before,
                            internet, network)
        results.append(judge_home_trust(prepared.layered.effective.policy, prepared.facts))
        return PresetResult(policy=ref, mode=mode, cases=tuple(results), probe_checks=checks,
                            seconds=round(time.monotonic() - started, 1))
    finally:
        scratch.remove_tree(workspace.rsplit("/", 1)[0])
        scratch.remove_tree(canary_dir.rsplit("/", 1)[0])


def git_judgments(workspace: str, before: dict[str, str], git_canary: str, writable: bool = True) -> list[CaseResult]:
    """The two judgments of what the cases left in the workspace (made right after they ran), then
    the planted surfaces removed, so that outside.nothing_left judges only what the launcher left."""
    reported = tuple(c.path for c in baseline.changes(workspace, before))
    planted = tuple(p for p in PLANTED.values() if os.path.lexists(os.path.join(workspace, p)))
    out = [judge_surfaces_reported(planted, reported, writable)]
    modified = scratch.modified(workspace)
    scratch.host_git(os.path.join(workspace, "sub"), "status")   # the nested repository's git directory
    _, status = scratch.host_git(workspace, "status", "--porcelain", "--untracked-files=all")
    _, diff = scratch.host_git(workspace, "diff")
    out.append(judge_host_git(os.path.lexists(git_canary), modified, status, diff))
    scratch.remove_planted(workspace, tuple(PLANTED.values()))
    return out


def copy_judgments(engine: Engine, ref: str, workspace: str, network: str | None,
                   command: tuple[str, ...]) -> list[CaseResult]:
    """The cases once more in copy mode: the host tree stays as it was, and of what they planted
    in the copy, `apply` would refuse every git and protected path."""
    from launcher.copies import store
    from launcher.usecases import copywork

    listing, surfaces = scratch.tree_listing(workspace), scan.snapshot(workspace)
    plan = None
    try:
        plan = _launched(engine, _request(ref, workspace, command, network, copy=True), _Collector(lambda m: None)).planned.plan
        same = scratch.tree_listing(workspace) == listing and scan.snapshot(workspace) == surfaces
        live = {c["path"] for c in store.changes(engine, plan.copy.name)["changes"]}
        ran = max(c["id"] for c in store.checkpoints(engine, plan.copy.name))   # the run's own, at its end
        # What the user's `sandbox diff` shows (the same call): the run's last checkpoint through a
        # read-only view (on podman that view needs an upper layer of its own to attach at all),
        # each change judged as `apply` would judge it.
        shown = copywork.diff(engine, plan.copy.name)
    except SandboxError as exc:   # a crash of the copy's tools on what the agent left is a failure, not a pass
        return [judged(i, False, str(exc).splitlines()[0], error=True)
                for i in ("outside.copy_host_untouched", "outside.copy_apply_refuses", "outside.copy_diff_frozen",
                          "outside.copy_type_changes", "outside.copy_control_names")]
    finally:
        if plan is not None and engine.volume_info(plan.copy.upper_volume) is not None:
            copywork.discard(engine, plan.copy.name, yes=True)   # as `sandbox discard --yes`
    changes, last = list(shown.changes), shown.checkpoint
    frozen = {c["path"] for c in changes}
    control = [c for c in changes if c["path"].split("/")[0] in plan.copy.protected or ".git" in c["path"].split("/")]
    carried = [c["path"] for c in control if not c["refused"]]
    return [judged("outside.copy_host_untouched", same, "unchanged" if same else "the host tree changed"),
            judged("outside.copy_diff_frozen", bool(live) and frozen == live and last == ran,
                    f"checkpoint {last} shows the {len(live)} changes of the copy" if frozen == live and last == ran else
                    f"diff showed checkpoint {last}, not the run's {ran}" if last != ran else
                    f"checkpoint {last} differs: {sorted(frozen ^ live)[:5]}"),
            judged("outside.copy_apply_refuses", bool(control) and not carried,
                    f"would carry back: {', '.join(carried)}" if carried else
                    f"all {len(control)} planted control files refused ({len(changes)} changes in the copy)")
            ] + judge_way_back(changes, fifo_possible=plan.probe.kernel != "gvisor")


def time_limited(ref: str, workspace: str, network: str | None) -> session.Request:
    """A 2 s limit (--timeout 2s) on an agent that would run 60 s; it leaves on SIGTERM, as a
    well-behaved one would, so the graceful stop is quick."""
    agent = ("bash", "-c", "trap 'exit 143' TERM; sleep 60 & wait")
    return _request(ref, workspace, agent, network, timeout="2s")


def _outside(engine, ref, mode, workspace, canary_dir, before, canary_before, listener, seen_before, internet,
             network) -> list[CaseResult]:
    out = [judge_listener(listener.peers[seen_before:]), judge_host_dir(scratch.tree_listing(canary_dir), canary_before)]
    if mode == "proxy":
        out.append(judge_canary(internet.seen_by_canary()))
    try:
        outcome = _launched(engine, time_limited(ref, workspace, network), _Collector(lambda m: None)).outcome
        out.append(judge_time_limit(outcome.timed_out, outcome.exit_code))
    except SandboxError as exc:
        out.append(judged("outside.time_limit", False, str(exc).splitlines()[0], error=True))
    out.append(judge_leftovers(leftovers(engine, workspace), scratch.tree_listing(workspace), before))
    return out


def run(engine: Engine, refs: tuple[str, ...], progress: Progress) -> tuple[PresetResult, ...]:
    """Every preset in turn; the test network is started only when a preset needs it."""
    from launcher.selftest.testnet import Internet

    if not refs:   # every bundled preset: a gVisor one only where the engine has gVisor (always in CI)
        info, present = engine.info(), hostengines.runtime_check(engine)
        refs = tuple(resources.preset_names())
        lacking = [r for r in refs if runtimes.missing(info, (p := stack.load_base(r).policy).runtime, p.network.mode, present)]
        refused = engine.dialect.plan.gvisor_refused   # podman never can run it; CI's Docker has gVisor
        if lacking and (refused or not host.in_ci()):
            progress(f"skipping {', '.join(lacking)}: " + (f"`runtime: gvisor` is refused under {engine.dialect.name}" if refused else
                                                          "gVisor is not registered in this engine (`sandbox doctor --fix`)"))
            refs = tuple(r for r in refs if r not in lacking)
    modes = {ref: stack.load_base(ref).policy.network.mode.value for ref in refs}
    for image in dict.fromkeys(stack.load_base(ref).policy.image for ref in refs):   # the slim one, the full one
        images.ensure_for(engine, image, progress, proxy="proxy" in modes.values())
    listener, internet = HostListener(), None
    try:
        if "proxy" in modes.values():
            progress("starting the test network (our own upstream and canary containers)")
            internet = Internet(engine, f"sandbox-selftest-internet-{uuid.uuid4().hex[:8]}")
        results = []
        for ref in refs:
            progress(f"selftest: {ref} ({modes[ref]} network)")
            results.append(run_preset(engine, ref, listener=listener, internet=internet, progress=progress))
        return tuple(results)
    finally:
        listener.close()
        if internet:
            internet.close()


def to_json(results: tuple[PresetResult, ...]) -> dict:
    return {"version": 1, "ok": bool(results) and all(r.ok for r in results), "presets": [
        {"policy": r.policy, "mode": r.mode, "ok": r.ok, "probe_checks": r.probe_checks, "seconds": r.seconds,
         "counts": {v: sum(c.verdict == v for c in r.cases) for v in (PASS, FAIL, ERROR)},
         "cases": [{"id": c.id, "expected": c.expected, "observed": c.observed, "verdict": c.verdict, "ms": c.ms}
                   for c in r.cases]}
        for r in results]}


_KIND = {PASS: GOOD, FAIL: BAD, ERROR: BAD}


def table(result: PresetResult, mark: Mark = plain) -> str:
    width = max(len(c.id) for c in result.cases) if result.cases else 10
    lines = [f"== {result.policy} ({result.mode} network): {sum(c.verdict == PASS for c in result.cases)}/"
             f"{len(result.cases)} blocked, probe {result.probe_checks} checks, {result.seconds} s",
             f"{'CASE':{width}}  {'VERDICT':7}  {'EXPECTED':40}  OBSERVED"]
    for c in result.cases:
        verdict = mark(c.verdict, _KIND[c.verdict]) + " " * (7 - len(c.verdict))
        lines.append(f"{c.id:{width}}  {verdict}  {c.expected[:40]:40}  {visible(c.observed, keep_lines=False)}")
    return "\n".join(lines)
