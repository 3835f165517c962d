"""Launch stage: create, compare with the plan, start, probe, run the agent, and remove everything
this run created on the way out (normal exit, error, Ctrl-C or SIGTERM)."""

from __future__ import annotations

import json
import os
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from launcher import labels as label
from launcher.egress import proxy
from launcher.egress.audit import EgressEvent
from launcher.engine import hostengines, overlap
from launcher.engine.engineproto import Engine
from launcher.engine.verify import ProbeReport, compare_inspect
from launcher.errors import EngineError, ProbeFailed, Terminated, also_failed, copy_kept
from launcher.host import hostpaths, workspaces
from launcher.launch import home, proof
from launcher.launch.probeoutput import ProbeOutput
from launcher.plan import checks, runtimes
from launcher.plan.plan import LaunchPlan, MountKind
from launcher.timings import timed

if TYPE_CHECKING:
    from launcher.copies.fill import Filling

PROBE_TIMEOUT = 60     # seconds for the probe to report; it normally needs well under one
GRACE = 10             # seconds between SIGTERM and SIGKILL when stopping a sandbox


class Listener(Protocol):
    """What the launch tells its caller. A listener may also have `phase(name)`, a context
    manager that records how long a phase took (launcher.timings.Timeline.phase)."""

    def status(self, message: str) -> None: ...
    def output(self, stream: str, data: bytes) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Outcome:
    container: str
    probe: ProbeReport
    exit_code: int | None
    timed_out: bool
    egress: tuple[EgressEvent, ...] = ()
    copy: str | None = None         # copy mode: where the agent's changes are
    copy_changes: int | None = None  # how many it holds (None: not known)
    copy_dropped: bool = False      # it held none, nor did any checkpoint: dropped at the end


def create_verified(engine: Engine, plan: LaunchPlan, listener: Listener | None = None) -> str:
    """Create the container and refuse it unless `docker inspect` agrees with the plan (a listener
    with a `compared` method, such as the attestation's recorder, is told the result either way)."""
    spec = plan.container
    _docker_network_mode(spec.command)
    with timed(listener, "create"):
        ref = engine.create(spec)
    try:
        with timed(listener, "inspect"):
            attrs = engine.inspect(ref)
            diffs = compare_inspect(spec, attrs, engine.image_env(spec.image), engine.dialect.plan)
        for mount in spec.mounts:
            if mount.kind is MountKind.BIND and not hostpaths.bind_source_intact(mount.source):
                diffs.append(f"bind source {mount.source} changed or vanished since it was checked")
        if hasattr(listener, "compared"):
            listener.compared(attrs, diffs)
        if diffs:
            raise ProbeFailed("the created container does not match the plan:\n  " + "\n  ".join(diffs))
    except BaseException as primary:
        _cleaning_up(primary, lambda: engine.remove(ref), f"removing {spec.name}")
        raise
    return ref


def _docker_network_mode(command: tuple[str, ...]) -> None:
    """A Docker container's probe runs in one of Docker's network modes: the Pod modes accept the
    network plugin's interface and are the Kubernetes target's alone (the probe refuses them too)."""
    args = command[:command.index("--")] if "--" in command else command
    modes = [a.partition("=")[2] for a in args if a.startswith("net=")]
    if len(modes) != 1 or modes[0] not in checks.DOCKER_MODES or any(a.startswith("forbidden=") for a in args):
        raise ProbeFailed(f"the plan's probe network mode is {', '.join(modes) or 'missing'}: a Docker container's "
                          f"probe runs in {' or '.join(checks.DOCKER_MODES)} (the Pod modes are the Kubernetes target's)")


def _cleaning_up(primary: BaseException, clean, what: str) -> None:
    """Run a clean-up after `primary`; a failure there is recorded on it, never raised instead."""
    try:
        clean()
    except Exception as exc:  # noqa: BLE001 - the primary error decides the exit code
        also_failed(primary, f"{what} failed: {exc}")


