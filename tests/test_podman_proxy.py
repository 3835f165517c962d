"""Proxy mode on podman (issue 30): podman's compat network create gives an internal network a
gateway on the host's bridge and aardvark-dns, which forwards the network's queries to the host's
resolvers (aardvark-dns 1.4). So on podman the internal network is made by podman's own create
without either, the proxy gets a fixed address there, the sandbox finds it by an /etc/hosts entry
(compared in the inspect), its one nameserver is its own loopback, and IPv6 is off on its interface.
The engine-backed proof is tests/test_proxy.py and `sandbox selftest` on podman (.ci/podman)."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import fake_facts, preset
from fakes import Recorder
from launcher.plan.dialects.podman import NO_IPV6 as PODMAN_NO_IPV6
from launcher.engine.dialects.podman import podman_network_body, podman_network_subnet
from launcher.engine.enginefake import FakeEngine, _answer
from launcher.engine.verify import compare_inspect
from launcher.errors import EngineError
from launcher.host import engineid
from launcher.launch import launch
from launcher.plan import checks
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import pinned_proxy
from launcher.policy.policy import with_allowed
from test_podman_specgen import PODMAN

PODMAN_FACTS = engineid.EngineFacts(kind=engineid.PODMAN, cgroup_version="1")


def ci_plan(podman: bool, workspace: str = "/home/dev/repo"):
    facts = fake_facts(workspace=workspace)
    if podman:
        facts = dataclasses.replace(facts, engine=PODMAN_FACTS, seccomp_profile="/state/seccomp/x-podman.json")
    return compile_policy(with_allowed(preset("ci"), ("allowed.test",)), facts, command=("true",))


def test_a_podman_proxy_plan_finds_the_proxy_by_a_hosts_entry_and_resolves_nothing_else():
    podman, docker = ci_plan(True), ci_plan(False)
    assert podman.proxy.hosts_entry and not docker.proxy.hosts_entry
    assert podman.probe.resolver == "127.0.0.1" and docker.probe.resolver == "127.0.0.11"
    assert podman.container.dns == docker.container.dns == ("127.0.0.1",)
    assert PODMAN_NO_IPV6 in podman.container.sysctls and PODMAN_NO_IPV6 not in docker.container.sysctls
    # the hosts entry is pinned at launch, once the internal network's subnet is known
    assert podman.container.extra_hosts == docker.container.extra_hosts == ()
    pinned, address = pinned_proxy(podman, "198.18.7.16/28")
    assert address == "198.18.7.18" and pinned.container.extra_hosts == ("sandbox-proxy:198.18.7.18",)
    assert pinned_proxy(docker, "198.18.7.16/28") == (docker, "")
    assert "resolver=127.0.0.1" in podman.container.command
    assert compile_policy(preset("read-only"), fake_facts()).probe.resolver == "-"   # egress.dns is proxy mode's


def test_podman_s_internal_network_is_asked_without_gateway_or_dns():
    internal, egress = ci_plan(True).networks
    body = podman_network_body(internal, "198.18.7.16/28")
    assert body["internal"] is True and body["dns_enabled"] is False
    assert body["subnets"] == [{"subnet": "198.18.7.16/28"}] and body["options"] == {"mtu": "65000"}
    assert podman_network_body(egress)["dns_enabled"] is True and podman_network_body(egress)["subnets"] == []
    with pytest.raises(EngineError, match="cannot take the network option"):
        podman_network_body(dataclasses.replace(internal, options=(("com.docker.network.bridge.enable_icc", "false"),)))
    with pytest.raises(EngineError, match="cannot take the network option"):   # inhibit_ipv4 means "no gateway": internal only
        podman_network_body(dataclasses.replace(egress, options=internal.options))


@pytest.mark.parametrize("made", [
    {"subnets": [{"subnet": "198.18.7.16/28", "gateway": "198.18.7.17"}], "dns_enabled": False},   # the host on it
    {"subnets": [{"subnet": "198.18.7.16/28"}], "dns_enabled": True},                             # aardvark on it
    {"subnets": [], "dns_enabled": False},
])
def test_an_internal_network_podman_made_otherwise_is_refused_and_removed(made):
    internal = ci_plan(True).networks[0]
    with pytest.raises(EngineError, match="not as asked"):
        podman_network_subnet(internal, made, "198.18.7.16/28")
    engine = FakeEngine(engine_version=PODMAN, libpod_info={})
    fake = engine.http

    def answer(self, body, **_):   # the network is made, then answered otherwise than asked
        fake.networks[body["name"]] = {"Name": body["name"], "Labels": body["labels"], "Containers": []}
        return _answer(200, {"name": body["name"], **made})

    fake.ROUTES = [("POST", "/libpod/networks/create", answer), *fake.ROUTES]
    with pytest.raises(EngineError, match="not as asked"):
        engine.create_network(internal, "198.18.7.16/28")
    assert fake.networks == {}


def test_a_podman_launch_pins_the_proxy_s_address_and_the_sandbox_s_hosts_entry(tmp_path):
    plan = ci_plan(True, str(tmp_path))
    probe = "".join(f"PROBE\t{c}\tpass\t-\t-\n" for c in plan.probe.checks)
    engine = FakeEngine(engine_version=PODMAN, libpod_info={},
                        output=[((probe + f"PROBE-END\tok\t{len(plan.probe.checks)}\n").encode(), None)])
    engine.logs = lambda ref, stdout=True, stderr=False: "Accepting HTTP Socket connections at sandbox-proxy:3128"
    launch.run(engine, plan, Recorder())
    internal = next(b for b in engine.http.network_bodies if b["name"] == plan.proxy.internal_network)
    assert internal["internal"] and not internal["dns_enabled"]
    subnet = internal["subnets"][0]["subnet"]
    # made at once once the internal network exists: in either order
    proxy = next(b for b in engine.created if "NetworkingConfig" in b)
    sandbox = next(b for b in engine.created if b is not proxy)
    address = pinned_proxy(plan, subnet)[1]
    endpoint = proxy["NetworkingConfig"]["EndpointsConfig"][plan.proxy.internal_network]
    assert endpoint == {"IPAMConfig": {"IPv4Address": address}}   # no alias: the network has no DNS to answer it
    assert proxy["HostConfig"]["ExtraHosts"] == [f"sandbox-proxy:{address}"]   # Squid listens at its alias's address
    assert sandbox["hostadd"] == [f"sandbox-proxy:{address}"] and sandbox["dns_server"] == ["127.0.0.1"]
    assert sandbox["networks"] == {plan.proxy.internal_network: {}}


def test_the_inspect_holds_the_hosts_entry_the_network_and_on_docker_the_sysctls():
    from test_podman_specgen import created

    pinned = pinned_proxy(ci_plan(True), "198.18.7.16/28")[0].container
    _, diffs = created(pinned)
    assert diffs == []
    _, diffs = created(pinned, tamper=lambda doc: doc["HostConfig"].update(ExtraHosts=["sandbox-proxy:198.18.7.30"]))
    assert [d.split(":")[0] for d in diffs] == ["ExtraHosts"]
    _, diffs = created(pinned, tamper=lambda doc: doc["NetworkSettings"]["Networks"].update(podman={}))
    assert [d.split(":")[0] for d in diffs] == ["Networks"]
    docker = ci_plan(False).container
    engine = FakeEngine(tamper=lambda doc: doc["HostConfig"].update(Sysctls={}))
    ref = engine.create(docker)
    diffs = compare_inspect(docker, engine.inspect(ref), engine.image_env(docker.image))
    assert [d.split(":")[0] for d in diffs] == ["Sysctls"]


def test_a_silent_proxy_on_podman_hints_at_the_host_s_bridge_firewall():
    said = checks.hint("egress.proxy", "nc: timed out", uid=1000, workspace="/w", bridge_only_proxy=True)
    assert "FORWARD policy DROP" in said and "DOCKER-USER" in said
    assert checks.hint("egress.proxy", "nc: timed out", uid=1000, workspace="/w") == ""


def test_a_list_is_held_to_every_label_whatever_the_engine_s_filter_does(monkeypatch, tmp_path):
    """podman 4.3 ORs a volume list's label filters: `sandbox gc`'s look for leftover copy views
    (managed AND kind=copy-view) got every managed volume, and removed the probe's volume (found
    running tests/test_proxy.py on podman). Every list is held to all its labels here."""
    from launcher import labels as label
    from launcher.engine import enginefake
    from launcher.host import host
    from launcher.launch import sandboxes

    every = enginefake._matches

    def any_label(labels, filters):   # podman's volume list: one label of the filter is enough
        return any(every(labels, {"label": [w]}) for w in (filters or {}).get("label", []))

    monkeypatch.setattr(enginefake, "_matches", any_label)
    monkeypatch.setattr(host, "pid_alive", lambda pid: False)
    engine = FakeEngine(engine_version=PODMAN, libpod_info={})
    engine.create_volume("sandbox-probe-x", {label.MANAGED: "1"})
    assert engine.list_volumes(label.selector(label.KIND, "copy-view")) == []
    sandboxes.gc_copies(engine, force=False)
    assert [v.name for v in engine.list_volumes()] == ["sandbox-probe-x"]
