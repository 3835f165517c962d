"""The library's launches: `run` (one-shot, probed, removed) and `up` (long-lived) take a Request
and return a result; the CLI parses, calls one of them and prints. Nothing here prints or exits:
progress goes to the listener (status lines, the agent's output, timed phases)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from launcher import labels
from launcher.engine import early, images
from launcher.host import baseline, engineid, host, proven, statefiles
from launcher.launch import launch, ports, proof, sandboxes, upoptions
from launcher.pipeline import pipeline
from launcher.errors import EngineError, ExitCode, NotFound, PolicyError, ProbeFailed, Problem, SandboxError, \
    SessionEnded, Terminated, also_failed, kept_copy, secondary_failures
from launcher.launch.launch import Listener, Outcome
from launcher.launch.ports import PortSpec
from launcher.pipeline.pipeline import LayerOptions, Planned
from launcher.plan.plan import PROBE_DIR, MountKind
from launcher.timings import timed
from launcher.values import show, visible

if TYPE_CHECKING:
    from launcher.signing import Key

# The report's status for a launch that raised, by exit code; any other code is "error".
_FAILED = {ExitCode.POLICY_INVALID: "policy-invalid", ExitCode.ENGINE: "engine-error",
           ExitCode.PROBE_FAILED: "probe-failed"}


@dataclass(frozen=True, kw_only=True)
class Request:
    """What to launch: the policy and workspace, the agent's command, and what the command line
    adds (LayerOptions: --allow, --timeout, --agent, repository-policy trust, strictness)."""

    policy: str = "untrusted"
    workspace: str = "."
    command: tuple[str, ...] = ()
    options: LayerOptions = LayerOptions()
    name: str | None = None
    egress_network: str | None = None
    attest: str | None = None        # run: write the attestation record here (also when the run fails); up: at down
    attest_key: Key | None = None    # and sign it with this key (launcher.signing.signing_key(PATH))
    fresh: bool = False              # up, copy mode: a new copy instead of the kept one (see `_fresh`)
    ports: tuple[PortSpec, ...] = ()  # host loopback ports forwarded while it lives (launcher.launch.ports)
    new: bool = False                # up: a second sandbox on the workspace, never the running one
    given: frozenset[str] | None = None   # up: the upoptions.FIELDS chosen (and "workspace"): the rest from a
                                          # running one (None: all)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """How a run ended. `error` is None, a SandboxError (its exit code is `exit_code`), the
    KeyboardInterrupt or Terminated that stopped it, or an internal error (exit 125)."""

    status: str                       # the report's: ok, agent-failed, timeout, surfaces-changed, probe-failed, …
    exit_code: int
    report: dict                      # the JSON report (`sandbox run --json`)
    planned: Planned | None = None    # None when the policy did not load or compile
    outcome: Outcome | None = None    # None when the agent never ran
    changes: tuple = ()               # files host tools trust that the agent created or changed (bind mode)
    error: BaseException | None = None
    attestation_problem: str | None = None   # why the record asked for could not be written

    @property
    def internal(self) -> bool:
        return self.error is not None and not isinstance(self.error, (SandboxError, KeyboardInterrupt, Terminated))


@dataclass(frozen=True, kw_only=True)
class UpResult:
    planned: Planned
    sandbox: str
    reused: bool                      # an equal sandbox was running: nothing was started
    ends: float = 0.0                 # when limits.session ends it at the latest (epoch seconds; 0 when reused)
    ports: tuple[PortSpec, ...] = ()  # forwarded from the host's loopback (the ports taken, 0 resolved)
    runs: tuple[str, ...] = ()        # what its terminal runs: the command, the agent's CLI or the shell
    options: upoptions.UpOptions | None = None   # what it was started with (None: before they were stored)


def prepare(request: Request, listener: Listener, *, kind: str = "run", launched: bool = True,
            timings=None) -> Planned:
    """Load, layer, gather and compile; says the layers' notes and the plan's warnings."""
    layered = pipeline.layered(request.policy, request.workspace, request.options, timings=timings)
    for note in layered.notes:   # values from a repository's file: never raw on the terminal
        listener.status(visible(note, keep_lines=False))
    agent = request.options.agent
    if agent and not agent.keyed and agent.profile.model:
        network, model = layered.effective.policy.network, agent.profile.model
        said = f"note: no model key for {agent.name}: " + \
            ("the sandbox has no network, so " if network.mode.value == "none" else "") + "its CLI cannot reach a model API"
        if network.model:
            said += (f"; with --model-key-env {model.key_env or 'VAR'} it reaches {model.upstream.partition('://')[2]} "
                     "alone (the key stays on the host)")
        listener.status(said)
    planned = pipeline.compiled(layered, request.workspace, request.command, kind=kind, name=request.name,
                                egress_network=request.egress_network, agent=agent, timings=timings, launched=launched)
    for warning in planned.plan.warnings:
        listener.status(f"warning: {warning}")
    if launched:   # files for another tool: the command's output step makes them
        statefiles.write(planned.files)
    return planned


def for_engine(request: Request, planned: Planned, engine, *, kind: str = "run", timings=None,
               facts: engineid.EngineFacts | None = None) -> Planned:
    """The plan compiled again with the facts of the engine that runs it (`facts`: asked already), where
    they change it: on a rootless or userns-remapped engine the probe proves the id map, and a limit
    the engine would ignore is refused (PolicyError)."""
    facts = facts or engineid.asked(engine)
    if not facts.remapped and not facts.unenforced and facts.kind == engineid.EngineFacts().kind:
        return planned   # what the first compile assumed (its dialect too)
    again = pipeline.compiled(planned.layered, request.workspace, request.command, kind=kind, name=request.name,
                              egress_network=request.egress_network, agent=request.options.agent, timings=timings,
                              engine=facts)
    statefiles.write(again.files)
    return again


def ready(engine, planned: Planned, agent, listener: Listener) -> None:
    """The images this plan runs, built or pulled when missing (minutes, once)."""
    plan = planned.plan
    with timed(listener, "images"):
        if agent and agent.profile.image:   # the CLI's image, on ours
            from pathlib import Path

            images.build_agent(engine, agent.profile.image, listener.status,
                               [Path(p) for p in agent.ca_files] or images.extra_ca_files())
        built = plan.image_build   # packages: / build: the policy's image first, then the extension on it
        bound = next((m.source for m in plan.container.mounts if m.target == PROBE_DIR and m.kind is MountKind.BIND), "")
        # tools: copy mode's and the home's run in our agent image, whatever the policy's image
        images.ensure_for(engine, built.base if built else plan.container.image, listener.status, proxy=plan.proxy is not None,
                          probe_dir=bound, tools=bool(plan.copy or plan.home))
        if built:
            from launcher.engine import imageext

            imageext.ensure(engine, built, listener.status, images.extra_ca_files())


def connect(listener: Listener):
    with timed(listener, "connect"):
        from launcher.engine import engine

        return engine.connect(info=True)   # its facts are asked next (engineid.asked)


def run(request: Request, listener: Listener, *, engine=None, timings=None) -> RunResult:
    """Probe, then run the agent's command in a fresh sandbox and remove it; never raises for a
    failed launch (the result says how it ended, its report included)."""
    from launcher.targets import report

    started = time.monotonic()
    planned = outcome = error = None
    changes: tuple = ()
    code, status = ExitCode.INTERNAL, "error"
    recorder = listener
    if request.attest:   # the record's code (and signing's) only when one is asked for
        from launcher.launch import attest

        recorder = attest.Recorder(listener)
    try:
        asked = early.Asked(lambda: connect(listener), listener) if engine is None else None
        planned = prepare(request, listener, timings=timings)
        engine = engine or asked.engine()
        planned = for_engine(request, planned, engine, timings=timings, facts=asked and asked.facts())
        ready(engine, planned, request.options.agent, listener)
        held = ports.hold(request.ports, planned.plan.container.name)   # before anything starts
        try:
            outcome = launch.run(engine, planned.plan, recorder,
                                 forwarding=_forwarding(engine, planned, request, held, listener))
        finally:
            for sock in held:
                sock.close()
        if outcome.timed_out:
            code, status = ExitCode.AGENT_TIMEOUT, "timeout"
        else:
            code, status = outcome.exit_code, "ok" if outcome.exit_code == 0 else "agent-failed"
    except SandboxError as exc:
        error, code, status = exc, exc.exit_code, _FAILED.get(exc.exit_code, "error")
    except (KeyboardInterrupt, Terminated) as exc:
        error, code, status = exc, 130 if isinstance(exc, KeyboardInterrupt) else 143, "interrupted"
    except Exception as exc:   # a defect: the report says 125, the caller re-raises it
        error = exc
    facts = planned.facts if planned else None
    if facts and facts.surfaces is not None:   # a writable workspace: the agent may have written there
        changes = baseline.changes(facts.workspace.real, dict(facts.surfaces))
        if changes and (request.options.strict or host.in_ci()) and status in ("ok", "agent-failed", "timeout"):
            code, status = ExitCode.SURFACES_CHANGED, "surfaces-changed"
    data = report.build(status=status, exit_code=code, started=started, plan=planned.plan if planned else None,
                        probe=outcome.probe if outcome else error.report if isinstance(error, ProbeFailed) else None,
                        changes=changes, layer_notes=planned.layered.effective.notes if planned else (),
                        egress=outcome.egress if outcome else (), agent_exit=outcome.exit_code if outcome else None,
                        timed_out=bool(outcome and outcome.timed_out), error=_said(error))
    unwritten = None
    if request.attest and planned:   # a record once there is a policy to attest; 118 if it cannot be written
        unwritten = attest.record(request.attest, recorder, planned, engine, data, request.attest_key)
        if unwritten is None:
            listener.status(f"attestation record written to {request.attest} ({_signed(request.attest_key)})")
        elif status in ("ok", "agent-failed"):
            code = ExitCode.ATTESTATION_INVALID
    return RunResult(status=status, exit_code=code, report=data, planned=planned, outcome=outcome, changes=changes,
                     error=error, attestation_problem=unwritten)


def _forwarding(engine, planned: Planned, request: Request, held, listener: Listener):
    """`run --port`: what forwards the held ports while the agent runs (None: no port)."""
    if not held:
        return None
    from functools import partial

    from launcher.launch import forward

    return partial(forward.serving, engine, planned.plan.container.name, specs=ports.taken(request.ports, held),
                   held=held, status=listener.status)


def _signed(key) -> str:
    return "unsigned" if key is None else f"signed: a DSSE envelope, {key.algorithm} keyid {key.keyid[:16]}…"


def interrupted(error: BaseException) -> str:
    """What an interrupted run says: the sandbox went; a copy with the agent's work stayed."""
    kept = kept_copy(error)
    return "interrupted; the sandbox was removed" + (
        f"; the copy {kept} was kept with what the agent did so far (`sandbox diff {kept}`, `sandbox ls`)" if kept else "")


