"""Launch stage: create, compare with the plan, start, probe, run the agent, and remove everything
this run created on the way out (normal exit, error, Ctrl-C or SIGTERM)."""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from launcher import host
from launcher.engine import Engine
from launcher.errors import NotFound, ProbeFailed
from launcher.plan import PROBE_END, LaunchPlan, MountKind
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


@dataclass(frozen=True, kw_only=True)
class SandboxInfo:
    name: str
    kind: str
    state: str
    policy: str
    workspace: str
    created: int


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


def create_verified(engine: Engine, plan: LaunchPlan) -> str:
    """Create the container and refuse it unless `docker inspect` agrees with the plan."""
    spec = plan.container
    ref = engine.create(spec)
    try:
        diffs = compare_inspect(spec, engine.inspect(ref), engine.image_env(spec.image))
        for mount in spec.mounts:
            if mount.kind is MountKind.BIND and not host.bind_source_intact(mount.source):
                diffs.append(f"bind source {mount.source} changed or vanished since it was checked")
        if diffs:
            raise ProbeFailed("the created container does not match the plan:\n  " + "\n  ".join(diffs))
    except BaseException:
        engine.remove(ref)
        raise
    return ref


def _probe_failed(report: ProbeReport, errors: list[str]) -> ProbeFailed:
    lines = [f"{c.id}: expected {c.expected}, observed {c.observed}" for c in report.failed]
    if not report.finished:
        lines.append("the probe did not complete" + (": " + " ".join(e.strip() for e in errors) if errors else ""))
    return ProbeFailed("the sandbox did not take effect; the agent was not started:\n  " + "\n  ".join(lines), report)


def _start_and_probe(engine: Engine, plan: LaunchPlan, listener: Listener) -> tuple[str, _Output, ProbeReport, bytes]:
    listener.status(f"creating {plan.container.name} (policy {plan.policy_name})")
    ref = create_verified(engine, plan)
    try:
        output = _Output(engine, ref)  # attach first: output written before attaching can be lost
        engine.start(ref)
        report, rest, errors = output.read_probe(PROBE_TIMEOUT)
        if not report.ok:
            raise _probe_failed(report, errors)
        listener.status(f"probe passed: {len(report.checks)} checks")
        return ref, output, report, rest
    except BaseException:
        _remove(engine, ref, plan.placeholders)
        raise


def _remove(engine: Engine, ref: str, placeholders: tuple[str, ...]) -> None:
    try:
        if engine.inspect(ref)["State"]["Running"]:
            engine.stop(ref, GRACE)
    except NotFound:
        pass
    finally:
        engine.remove(ref)
        host.remove_empty_dirs(placeholders)


def run(engine: Engine, plan: LaunchPlan, listener: Listener) -> Outcome:
    """Run the agent to completion (or timeout) in a probed sandbox; always remove it."""
    ref, output, report, rest = _start_and_probe(engine, plan, listener)
    try:
        if rest:
            listener.output("stdout", rest)
        deadline = time.monotonic() + plan.timeout_seconds
        try:
            while (chunk := output.next(deadline)) is not None:
                listener.output(*chunk)
        except TimeoutError:
            listener.status(f"timeout after {plan.timeout_seconds} s: stopping the agent")
            return Outcome(container=plan.container.name, probe=report, exit_code=None, timed_out=True)
        return Outcome(container=plan.container.name, probe=report, exit_code=engine.wait(ref), timed_out=False)
    finally:
        _remove(engine, ref, plan.placeholders)


def up(engine: Engine, plan: LaunchPlan, listener: Listener) -> ProbeReport:
    """Start a long-lived sandbox; it stays until `sandbox down`."""
    _, _, report, _ = _start_and_probe(engine, plan, listener)
    return report


def find(engine: Engine, name: str) -> dict:
    for item in engine.list(f"dev.sandbox.kind"):
        if name in (n.lstrip("/") for n in item.get("Names") or []):
            return item
    raise NotFound(f"no sandbox named {name!r}; `sandbox ls` lists them")


def down(engine: Engine, name: str) -> None:
    item = find(engine, name)
    _remove(engine, item["Id"], tuple(json.loads(item["Labels"].get("dev.sandbox.placeholders", "[]"))))


def ls(engine: Engine) -> list[SandboxInfo]:
    return [SandboxInfo(name=(item.get("Names") or ["?"])[0].lstrip("/"), kind=item["Labels"].get("dev.sandbox.kind", "?"),
                        state=item.get("State", "?"), policy=item["Labels"].get("dev.sandbox.policy", "?"),
                        workspace=item["Labels"].get("dev.sandbox.workspace", "?"), created=item.get("Created", 0))
            for item in engine.list()]


def gc(engine: Engine, everything: bool) -> list[str]:
    """Remove what a crashed or killed launcher left behind; with everything, `up` sandboxes too."""
    removed = []
    for item in engine.list():
        labels = item["Labels"]
        owner_alive = host.pid_alive(int(labels.get("dev.sandbox.owner-pid", "0") or 0))
        # A "created" container whose launcher lives is being started right now: leave it alone.
        stopped = item.get("State") in ("exited", "dead") or (item.get("State") == "created" and not owner_alive)
        orphan = labels.get("dev.sandbox.kind") == "run" and not owner_alive
        if everything or stopped or orphan:
            _remove(engine, item["Id"], tuple(json.loads(labels.get("dev.sandbox.placeholders", "[]"))))
            removed.append((item.get("Names") or ["?"])[0].lstrip("/"))
    return removed


def exec_in(engine: Engine, name: str, argv: list[str], listener: Listener) -> int:
    item = find(engine, name)
    exec_id, stream = engine.exec_stream(item["Id"], argv)
    for out, err in stream:
        if out:
            listener.output("stdout", out)
        if err:
            listener.output("stderr", err)
    return engine.exec_exit_code(exec_id)