def _create(engine: Engine, plan: LaunchPlan, listener: Listener, filling: Filling | None) -> tuple[str, ProbeOutput]:
    """The agent's container, created (while the copy goes in), compared with the plan and attached
    to once the copy is complete; not started."""
    listener.status(f"creating {plan.container.name} (policy {plan.policy_name})")
    workspace = dict(plan.container.labels)[label.WORKSPACE]
    # The lock until the container exists: from then on a sandbox of this workspace being removed
    # lists it and keeps the placeholders (workspaces.release), so the start needs no lock.
    with workspaces.locked(workspace):
        workspaces.register(workspace, plan.placeholders)
        ref = create_verified(engine, plan, listener)
    try:
        if filling is not None:   # before the attach: podman's attach mounts the volumes (the copy's overlay)
            with timed(listener, "copy wait"):
                filling.wait()
        with timed(listener, "probe files"):   # the archive API mounts every volume: after the copy
            proof.verify_files(engine, ref, plan.container)
    except BaseException as primary:
        _cleaning_up(primary, lambda: engine.remove(ref), f"removing {plan.container.name}")
        raise
    with timed(listener, "attach"):
        output = ProbeOutput(engine, ref, plan.probe.na, plan.container.stdin)  # attach first: output written before attaching can be lost
    return ref, output


def _start_and_probe(engine: Engine, plan: LaunchPlan, listener: Listener,
                     filling: Filling | None) -> tuple[str, ProbeOutput, ProbeReport, bytes]:
    try:
        def start(made: tuple[str, ProbeOutput]) -> None:
            with timed(listener, "start"):
                engine.start(made[0])

        if plan.proxy:   # the container is made and started while the proxy starts (proxy.start says when)
            ref, output = proxy.start(engine, plan, listener, lambda pinned: _create(engine, pinned, listener, filling),
                                      start)
        else:
            ref, output = _create(engine, plan, listener, filling)
            start((ref, output))
        with timed(listener, "probe"):
            # proxy.start has returned: the proxy is ready, which the probe waits to hear (probe.sh)
            report, rest, errors = output.read_probe(PROBE_TIMEOUT, plan.proxy and output.proxy_ready)
        proof.judge(report, errors, plan)
        with timed(listener, "gate"):
            output.give_word()
        listener.status(f"probe passed: {len(report.checks)} checks")
        return ref, output, report, rest
    except BaseException as primary:
        _cleaning_up(primary, lambda: remove_sandbox(engine, plan.container.name), f"removing {plan.container.name}")
        raise


def remove_sandbox(engine: Engine, name: str) -> None:
    """Stop gracefully and remove a sandbox with its proxy and networks, and the placeholder
    directories in the workspace once no other sandbox of it needs them. Safe to call on a
    half-created sandbox."""
    containers = engine.list(label.selector(label.SANDBOX, name))
    made: dict[str, tuple[str, ...]] = {}
    for item in containers:
        labels = item.labels
        workspace = labels.get(label.WORKSPACE, "")
        # compose and dev container files list them relative to the workspace (targets/portable.py)
        made[workspace] = made.get(workspace, ()) + tuple(
            os.path.join(workspace, p) for p in json.loads(labels.get(label.PLACEHOLDERS, "[]")))
    # Only a running agent's container holds work worth a graceful stop (the proxy does not), and
    # it goes first, so its work is flushed before anything else goes; the rest go at once.
    running = [c.id for c in containers if c.state == "running" and c.labels.get(label.KIND) != "proxy"]
    try:
        for ref in running:
            try:
                engine.stop(ref, GRACE)
            finally:
                engine.remove(ref)
        rest = [c.id for c in containers if c.id not in running]
        if rest:
            overlap.each(engine.remove, rest)
    finally:
        # Networks once their containers are gone (a network with an endpoint cannot go).
        networks = [n.name for n in engine.list_networks(label.selector(label.SANDBOX, name))]
        if networks:
            overlap.each(engine.remove_network, networks)
        from launcher.plan import trustfiles

        for item in containers:   # a proxy's CA files for rules per request: public, but this launch's alone
            trustfiles.drop_launch_files(tuple(item.labels.get(label.CA_FILES, "").split()))
        for workspace, paths in made.items():
            if workspace:
                with workspaces.locked(workspace):
                    others = engine.list(label.selector(label.WORKSPACE, workspace))
                    workspaces.release(workspace, paths, others_exist=bool(others))