def _said(error: BaseException | None) -> str:
    """The report's `error`: the message and any clean-up failure after it."""
    if error is None:
        return ""
    if isinstance(error, (KeyboardInterrupt, Terminated)):
        return interrupted(error)
    if not isinstance(error, SandboxError):
        return f"internal error: {type(error).__name__}: {error}"
    return "\n".join([str(error)] + [f"also: {m}" for m in secondary_failures(error)]).strip()


def up(request: Request, listener: Listener, *, engine=None, timings=None) -> UpResult:
    """Start a long-lived sandbox, or attach to the running one of the workspace (or of --name) with
    the options it was started with where the request gives none (exit 120 if it gives others, or the
    effective policy differs; `new`: a second one); raises SandboxError when it cannot."""
    if not request.new:
        try:
            engine = engine or connect(listener)
        except EngineError:   # nothing to attach to: the policy is checked first, the engine's error comes after
            pass
        else:
            request = upoptions.completed(engine, request)
    command, request = request.command, replace(request, command=())   # the terminal's, per attach: not the plan's
    planned = prepare(request, listener, kind="up", timings=timings)
    engine = engine or connect(listener)
    planned = for_engine(request, planned, engine, kind="up", timings=timings)
    agent = request.options.agent
    ready(engine, planned, agent, listener)
    if request.fresh and planned.plan.copy:
        planned = _fresh(engine, planned, request, listener, timings)
    if request.new:
        planned = upoptions.second(engine, planned, request, listener, timings)
    plan, sandbox = planned.plan, planned.plan.container.name
    started = time.monotonic()
    try:
        found = sandboxes.find(engine, sandbox)
    except NotFound:
        found = None
    if found is not None:
        if found.state in ("exited", "dead"):   # whatever its policy (a --timeout changes it): down keeps its work
            raise SessionEnded(sandbox, found.state)
        stored = upoptions.parse(found.labels.get(labels.UP_OPTIONS))
        differ = upoptions.differing(request, stored, ports.labelled(found.labels)) if stored else []
        problem = (upoptions.refusal(sandbox, request, stored, differ) if differ else sandboxes.reuse_problem(found, plan)
                   or ports.reuse_problem(found.name, found.labels, request.ports))
        if problem:
            raise PolicyError([problem])
        listener.status(f"{sandbox} is already running; proving it again before anything starts in it")
        report = proof.reprove(engine, plan, found.id)
        proven.save(sandbox, len(report.checks), "on attach")
        listener.status(f"probe passed again: {len(report.checks)} checks")
        if request.attest:
            listener.status(f"note: --attest: no new record; {sandbox} was started earlier, and its record is the one "
                            "asked for then, if any (written at `sandbox down`)")
        return UpResult(planned=planned, sandbox=sandbox, reused=True, ports=ports.labelled(found.labels),
                        runs=upoptions.terminal(request, planned, command), options=stored)
    planned = upoptions.labelled(planned, request)   # refused here if they cannot be stored
    plan = planned.plan
    from launcher.launch import records

    records.stale(sandbox, listener.status)
    recorder = None
    if request.attest:
        from launcher.launch import attest

        recorder = attest.Recorder(listener)
    held = ports.hold(request.ports, sandbox)   # before anything starts: a port in use leaves nothing behind
    try:
        forwarded = ports.taken(request.ports, held)
        if forwarded:
            planned = ports.labelled_plan(planned, forwarded)
            plan = planned.plan
        try:
            probe = launch.up(engine, plan, recorder or listener)
            if forwarded:
                _keep_ports(engine, sandbox, forwarded, held, listener)
        except SandboxError as exc:   # a refused start is evidence too: its record is written now (no `down` follows)
            if recorder is not None:
                _refused_record(request, planned, engine, recorder, exc, started, listener)
            raise
    finally:
        for sock in held:   # the keepers have their own
            sock.close()
    proven.save(sandbox, len(probe.checks), "at its start")
    if recorder is not None:
        from launcher.launch import records

        records.keep_start(planned, engine, recorder, probe, started, request.attest, request.attest_key)
        listener.status(f"the attestation record goes to {request.attest} ({_signed(request.attest_key)}) when "
                        f"`sandbox down {sandbox}` removes it")
    if agent:   # the profile's home files (and, for its shells, its variables)
        from launcher.agents.wiring import wrapped

        seed = wrapped(agent.profile, ("true",), agent.keyed, shells=True)[1]
        if len(seed) > 1 and sandboxes.exec_in(engine, sandbox, list(seed), listener) != 0:
            listener.status(f"warning: writing {agent.name}'s home files failed")
    if planned.facts.surfaces is not None:   # compared on `sandbox down`
        baseline.save(sandbox, planned.facts.workspace.real, dict(planned.facts.surfaces))
    ends = time.time() + plan.timeout_seconds
    idle = show("limits.idle", plan.idle_seconds)
    listener.status(f"{sandbox} is up until {time.strftime('%H:%M:%S', time.localtime(ends))} at the latest "
                    f"(limits.session), or {idle} without terminal input or output (limits.idle); "
                    f"`sandbox down {sandbox}` removes it")
    return UpResult(planned=planned, sandbox=sandbox, reused=False, ends=ends, ports=forwarded,
                    runs=upoptions.terminal(request, planned, command), options=upoptions.of_request(request))


