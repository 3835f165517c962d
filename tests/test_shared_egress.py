"""Proxy mode's shared egress network (plan.SHARED_EGRESS): one bridge for every launched proxy on
Docker, its containers kept apart (ICC off), made once on demand and kept; refused when a network
of its name is not as the launcher makes it; one per sandbox on podman, for files another tool
starts, and none for --egress-network. Removed only by `sandbox gc`, and only when unused."""

from __future__ import annotations

import dataclasses
import ipaddress
import random

import pytest

from conftest import fake_facts, preset
from launcher import labels as label
from launcher.engine import subnets
from launcher.engine.enginefake import FakeEngine
from launcher.errors import EngineError, NotFound
from launcher.host import engineid
from launcher.launch import sandboxes
from launcher.launch.launch import remove_sandbox
from launcher.plan.compiler import compile_policy
from launcher.plan.networks import ICC_OFF, SHARED_EGRESS
from launcher.policy.policy import with_allowed

CI = with_allowed(preset("ci"), ("allowed.test",))


def plan(kind: str = "run", podman: bool = False, egress_network: str | None = None):
    facts = fake_facts()
    if podman:
        facts = dataclasses.replace(facts, engine=engineid.EngineFacts(kind=engineid.PODMAN, cgroup_version="2"),
                                    seccomp_profile="/state/seccomp/x-podman.json")
    return compile_policy(CI, facts, command=("true",), kind=kind, egress_network=egress_network)


@pytest.fixture
def pool(monkeypatch, tmp_path):
    monkeypatch.setattr(subnets.host, "network_facts", lambda: ("", ""))
    monkeypatch.setattr(subnets.host, "state_dir", lambda: str(tmp_path))


def test_a_launched_docker_sandbox_shares_one_egress_network_with_icc_off_and_owns_only_its_internal_one():
    for kind in ("run", "up"):
        p = plan(kind)
        internal, shared = p.networks
        assert internal.internal and not internal.shared and internal.name == f"{p.container.name}-net"
        assert (shared.name, shared.shared, shared.internal) == (SHARED_EGRESS, True, False)
        assert ICC_OFF in shared.options and p.proxy.egress_network == SHARED_EGRESS
        # not any one sandbox's: `remove_sandbox` finds networks by this label, and never this one
        assert label.SANDBOX not in dict(shared.labels) and dict(shared.labels)[label.KIND] == "egress"


def test_podman_files_for_another_tool_and_a_given_network_keep_what_they_had():
    podman = plan(podman=True)
    assert [n.shared for n in podman.networks] == [False, False]
    assert podman.proxy.egress_network == f"{podman.container.name}-egress"
    external = plan("external")
    assert external.proxy.egress_network == f"{external.container.name}-egress"
    assert not any(n.shared for n in external.networks)
    given = plan(egress_network="mine")
    assert [n.name for n in given.networks] == [f"{given.container.name}-net"] and given.proxy.egress_network == "mine"


def test_the_shared_network_is_made_once_on_a_22_and_then_taken_as_it_is(pool):
    engine = FakeEngine()
    spec = plan().networks[1]
    first = subnets.shared_network(engine, spec)
    assert ipaddress.IPv4Network(first).prefixlen == 22
    assert subnets.shared_network(engine, spec) == first
    assert list(engine.http.networks) == [SHARED_EGRESS]
    made = engine.http.networks[SHARED_EGRESS]
    assert made["Options"] == {ICC_OFF[0]: ICC_OFF[1]}


def test_a_create_another_launcher_won_is_taken(pool, monkeypatch):
    engine = FakeEngine()
    spec = plan().networks[1]
    real = engine.create_network

    def late(spec, subnet=""):   # another launcher's create lands between our look and ours
        real(spec, subnet)
        return real(spec, subnet)   # ours: the engine's name conflict

    monkeypatch.setattr(engine, "create_network", late)
    assert ipaddress.IPv4Network(subnets.shared_network(engine, spec)).prefixlen == 22


@pytest.mark.parametrize("change, says", [
    ({"Options": {}}, "containers can reach each other"),
    ({"Options": {ICC_OFF[0]: "true"}}, "containers can reach each other"),
    ({"Labels": {}}, "not labelled as the launcher's"),
    ({"Internal": True}, "internal"),
])
def test_a_network_of_that_name_not_made_as_the_launcher_makes_it_is_refused(pool, change, says):
    engine = FakeEngine()
    spec = plan().networks[1]
    subnets.shared_network(engine, spec)
    engine.http.networks[SHARED_EGRESS].update(change)
    with pytest.raises(EngineError, match=f"(?s)not the launcher's shared egress network: .*{says}.*docker network rm"):
        subnets.shared_network(engine, spec)


def test_removing_a_sandbox_leaves_the_shared_network_and_gc_removes_it_only_when_unused(pool):
    engine = FakeEngine()
    p = plan()
    for spec in p.networks:
        (subnets.shared_network if spec.shared else subnets.create_network)(engine, spec)
    ref = engine.create_proxy(p.proxy)
    remove_sandbox(engine, p.container.name)
    assert engine.http.container(ref) is None and list(engine.http.networks) == [SHARED_EGRESS]
    assert not engine.network_info(SHARED_EGRESS).containers
    engine.http.networks[SHARED_EGRESS]["Containers"].append("another-sandboxs-proxy")
    assert sandboxes.gc(engine, True) == [] and SHARED_EGRESS in engine.http.networks   # in use: kept
    engine.http.networks[SHARED_EGRESS]["Containers"].clear()
    assert sandboxes.gc(engine, False) == [SHARED_EGRESS] and engine.http.networks == {}


def test_a_proxy_finding_the_shared_network_gone_at_its_join_makes_it_again(pool):
    engine = FakeEngine()
    p = plan()
    spec = p.networks[1]
    subnets.shared_network(engine, spec)
    engine.create_network(p.networks[0])
    engine.remove_network(SHARED_EGRESS)   # `sandbox gc` meanwhile
    with pytest.raises(NotFound):
        engine.create_proxy(p.proxy)
    engine.remove(p.proxy.name)
    ref = engine.create_proxy(p.proxy, remake=lambda: subnets.shared_network(engine, spec))
    assert SHARED_EGRESS in engine.inspect(ref).networks


def test_a_small_pool_gives_the_shared_network_a_quarter_and_a_28_pool_its_own_size(monkeypatch, tmp_path):
    spec = plan().networks[1]
    for setting, prefix in (("10.9.0.0/24", 26), ("10.9.0.0/28", 28), ("10.0.0.0/8", 22)):
        monkeypatch.setattr(subnets.host, "network_facts", lambda s=setting: (s, ""))
        made = subnets.create_network(FakeEngine(), spec, random.Random(1))
        assert ipaddress.IPv4Network(made).prefixlen == prefix