def require_runtime(engine: Engine, plan: LaunchPlan) -> None:
    """Refuse, before anything is made, a plan whose runtime the engine does not have registered
    as the launcher registers it, and installed (never registered silently here: `sandbox doctor --fix`)."""
    name = plan.container.runtime
    if name == "runc":
        return
    info = engine.info()
    found = runtimes.registered(info, hostengines.runtime_check(engine)).get(name)
    want = next((args for n, args in runtimes.GVISOR.values() if n == name), None)
    if want is None:
        raise EngineError(f"the plan names runtime {name}, which the launcher does not know (runc, "
                          f"{', '.join(n for n, _ in runtimes.GVISOR.values())})")
    if (dialect := engine.dialect.plan).gvisor_refused:
        raise EngineError(f"the policy says runtime: gvisor, and the engine is {dialect.name}: {dialect.gvisor_refused}."
                          f"\n    hint: {dialect.gvisor_hint}")
    if found is None or tuple(found.get("runtimeArgs") or ()) != want:
        what = "has no runtime" if found is None else f"has other arguments ({' '.join(found.get('runtimeArgs') or ()) or 'none'}) for"
        raise EngineError(f"the policy says runtime: gvisor, and the engine {what} {name} (gVisor's runsc with "
                          f"{' '.join(want)}, installed).\n    hint: `sudo sandbox doctor --fix` registers it in "
                          "/etc/docker/daemon.json and reloads dockerd (no restart); see `sandbox doctor`")


def run(engine: Engine, plan: LaunchPlan, listener: Listener,
        forwarding: Callable[[str], AbstractContextManager] | None = None) -> Outcome:
    """Run the agent to completion (or timeout) in a probed sandbox; always remove it. In copy
    mode the copy stays (with a checkpoint of the run's end) for `sandbox diff` and `apply`, unless
    it holds no change and never did: then it goes too. `forwarding(container id)` is entered once
    the probe passed and left when the agent has ended, before anything is removed."""
    timed_out, code, started = False, None, False
    require_runtime(engine, plan)
    made_home = _prepare_home(engine, plan, listener)
    try:
        filling = _prepare_copy(engine, plan, listener)
    except BaseException as primary:
        _drop_new_home(engine, plan, made_home, primary)
        raise
    made = filling is not None
    if plan.copy:   # copy mode's store: imported only when there is a copy (a bind run never loads it)
        from launcher.copies import store
    try:
        # Inside the try: a signal right after the probe passed must not leave the sandbox behind.
        ref, output, report, rest = _start_and_probe(engine, plan, listener, filling)
        started = True
        with forwarding(ref) if forwarding else nullcontext():   # run --port: relays while the agent runs
            if rest:
                listener.output("stdout", rest)
            deadline = time.monotonic() + plan.timeout_seconds
            try:
                with timed(listener, "agent"):
                    while (chunk := output.next(deadline)) is not None:
                        listener.output(*chunk)
                    code = engine.wait(ref)
            except TimeoutError:
                listener.status(f"timeout after {plan.timeout_seconds} s: stopping the agent")
                timed_out = True
        with timed(listener, "audit"):
            egress = proxy.egress_events(engine, plan)
    except BaseException as primary:
        _cleaning_up(primary, lambda: remove_sandbox(engine, plan.container.name), f"removing {plan.container.name}")
        if made and not started:   # the agent never ran: nothing of its work is lost
            _discard_new(engine, plan, filling, primary)
        elif plan.copy:   # what the agent did so far stays in the copy, counted (`sandbox ls`) when it can be
            _cleaning_up(primary, lambda: store.checkpoint(engine, plan.copy.name, "run interrupted" if isinstance(
                primary, (KeyboardInterrupt, Terminated)) else "run failed"), f"checkpointing {plan.copy.name}")
            copy_kept(primary, plan.copy.name)
        if not started:
            _drop_new_home(engine, plan, made_home, primary)
        raise
    looked: list[bool] = []
    with timed(listener, "remove"):
        if made and not timed_out:   # the agent has exited: its copy is looked at while its container goes
            overlap.each(lambda job: job(), [lambda: remove_sandbox(engine, plan.container.name),
                                             lambda: looked.append(store.untouched(engine, plan.copy.name,
                                                                                   plan.container.name))])
        else:
            remove_sandbox(engine, plan.container.name)
    counted, dropped = None, False
    if plan.copy:
        # nothing to review: no clutter
        with timed(listener, "copy end"):
            try:
                counted, dropped = store.settle(engine, plan.copy.name,
                                                "run timed out" if timed_out else f"run ended (exit {code})", made,
                                                looked[0] if looked else None)
            except BaseException as exc:   # the copy holds the agent's work all the same
                copy_kept(exc, plan.copy.name)
                raise
    return Outcome(container=plan.container.name, probe=report, exit_code=code, timed_out=timed_out, egress=egress,
                   copy=plan.copy.name if plan.copy else None, copy_changes=counted, copy_dropped=dropped)


