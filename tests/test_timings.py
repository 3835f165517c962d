"""Launch phases: the timeline the CLI prints with --timings, engine calls made at once, and the
order proxy mode keeps while it overlaps steps (the agent's container starts alongside its proxy,
its probe waiting for the launcher's word that the proxy is ready before it asks the proxy, and the
launcher's word that starts the agent comes only after that; with rules per request the container
starts only once the proxy is ready). Durations are
never asserted: speed figures come from bench/run.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from conftest import BIND, fake_facts, preset
from fakes import Recorder
from launcher import timings
from launcher.engine import overlap
from launcher.engine.engineapi import Attachment
from launcher.engine.enginefake import FakeEngine
from launcher.errors import EngineError, ProbeFailed
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.plan.networks import SHARED_EGRESS
from launcher.plan.plan import PROBE_ASK
from launcher.policy.policy import with_allowed


def test_the_timeline_records_each_phase_and_a_plain_listener_records_nothing():
    line = timings.Timeline()
    with line.phase("create"):
        pass
    line.since("imports", line.origin)
    assert [p.name for p in line.phases] == ["create", "imports"]
    assert all(p.seconds >= 0 and p.began >= 0 for p in line.phases)
    with timings.timed(Recorder(), "start"):   # no phase method: nothing to record into
        pass
    with timings.timed(line, "start"):
        pass
    assert line.phases[-1].name == "start"


def test_each_waits_for_every_call_then_raises_the_first_failure():
    ended = []

    def call(item):
        time.sleep(0.05 * (3 - item))
        ended.append(item)
        if item:
            raise ValueError(item)

    with pytest.raises(ValueError, match="1"):
        overlap.each(call, [0, 1, 2])
    assert sorted(ended) == [0, 1, 2]


class ProxyEngine(FakeEngine):
    """The fake engine, recording the order of what happened. The proxy reports ready only once
    the agent's container exists (or after 5 s), so a launch that made the container only after
    the proxy was ready shows it in the order; one that never comes up has exited."""

    def __init__(self, plan, ready=True):
        checks = "".join(f"PROBE\t{c}\tpass\t-\t-\n" for c in plan.probe.checks)
        # the probe asks for the launcher's word that its proxy is ready before its checks (probe.sh)
        super().__init__(output=[(f"{PROBE_ASK}\n".encode(), None),
                                 ((checks + f"PROBE-END\tok\t{len(plan.probe.checks)}\n").encode(), None)])
        self.plan, self.events, self.ready, self.agent_made = plan, [], ready, threading.Event()
        self.agent_started = threading.Event()
        self.ready_on = self.agent_made   # what the proxy's readiness waits for (5 s at most)
        self.lock = threading.Lock()

    def note(self, event):
        with self.lock:
            self.events.append(event)

    def role(self, ref):
        return "proxy" if self.http.info(ref).name == self.plan.proxy.name else "agent"

    def create_network(self, spec, subnet=""):
        time.sleep(0.05)
        made = super().create_network(spec, subnet)
        self.note(("network", spec.name))
        return made

    def create_proxy(self, spec, secrets=None, egress_ready=lambda: None, address="", remake=None):
        ref = super().create_proxy(spec, secrets, egress_ready, address, remake)
        self.note(("proxy", spec.name))
        return ref

    def create(self, spec):
        ref = super().create(spec)
        self.note(("create", "agent"))
        self.agent_made.set()
        return ref

    def start(self, ref):
        super().start(ref)
        self.note(("start", self.role(ref)))
        if self.role(ref) == "agent":
            self.agent_started.set()

    def signal(self, ref, name):
        super().signal(ref, name)
        self.note((name, self.role(ref)))

    def output(self, ref, stdin=False):   # the launcher's word to the probe: "go" on its stdin
        attached = super().output(ref, stdin)
        return Attachment(attached, lambda data: self.note(("word " + data.decode().strip(), self.role(ref))))

    def logs(self, ref, stdout=True, stderr=False):
        if self.role(ref) != "proxy":
            return ""
        if self.ready and self.ready_on.wait(5):
            self.note(("ready", "proxy"))
            return "Accepting HTTP Socket connections at sandbox-proxy:3128"
        return "FATAL: no config"

    def inspect(self, ref):
        info = super().inspect(ref)
        return replace(info, running=False) if self.role(ref) == "proxy" else info

    def remove_network(self, name):
        super().remove_network(name)
        self.note(("remove network", name))


def _proxy_plan(tmp_path):
    policy = with_allowed(preset("ci"), ("allowed.test",))
    return compile_policy(policy, fake_facts(workspace=str(tmp_path)), command=("true",))


def test_proxy_mode_overlaps_steps_but_starts_the_agent_only_after_the_proxy_is_ready(tmp_path):
    plan = _proxy_plan(tmp_path)
    engine = ProxyEngine(plan)
    engine.ready_on = engine.agent_started   # a launch that waited for the proxy to start it shows it
    launch.run(engine, plan, Recorder())
    events = engine.events
    internal = events.index(("network", plan.proxy.internal_network))
    ready, word = events.index(("ready", "proxy")), events.index(("word go", "agent"))
    assert internal < events.index(("create", "agent")) < ready    # made while the proxy started
    # its container starts once the proxy's exists, alongside the proxy's start; the probe asks the
    # proxy once the launcher has said it is ready ("proxy" on its stdin, asked for), the agent starts
    # only on the launcher's word after the report ("go" on its stdin); no signal is sent
    assert events.index(("proxy", plan.proxy.name)) < events.index(("start", "agent")) < ready < word
    assert ready < events.index(("word proxy", "agent")) < word and events.count(("word proxy", "agent")) == 1
    assert not [e for e in events if e[0] in ("USR2", "USR1")]
    assert len([e for e in events if e[0] == "network"]) == len(plan.networks) == 2


def test_with_rules_per_request_the_container_starts_only_once_the_proxy_is_ready(tmp_path, monkeypatch):
    from launcher.egress import bump

    plan = _proxy_plan(tmp_path)
    plan = replace(plan, proxy=replace(plan.proxy, http_rules="rule"))   # its CA goes over once ready
    handed = []
    monkeypatch.setattr(bump, "hand_over", lambda spec, log: handed.append(spec.name))
    engine = ProxyEngine(plan)
    launch.run(engine, plan, Recorder())
    events = engine.events
    assert handed == [plan.proxy.name]
    assert events.index(("ready", "proxy")) < events.index(("start", "agent")) < events.index(("word go", "agent"))


def test_a_proxy_that_never_comes_up_means_the_agent_never_starts_and_nothing_stays(tmp_path):
    plan = _proxy_plan(tmp_path)
    engine = ProxyEngine(plan, ready=False)
    with pytest.raises(EngineError, match="did not come up"):
        launch.run(engine, plan, Recorder())
    # its container may have started (the probe waits for the launcher's word that the proxy is
    # ready); neither that word nor the one that starts the agent came
    assert ("word go", "agent") not in engine.events and ("word proxy", "agent") not in engine.events
    assert ("create", "agent") in engine.events
    # the shared egress network stays by design (made once, kept while proxies use it: `sandbox gc`)
    assert engine.calls[-1] == "remove" and engine.containers == {} and list(engine.networks) == [SHARED_EGRESS]


def test_a_probe_that_never_finishes_is_refused_saying_where_it_stopped_what_the_word_met_and_what_still_ran(
        tmp_path, monkeypatch):
    plan = _proxy_plan(tmp_path)
    engine = ProxyEngine(plan)

    def asks_then_hangs(ref):   # it asks for the word, then says nothing more until it is removed
        yield f"{PROBE_ASK}\n".encode(), None
        while engine.http.container(ref) is not None:
            time.sleep(0.05)

    def broken(data):
        raise BrokenPipeError("[Errno 32] Broken pipe")

    monkeypatch.setattr(engine, "output", lambda ref, stdin=False: Attachment(asks_then_hangs(ref), broken))
    monkeypatch.setattr(launch, "PROBE_TIMEOUT", 1)
    listed = engine.processes   # and one whose command line would drive the terminal
    monkeypatch.setattr(engine, "processes", lambda ref: listed(ref) + ["sh -c \x1b]0;owned\x07\x1b[2J"])
    with pytest.raises(ProbeFailed) as refused:
        launch.run(engine, plan, Recorder())
    said = str(refused.value)
    assert "the probe did not finish within 1 s (1 lines, the last 'PROBE-ASK\\tproxy'; it asked for the word" in said
    assert "which could not be given: writing to a container's stdin" in said and "Broken pipe" in said, said
    assert "still running: " in said and "probe.sh" in said, said
    assert "| sh -c \\x1b]0;owned\\x07\\x1b[2J" in said and "\x1b" not in said and "\x07" not in said, said
    assert ("word go", "agent") not in engine.events and engine.containers == {}


@pytest.mark.engine
def test_run_with_timings_prints_every_phase(engine, workspace):
    result = subprocess.run([sys.executable, "-m", "launcher", "run", *BIND, "-w", str(workspace), "--timings", "--",
                             "true"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    table = result.stderr.split("sandbox: timings", 1)[1]
    for name in ("imports", "load", "layers", "compile", "connect", "images", "create", "inspect", "start", "probe",
                 "agent", "remove", "total"):
        assert f"\n  {name} " in table, name
