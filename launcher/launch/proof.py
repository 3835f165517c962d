"""The proof and the launcher's verdict on it: the probe's files as a container runs them, the
whole report judged against the plan (only then does the launcher give the probe its word), and a
running sandbox proven again before new work starts in it."""

from __future__ import annotations

from dataclasses import replace

from launcher import labels as label
from launcher.engine import images, probefiles
from launcher.engine.engineproto import Engine
from launcher.engine.verify import ProbeReport, parse_probe
from launcher.errors import ProbeFailed
from launcher.plan import checks
from launcher.plan.plan import PROBE_DIR, ContainerSpec, LaunchPlan, MountKind, escape_path, unwatched
from launcher.values import visible

REPORT_LIMIT = 1 << 20  # bytes of a re-probe's report read at most (a report is a few kB)
NOT_STARTED = "the sandbox did not take effect; the agent was not started"


def failed(report: ProbeReport, errors: list[str], plan: LaunchPlan, head: str = NOT_STARTED) -> ProbeFailed:
    lines = []
    for c in report.failed:
        # what the container printed: its image (or a reused sandbox's agent) chose these bytes
        lines.append(visible(f"{c.id}: expected {c.expected}, observed {c.observed}", keep_lines=False))
        hint = checks.hint(c.id, c.observed, uid=plan.probe.uid, workspace=visible(plan.probe.wsroot, keep_lines=False),
                           remapped=plan.probe.userns == "remapped",
                           bridge_only_proxy=bool(plan.proxy and plan.proxy.hosts_entry))
        if hint:
            lines.append(f"  hint: {hint}")
    if not report.finished:
        lines.append("the probe did not complete" + (": " + " ".join(e.strip() for e in errors) if errors else ""))
    return ProbeFailed(f"{head}:\n  " + "\n  ".join(lines), report)


def judge(report: ProbeReport, errors: list[str], plan: LaunchPlan, head: str = NOT_STARTED) -> None:
    """Accept the whole report against the plan or raise ProbeFailed: every check passed, and
    exactly the planned ones in the planned order (a probe that skipped, repeated or reordered a
    check proves less than planned, whatever its PROBE-END says)."""
    ids = [c.id for c in report.checks]
    if report.ok and ids != list(plan.probe.checks):
        raise ProbeFailed(f"{head}:\n  the probe reported {len(ids)} checks, not the {len(plan.probe.checks)} planned: "
                          f"{', '.join(sorted(set(plan.probe.checks) ^ set(ids))) or 'another order'}",
                          replace(report, verdict_ok=False))
    if not report.ok:
        raise failed(report, errors, plan, head)


def file_problems(engine: Engine, ref: str, spec: ContainerSpec) -> tuple[str, list[str]]:
    """(where they come from, what differs): the probe's files as this container runs them against
    the launcher's probe.sh and the busybox recorded on the probe volume `volume` at its fill. From
    the volume: the container's own mount of it, read through the engine's archive API (~50 ms: the
    engine mounts the created container). From the launcher's directory on this host (an engine on
    this host binds it; the inspect comparison proved the bind's source): read here, the same way."""
    mount = next((m for m in spec.mounts if m.target == PROBE_DIR), None)
    if mount is not None and mount.kind is MountKind.BIND:
        recorded = (engine.volume_labels(images.probe_volume_name()) or {}).get(label.PROBE_BUSYBOX)
        return mount.source, probefiles.dir_problems(mount.source, recorded)
    if mount is None or mount.kind is not MountKind.VOLUME:
        return "", [f"the plan mounts no probe volume at {PROBE_DIR}"]
    recorded = (engine.volume_labels(mount.source) or {}).get(label.PROBE_BUSYBOX)
    return mount.source, probefiles.problems(engine.archive_head(ref, PROBE_DIR, probefiles.LIMIT), recorded)


def verify_files(engine: Engine, ref: str, spec: ContainerSpec) -> None:
    """Refuse, before it starts, a container whose probe files are not the launcher's."""
    where, found = file_problems(engine, ref, spec)
    if found:
        bound = where.startswith("/")
        raise ProbeFailed(f"the probe's files are not the launcher's; the agent was not started:\n  "
                          f"probe {'directory' if bound else 'volume'} {where}: " + "\n  ".join(found)
                          + (f"\n  hint: `chmod -R u+w {where} && rm -r {where}`" if bound else f"\n  hint: `docker volume rm {where}`")
                          + " (the next launch fills it again)")


def own_tmpfs(spec: ContainerSpec) -> str:
    """The probe's word, on a running sandbox only, that its planned tmpfs mounts are its own: made
    empty by the engine at create (the inspect comparison proved their type then, and a container's
    mounts never change), so a socket in one now is one the sandbox made (an agent's, like Claude
    Code's in /tmp), never the host's. Every other mount is searched for sockets as at start."""
    return "owntmpfs=" + ",".join(escape_path(m.target) for m in spec.mounts if m.kind is MountKind.TMPFS)


def reprove(engine: Engine, plan: LaunchPlan, ref: str) -> ProbeReport:
    """Prove a running sandbox again before new work starts in it (`up` attaching): its probe
    files as it runs them, then the probe with this plan's expectations in it, as its user; the
    sandbox is left as it is whatever the verdict (ProbeFailed: nothing new was started there)."""
    stays = f"{plan.container.name} no longer holds what its policy says; nothing new was started in it " \
            "(it keeps running: `sandbox down` removes it)"
    volume, found = file_problems(engine, ref, plan.container)
    if found:   # another version of the launcher started it, or its probe volume was changed since
        raise ProbeFailed(f"{stays}:\n  its probe ({volume}) is not this launcher's: " + "; ".join(found)
                          + f"\n  hint: `sandbox down {plan.container.name}`, then `sandbox up` starts it anew")
    args = unwatched(plan).container.command
    argv = [*plan.container.entrypoint, *args[:args.index("--")], own_tmpfs(plan.container), "--",
            PROBE_DIR + "/busybox", "true"]
    exec_id, stream = engine.exec_stream(ref, argv, user=plan.container.user)
    out, errors = b"", []
    for stdout, stderr in stream:
        out += stdout or b""
        if stderr:
            errors.append(stderr.decode(errors="replace"))
        if len(out) > REPORT_LIMIT:
            errors.append(f"the probe printed more than {REPORT_LIMIT} bytes")
            break
    report = parse_probe(out.decode(errors="replace").splitlines(), plan.probe.na)
    judge(report, errors, plan, stays)
    return report
