"""Launch stage: create, compare with the plan, start, probe, run the agent, and remove everything
this run created on the way out (normal exit, error, Ctrl-C or SIGTERM)."""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol

from launcher import labels as label
from launcher import checks, home, host, runtimes, workspaces
from launcher.copies import store
from launcher.engine import Engine
from launcher.egress.audit import EgressEvent, parse_log
from launcher.errors import EngineError, NotFound, ProbeFailed, also_failed
from launcher.plan import PROBE_END, LaunchPlan, MountKind
from launcher.values import visible
from launcher.verify import ProbeReport, compare_inspect, parse_probe

PROBE_TIMEOUT = 60     # seconds for the probe to report; it normally needs well under one
GRACE = 10             # seconds between SIGTERM and SIGKILL when stopping a sandbox


class Listener(Protocol):
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


class _Output:
    """Reads a container's output on a thread so the launcher can keep its deadlines."""

    def __init__(self, engine: Engine, ref: str):
        self.chunks: queue.Queue = queue.Queue()
        stream = engine.output(ref)
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        try:
            for out, err in stream:
                if out:
                    self.chunks.put(("stdout", out))
                if err:
                    self.chunks.put(("stderr", err))
        except Exception:  # noqa: BLE001 - a broken stream ends the output; the exit code tells the rest
            pass
        self.chunks.put(None)

    def next(self, deadline: float):
        """The next chunk, None at the end of output; raises TimeoutError at the deadline."""
        while True:
            try:
                return self.chunks.get(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise TimeoutError from None

    def read_probe(self, timeout: float) -> tuple[ProbeReport, bytes, list[str]]:
        """Read the probe's lines up to PROBE-END; return the report and any bytes after it."""
        deadline, buffer, errors = time.monotonic() + timeout, b"", []
        try:
            while True:
                chunk = self.next(deadline)
                if chunk is None:
                    break
                stream, data = chunk
                if stream == "stderr":
                    errors.append(data.decode(errors="replace"))
                    continue
                buffer += data
                marker = (b"\n" + buffer).find(b"\n" + PROBE_END.encode() + b"\t")
                if marker >= 0 and buffer.find(b"\n", marker) >= 0:
                    end = buffer.find(b"\n", marker) + 1
                    lines = buffer[:end].decode(errors="replace").splitlines()
                    return parse_probe(lines), buffer[end:], errors
        except TimeoutError:
            errors.append(f"the probe did not finish within {timeout:.0f} s")
        return parse_probe(buffer.decode(errors="replace").splitlines()), b"", errors


def create_verified(engine: Engine, plan: LaunchPlan, listener: Listener | None = None) -> str:
    """Create the container and refuse it unless `docker inspect` agrees with the plan (a listener
    with a `compared` method, such as the attestation's recorder, is told the result either way)."""
    spec = plan.container
    ref = engine.create(spec)
    try:
        attrs = engine.inspect(ref)
        diffs = compare_inspect(spec, attrs, engine.image_env(spec.image))
        for mount in spec.mounts:
            if mount.kind is MountKind.BIND and not host.bind_source_intact(mount.source):
                diffs.append(f"bind source {mount.source} changed or vanished since it was checked")
        if hasattr(listener, "compared"):
            listener.compared(attrs, diffs)
        if diffs:
            raise ProbeFailed("the created container does not match the plan:\n  " + "\n  ".join(diffs))
    except BaseException as primary:
        _cleaning_up(primary, lambda: engine.remove(ref), f"removing {spec.name}")
        raise
    return ref


def _cleaning_up(primary: BaseException, clean, what: str) -> None:
    """Run a clean-up after `primary`; a failure there is recorded on it, never raised instead."""
    try:
        clean()
    except Exception as exc:  # noqa: BLE001 - the primary error decides the exit code
        also_failed(primary, f"{what} failed: {exc}")


def _probe_failed(report: ProbeReport, errors: list[str], plan: LaunchPlan) -> ProbeFailed:
    lines = []
    for c in report.failed:
        lines.append(f"{c.id}: expected {c.expected}, observed {c.observed}")
        hint = checks.hint(c.id, c.observed, uid=plan.probe.uid, workspace=visible(plan.probe.wsroot, keep_lines=False))
        if hint:
            lines.append(f"  hint: {hint}")
    if not report.finished:
        lines.append("the probe did not complete" + (": " + " ".join(e.strip() for e in errors) if errors else ""))
    return ProbeFailed("the sandbox did not take effect; the agent was not started:\n  " + "\n  ".join(lines), report)


PROXY_READY = "Socket connections at"  # "Accepting [SSL bumped ]HTTP Socket connections at ..."
PROXY_TIMEOUT = 30


def _start_proxy(engine: Engine, plan: LaunchPlan, listener: Listener) -> None:
    """Networks first, then the proxy; wait until Squid accepts connections."""
    values = secret_values(plan)   # read only now: the plan itself never holds a secret's value
    for network in plan.networks:
        engine.create_network(network)
    listener.status(f"starting egress proxy {plan.proxy.name} ({len(plan.proxy.config.splitlines())} config lines)")
    ref = engine.create_proxy(plan.proxy, values)
    engine.start(ref)
    deadline = time.monotonic() + PROXY_TIMEOUT
    while time.monotonic() < deadline:
        if PROXY_READY in engine.logs(ref, stdout=False, stderr=True):
            return
        if not engine.inspect(ref)["State"]["Running"]:
            break
        time.sleep(0.05)
    tail = "\n    ".join(engine.logs(ref, stdout=False, stderr=True).strip().splitlines()[-5:])
    raise EngineError(f"the egress proxy did not come up:\n    {tail}")


def secret_values(plan: LaunchPlan) -> dict[str, str]:
    """The proxy's variables carrying the injected secrets, read from the host; refused when unusable."""
    from launcher.errors import PolicyError, Problem
    from launcher.egress.inject import squid_value

    values = {}
    for secret in plan.proxy.secrets if plan.proxy else ():
        value = host.read_secret(secret.name, secret.from_env, secret.from_file)
        try:
            squid_value(value)
        except ValueError as exc:
            raise PolicyError([Problem(file=secret.from_file or f"${secret.from_env}", path=f"secrets ({secret.name})",
                                       expected="a single-line printable value", found=str(exc))]) from None
        values[secret.var] = value
    return values


def _start_and_probe(engine: Engine, plan: LaunchPlan, listener: Listener) -> tuple[str, _Output, ProbeReport, bytes]:
    try:
        if plan.proxy:
            _start_proxy(engine, plan, listener)
        listener.status(f"creating {plan.container.name} (policy {plan.policy_name})")
        workspace = dict(plan.container.labels)[label.WORKSPACE]
        with workspaces.locked(workspace):   # no placeholder of this workspace goes while we mount it
            workspaces.register(workspace, plan.placeholders)
            ref = create_verified(engine, plan, listener)
            output = _Output(engine, ref)  # attach first: output written before attaching can be lost
            engine.start(ref)
        report, rest, errors = output.read_probe(PROBE_TIMEOUT)
        ids = [c.id for c in report.checks]
        if report.ok and plan.probe.checks and ids != list(plan.probe.checks):
            # fail closed: a probe that skipped, repeated or reordered a check proves less than planned
            raise ProbeFailed("the sandbox did not take effect; the agent was not started:\n  the probe reported "
                              f"{len(ids)} checks, not the {len(plan.probe.checks)} planned: "
                              f"{', '.join(sorted(set(plan.probe.checks) ^ set(ids))) or 'another order'}",
                              replace(report, verdict_ok=False))
        if not report.ok:
            raise _probe_failed(report, errors, plan)
        listener.status(f"probe passed: {len(report.checks)} checks")
        return ref, output, report, rest
    except BaseException as primary:
        _cleaning_up(primary, lambda: remove_sandbox(engine, plan.container.name), f"removing {plan.container.name}")
        raise


def egress_events(engine: Engine, plan: LaunchPlan) -> tuple[EgressEvent, ...]:
    if not plan.proxy:
        return ()
    try:
        events = parse_log(engine.logs(plan.proxy.name))
    except NotFound:
        return ()
    # The probe's own request for a name that must be refused is not the agent's doing.
    return tuple(e for e in events if e.host != plan.probe.denyhost)


def remove_sandbox(engine: Engine, name: str) -> None:
    """Stop gracefully and remove a sandbox with its proxy and networks, and the placeholder
    directories in the workspace once no other sandbox of it needs them. Safe to call on a
    half-created sandbox."""
    containers = engine.list(label.selector(label.SANDBOX, name))
    # The agent's container first, so its work is flushed before anything else goes.
    containers.sort(key=lambda item: item["Labels"].get(label.KIND) == "proxy")
    made: dict[str, tuple[str, ...]] = {}
    try:
        for item in containers:
            labels = item["Labels"]
            made.setdefault(labels.get(label.WORKSPACE, ""), ())
            made[labels.get(label.WORKSPACE, "")] += tuple(json.loads(labels.get(label.PLACEHOLDERS, "[]")))
            try:
                # Only the agent's container holds work worth a graceful stop; the proxy does not.
                if item.get("State") == "running" and labels.get(label.KIND) != "proxy":
                    engine.stop(item["Id"], GRACE)
            finally:
                engine.remove(item["Id"])
    finally:
        for network in engine.list_networks(label.selector(label.SANDBOX, name)):
            engine.remove_network(network["Name"])
        for workspace, paths in made.items():
            if workspace:
                with workspaces.locked(workspace):
                    others = engine.list(label.selector(label.WORKSPACE, workspace))
                    workspaces.release(workspace, paths, others_exist=bool(others))


def require_runtime(engine: Engine, plan: LaunchPlan) -> None:
    """Refuse, before anything is made, a plan whose runtime the engine does not have registered
    as the launcher registers it (never registered silently here: `sandbox doctor --fix`)."""
    name = plan.container.runtime
    if name == "runc":
        return
    found = runtimes.registered(engine.info()).get(name)
    want = next((args for n, args in runtimes.GVISOR.values() if n == name), None)
    if want is None:
        raise EngineError(f"the plan names runtime {name}, which the launcher does not know (runc, "
                          f"{', '.join(n for n, _ in runtimes.GVISOR.values())})")
    if found is None or tuple(found.get("runtimeArgs") or ()) != want:
        what = "has no runtime" if found is None else f"has other arguments ({' '.join(found.get('runtimeArgs') or ()) or 'none'}) for"
        raise EngineError(f"the policy says runtime: gvisor, and the engine {what} {name} (gVisor's runsc with "
                          f"{' '.join(want)}).\n    hint: `sudo sandbox doctor --fix` registers it in "
                          "/etc/docker/daemon.json and reloads dockerd (no restart); see `sandbox doctor`")


def run(engine: Engine, plan: LaunchPlan, listener: Listener) -> Outcome:
    """Run the agent to completion (or timeout) in a probed sandbox; always remove it. In copy
    mode the copy stays (with a checkpoint of the run's end) for `sandbox diff` and `apply`."""
    timed_out, code, started = False, None, False
    require_runtime(engine, plan)
    made_home = _prepare_home(engine, plan, listener)
    try:
        made = _prepare_copy(engine, plan, listener)
    except BaseException as primary:
        _drop_new_home(engine, plan, made_home, primary)
        raise
    try:
        # Inside the try: a signal right after the probe passed must not leave the sandbox behind.
        ref, output, report, rest = _start_and_probe(engine, plan, listener)
        started = True
        if rest:
            listener.output("stdout", rest)
        deadline = time.monotonic() + plan.timeout_seconds
        try:
            while (chunk := output.next(deadline)) is not None:
                listener.output(*chunk)
            code = engine.wait(ref)
        except TimeoutError:
            listener.status(f"timeout after {plan.timeout_seconds} s: stopping the agent")
            timed_out = True
        egress = egress_events(engine, plan)
    except BaseException as primary:
        _cleaning_up(primary, lambda: remove_sandbox(engine, plan.container.name), f"removing {plan.container.name}")
        if made and not started:   # the agent never ran: nothing of its work is lost
            _cleaning_up(primary, lambda: store.discard(engine, plan.copy.name), f"removing copy {plan.copy.name}")
        if not started:
            _drop_new_home(engine, plan, made_home, primary)
        raise
    remove_sandbox(engine, plan.container.name)
    if plan.copy:
        store.checkpoint(engine, plan.copy.name, "run timed out" if timed_out else f"run ended (exit {code})")
    return Outcome(container=plan.container.name, probe=report, exit_code=code, timed_out=timed_out, egress=egress,
                   copy=plan.copy.name if plan.copy else None)


def _prepare_copy(engine: Engine, plan: LaunchPlan, listener: Listener) -> bool:
    return bool(plan.copy) and store.prepare(engine, plan.copy, listener.status)


def _prepare_home(engine: Engine, plan: LaunchPlan, listener: Listener) -> bool:
    return bool(plan.home) and home.prepare(engine, plan.home, listener.status)


def _drop_new_home(engine: Engine, plan: LaunchPlan, made: bool, primary: BaseException) -> None:
    """A home volume this launch made, when the agent never ran in it."""
    if made:
        _cleaning_up(primary, lambda: engine.remove_volume(plan.home.volume), f"removing {plan.home.volume}")


def up(engine: Engine, plan: LaunchPlan, listener: Listener) -> ProbeReport:
    """Start a long-lived sandbox; it stays until `sandbox down` (a copy stays after that too)."""
    require_runtime(engine, plan)
    made_home = _prepare_home(engine, plan, listener)
    made = False
    try:
        made = _prepare_copy(engine, plan, listener)
        _, _, report, _ = _start_and_probe(engine, plan, listener)
    except BaseException as primary:
        if made:
            _cleaning_up(primary, lambda: store.discard(engine, plan.copy.name), f"removing copy {plan.copy.name}")
        _drop_new_home(engine, plan, made_home, primary)
        raise
    return report
