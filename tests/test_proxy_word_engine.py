"""Proxy mode's start order on the real engine (issue 45): the sandbox's container starts alongside
its proxy's, before the proxy runs, and its probe asks the proxy only once the launcher has said the
proxy is ready (the line "proxy" on its stdin, asked for with a PROBE-ASK line; probe.sh
__sbx_probe_checks). The word only says when to ask: without it the probe waits a bounded time and
then fails on its own; the launcher's no (SIGTERM) ends the checks at once; and nothing of the probe
is left when the agent starts. Only our own containers and networks: nothing leaves the host."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from fakes import Recorder
from launcher import labels as label
from launcher.engine import subnets
from launcher.errors import EngineError
from launcher.launch import launch
from launcher.plan.plan import PROBE_ASK
from test_proxy import _plan, internet, leftovers  # noqa: F401 - fixtures

pytestmark = pytest.mark.engine
BB = "/.sandbox/probe/busybox"


def _gate(plan, seconds: str):
    command = tuple(f"gate={seconds}" if a.startswith("gate=") else a for a in plan.container.command)
    return replace(plan, container=replace(plan.container, command=command))


def _without_its_proxy(engine, plan):
    """The plan's sandbox, created and started by the test on its internal network, with no proxy
    and no launcher reading its report or giving any word; removed with its network at the end."""
    internal = next(n for n in plan.networks if n.internal)
    subnets.create_network(engine, internal)
    ref = launch.create_verified(engine, plan)
    engine.start(ref)
    return ref


def _cleanup(engine, plan, ref):
    engine.remove(ref)
    for n in plan.networks:
        if n.internal:
            engine.remove_network(n.name)


def _logs_until(engine, ref, text: str, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while text not in (logs := engine.logs(ref)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return logs


# the agent: the command line of each child of PID 1 (itself, after the probe's exec)
# (a child gone by then, the listing's own `cat` among them, prints nothing: its error is dropped)
CHILDREN = f'for p in $({BB} cat /proc/1/task/1/children); do {BB} tr "\\0" " " 2>/dev/null </proc/$p/cmdline; echo; done 2>/dev/null'


def test_nothing_of_the_probe_is_left_in_the_agent_s_session(engine, internet, workspace):
    """No process of the probe outlives it into the agent's session, where the agent (PID 1) would
    inherit it: not the DNS check's window (sleep 4.5), not a watcher of busybox's timeout (it
    lingers up to a second), nor (until the word came on stdin) the sleeper that waited for the
    word. The agent's only child is its own listing (`cat`, gone by the time its line is read)."""
    plan = _plan(engine, workspace, internet)
    argv = plan.container.command
    plan = replace(plan, container=replace(plan.container, command=argv[:argv.index("--") + 1] + (BB, "sh", "-c", CHILDREN)))
    listener = Recorder()
    outcome = launch.run(engine, plan, listener)
    assert outcome.probe.ok and outcome.exit_code == 0
    assert PROBE_ASK.encode() not in listener.out and leftovers(engine, workspace) == []
    others = [line for line in listener.out.decode().splitlines() if line.strip() and "/proc/1/task/1/children" not in line]
    assert others == [], listener.out


def test_without_the_launcher_s_word_the_probe_waits_a_bounded_time_then_fails(engine, internet, workspace):
    """gate=2: the probe waits 4 s for the word that never comes, then gives the proxy (none here) its
    15 s, and fails egress.proxy: the agent never runs."""
    plan = _gate(_plan(engine, workspace, internet), "2")
    ref = _without_its_proxy(engine, plan)
    try:
        began = time.monotonic()
        assert engine.wait(ref) == 97
        took = time.monotonic() - began
        logs = engine.logs(ref)
        assert logs.startswith(PROBE_ASK + "\n"), logs[:200]
        failed = [line for line in logs.splitlines() if line.startswith("PROBE\tegress.proxy\tfail")]
        assert failed and "PROBE-END\tfail" in logs, logs
        assert took >= 4 + 15 - 1, took   # the word's bound, then the proxy's own 15 s
        assert not (workspace / "AGENT-RAN").exists()
    finally:
        _cleanup(engine, plan, ref)


def test_while_the_probe_waits_for_the_word_no_process_of_its_own_waits_or_looks_for_it(engine, internet, workspace):
    """The word that the proxy is ready is a line on the probe's stdin, which its checks read with
    ash's builtin read: no sleeper waits for a signal (it was `busybox sleep 120`, twice the gate),
    and nothing looks for the word every 10 ms (it was a `busybox usleep` each time)."""
    plan = _plan(engine, workspace, internet)   # gate=60: without the word the probe would wait 120 s
    ref = _without_its_proxy(engine, plan)
    try:
        assert PROBE_ASK in _logs_until(engine, ref, PROBE_ASK, 30)
        time.sleep(6)   # the other egress asks are done by then (the DNS check's window is 4.5 s)
        seen = {line for _ in range(10) for line in engine.processes(ref)}
        assert seen and not [p for p in seen if " sleep " in f" {p} " or "usleep" in p], seen
        assert "PROBE-END" not in engine.logs(ref)   # still waiting for the word
    finally:
        _cleanup(engine, plan, ref)


def test_the_launcher_s_no_while_the_probe_waits_for_its_proxy_ends_it_at_once(engine, internet, workspace):
    plan = _plan(engine, workspace, internet)   # gate=60: the probe would wait 120 s for the word
    ref = _without_its_proxy(engine, plan)
    try:
        assert PROBE_ASK in _logs_until(engine, ref, PROBE_ASK, 30)
        time.sleep(0.5)   # the checks are running, the proxy's ask waiting for the word
        began = time.monotonic()
        engine.signal(ref, "TERM")
        assert engine.wait(ref) == 97
        assert time.monotonic() - began < 10   # not the probe's 120 s, nor the proxy's 15
        said = engine.logs(ref, stdout=False, stderr=True)
        assert "the launcher said no while the checks ran: the agent was not started" in said, said
        assert "PROBE-END" not in engine.logs(ref) and not (workspace / "AGENT-RAN").exists()
    finally:
        _cleanup(engine, plan, ref)


class _ProxyNeverStarts:
    """The real engine, but the proxy's start fails (after the sandbox's own start has begun)."""

    def __init__(self, engine, proxy: str):
        self.engine, self.proxy = engine, proxy

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def start(self, ref):
        if self.engine.inspect(ref).name.lstrip("/") == self.proxy:
            time.sleep(1)
            raise EngineError(f"starting container {ref}: refused by the test")
        return self.engine.start(ref)


def test_a_proxy_that_never_starts_means_the_agent_never_runs_and_nothing_stays(engine, internet, workspace):
    plan = _plan(engine, workspace, internet)
    with pytest.raises(EngineError, match="refused by the test"):
        launch.run(_ProxyNeverStarts(engine, plan.proxy.name), plan, Recorder())
    assert not (workspace / "AGENT-RAN").exists()
    assert leftovers(engine, workspace) == []
    assert engine.list(label.selector(label.SANDBOX, plan.container.name)) == []