def _keep_ports(engine, sandbox: str, forwarded: tuple[PortSpec, ...], held, listener: Listener) -> None:
    """Hand each port to its keeper; when one cannot start, the sandbox goes again (nothing is left)."""
    try:
        ports.keep(sandbox, forwarded, held)
    except BaseException as primary:
        try:
            sandboxes.down(engine, sandbox)
        except Exception as exc:   # noqa: BLE001 - the keeper's failure stays the one reported
            also_failed(primary, f"removing {sandbox}: {exc}")
        raise
    for spec in forwarded:
        listener.status(f"forwarding 127.0.0.1:{spec.host_port} to 127.0.0.1:{spec.port} inside {sandbox} while it "
                        f"runs (log: {ports.log_path(sandbox, spec)})")


def _refused_record(request: Request, planned: Planned, engine, recorder, error: SandboxError, started: float,
                    listener: Listener) -> None:
    """up --attest when the start failed (the probe refused it, the inspect differed): the record of
    that failure, written to its file at once, as `run` does."""
    from launcher.launch import attest
    from launcher.targets import report

    data = report.build(status=_FAILED.get(error.exit_code, "error"), exit_code=error.exit_code, started=started,
                        plan=planned.plan, probe=error.report if isinstance(error, ProbeFailed) else None,
                        layer_notes=planned.layered.effective.notes, error=_said(error))
    unwritten = attest.record(request.attest, recorder, planned, engine, data, request.attest_key)
    listener.status(f"warning: {unwritten}" if unwritten else f"attestation record of the refused start written to "
                    f"{request.attest} ({_signed(request.attest_key)})")


