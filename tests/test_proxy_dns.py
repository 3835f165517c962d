"""egress.dns on Docker without a wait (issue 45): Docker's embedded resolver (127.0.0.11) does not
answer at all when its upstream fails, and does not for up to 4 s while a slow one thinks, so its
silence proves nothing soon. The probe instead listens on the sandbox's port 53 and passes only when
its own query, sent to the resolver, arrives there from 127.0.0.1: the resolver's upstream is the
sandbox's own loopback (the plan's Dns), where nothing answers once the agent runs. Silence fails.

The tampers replace that one protection, the plan's Dns, with a resolver of our own that answers
after the embedded resolver's 4 s (silence within the window, which the probe before this change
passed): once reachable (the sandbox on the upstream network), once not (the sandbox on its own
internal network). Not `Dns` removed: the engine's own upstreams are the host's resolvers, and a
host whose resolver is on its loopback would forward the query out (tests send nothing outside).
The late-answer tests (an answer after 1 s and 3 s) are tests/test_proxy.py's."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

from fakes import Recorder
from conftest import docker_sdk, launch_facts, preset
from launcher.engine import images
from launcher.errors import ProbeFailed
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import with_allowed
from test_proxy import _plan, internet, leftovers, probe_only, slow_resolver  # noqa: F401 - fixtures

pytestmark = pytest.mark.engine


class Phases(Recorder):
    """A listener that records how long each phase of the launch took (launcher.timings.timed)."""

    def __init__(self):
        super().__init__()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = time.monotonic() - start


def test_the_probe_sees_the_resolver_forward_to_the_sandbox_s_own_loopback_without_a_wait(engine, internet,
                                                                                          workspace):
    if engine.dialect.name == "podman":
        pytest.skip("podman: the sandbox's nameserver is its loopback, no resolver relays (egress.dns's tamper in test_proxy.py)")
    plan = _plan(engine, workspace, internet)
    assert plan.container.dns == ("127.0.0.1",) and plan.probe.resolver == "127.0.0.11"
    listener = Phases()
    outcome = launch.run(engine, plan, listener)
    assert outcome.probe.ok and (workspace / "AGENT-RAN").exists()
    dns = next(c for c in outcome.probe.checks if c.id == "egress.dns")
    assert dns.observed == "allowed.test:relayed to the sandbox's own 127.0.0.1:53", dns.observed
    # the probe no longer waits out the 4.5 s window (about 0.1 s on a quiet machine)
    assert listener.seconds["probe"] < 3.0, listener.seconds
    assert leftovers(engine, workspace) == []


@pytest.mark.parametrize("placement", ["upstream network", "internal network"])
def test_a_resolver_upstream_other_than_the_sandbox_s_loopback_fails_egress_dns(engine, internet, workspace,
                                                                             probe_only, placement):
    """The plan's Dns replaced by a resolver that answers after 10 s: the embedded resolver gives up
    at 4 s, so within the probe's window nothing answers at all. Silence is no proof: it fails."""
    if engine.dialect.name == "podman":
        pytest.skip("podman: the sandbox's nameserver is its loopback, no resolver relays (egress.dns's tamper in test_proxy.py)")
    with slow_resolver(internet, 10.0) as (address, ref):
        policy = with_allowed(preset("ci"), ({"host": "slow.test", "private": True},))
        plan = compile_policy(policy, launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag),
                              egress_network=internet.network,
                              command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))
        container = replace(plan.container, dns=(address,))
        if placement == "upstream network":
            container = replace(container, network_mode=internet.network)
        tampered = replace(plan, container=container)
        assert tampered != plan, "the tamper changed nothing"
        with pytest.raises(ProbeFailed) as info:
            launch.run(engine, tampered, Recorder())
        failed = {c.id: c for c in info.value.report.failed}
        assert "egress.dns" in failed, info.value.report
        assert "slow.test:not relayed to the sandbox's own 127.0.0.1:53, no answer within 4.5s" == \
            failed["egress.dns"].observed
        if placement == "upstream network":   # reached, and too slow for the embedded resolver
            assert b"DNS" in docker_sdk().api.logs(ref)
        assert not (workspace / "AGENT-RAN").exists() and leftovers(engine, workspace) == []