def _prepare_copy(engine: Engine, plan: LaunchPlan, listener: Listener) -> Filling | None:
    """A new copy going in while the sandbox is created (None: no copy, or an existing one)."""
    if not plan.copy:
        return None
    from launcher.copies import store

    with timed(listener, "copy volumes"):
        return store.begin(engine, plan.copy, listener.status, lambda: timed(listener, "copy"))


def _discard_new(engine: Engine, plan: LaunchPlan, filling: Filling, primary: BaseException) -> None:
    """The copy this launch made, once its fill has ended (its container holds the volumes)."""
    from launcher.copies import store

    filling.settle()
    _cleaning_up(primary, lambda: store.discard(engine, plan.copy.name), f"removing copy {plan.copy.name}")


def _prepare_home(engine: Engine, plan: LaunchPlan, listener: Listener) -> tuple[str, ...]:
    """The home volume and the download cache (each when the plan has it): the ones this launch made."""
    made: list[str] = []
    try:
        for spec in (plan.home, plan.cache):
            if spec and home.prepare(engine, spec, listener.status):
                made.append(spec.volume)
    except BaseException as primary:
        _drop_new_home(engine, plan, tuple(made), primary)
        raise
    return tuple(made)


def _drop_new_home(engine: Engine, plan: LaunchPlan, made: tuple[str, ...], primary: BaseException) -> None:
    """The volumes this launch made (home, cache), when the agent never ran in them."""
    for volume in made:
        _cleaning_up(primary, lambda volume=volume: engine.remove_volume(volume), f"removing {volume}")


def up(engine: Engine, plan: LaunchPlan, listener: Listener) -> ProbeReport:
    """Start a long-lived sandbox; it stays until `sandbox down` (a copy stays after that too)."""
    require_runtime(engine, plan)
    made_home = _prepare_home(engine, plan, listener)
    filling = None
    try:
        filling = _prepare_copy(engine, plan, listener)
        _, _, report, _ = _start_and_probe(engine, plan, listener, filling)
    except BaseException as primary:
        if filling is not None:
            _discard_new(engine, plan, filling, primary)
        _drop_new_home(engine, plan, made_home, primary)
        raise
    return report