def _fresh(engine, planned: Planned, request: Request, listener: Listener, timings) -> Planned:
    """`up --fresh`: the kept copy of this name goes when it holds no change (nor does any of its
    checkpoints); otherwise it stays, said so, and the plan is made again under the next free
    name (NAME-2, NAME-3…), whose copy is new. Never while a sandbox uses the copy."""
    from launcher.copies import store

    name = planned.plan.copy.name
    try:
        copy = store.find(engine, name)
    except NotFound:
        return planned                       # no copy yet: the one made now is fresh
    if copy.users:   # the running sandbox of this name among them
        raise PolicyError([Problem(file="command line", path="--fresh", expected="a copy no sandbox uses",
                                   found=f"{name} is in use by {', '.join(copy.users)}",
                                   hint=f"`sandbox down {copy.users[0]}` first (the copy stays if it holds changes)")])
    taken = store.checkpoint(engine, name, "before up --fresh")
    if store.drop_if_clean(engine, name, taken):
        listener.status(f"--fresh: the copy {name} held no changes: dropped")
        return planned
    new = upoptions.next_free(engine, name)
    held = f"{taken['changes']} changes" if taken.get("changes") else "checkpoints with changes"
    listener.status(f"--fresh: the copy {name} holds {held} and stays (`sandbox diff {name}`, `sandbox apply {name}`, "
                    f"`sandbox discard {name}`); the new sandbox and its copy are {new}")
    return upoptions.renamed(planned, request, new, timings)
