"""Proxy mode's networks on small subnets: more of them than Docker's default pools hold (~31)."""

from __future__ import annotations

import ipaddress
import os
import random

import pytest

from conftest import docker_sdk
from launcher import labels as label
from launcher.engine import subnets
from launcher.errors import EngineError
from launcher.plan.networks import INTERNAL_OPTIONS
from launcher.plan.plan import NetworkSpec

# eth0 default via 192.0.2.1, 192.0.2.0/24 on eth0, 198.18.0.0/16 on a VPN's tun device
ROUTES = ("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
          "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
          "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
          "tun0\t000012C6\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")


def spec(name: str) -> NetworkSpec:
    return NetworkSpec(name=name, internal=True, options=INTERNAL_OPTIONS,
                       labels=((label.MANAGED, "1"), (label.KIND, "network"), (label.SANDBOX, name)))


class Networks:
    """A fake engine's networks: refuses a subnet that overlaps one it holds, as Docker does."""

    def __init__(self, held=()):
        self.held = [ipaddress.IPv4Network(n) for n in held]
        self.calls: list[str] = []

    def create_network(self, spec, subnet=""):
        self.calls.append(subnet)
        if subnet and any(ipaddress.IPv4Network(subnet).overlaps(n) for n in self.held):
            return None
        if subnet:
            self.held.append(ipaddress.IPv4Network(subnet))
        return subnet


def facts(monkeypatch, pool: str = "", routes: str = ROUTES) -> None:
    monkeypatch.setattr(subnets.host, "network_facts", lambda: (pool, routes))


def test_routes_are_parsed_without_the_default_route():
    assert subnets.host_routes(ROUTES) == [ipaddress.IPv4Network("192.0.2.0/24"), ipaddress.IPv4Network("198.18.0.0/16")]


def test_a_network_gets_a_28_of_the_pool_that_no_host_route_overlaps(monkeypatch):
    facts(monkeypatch)
    engine = Networks()
    for i in range(40):   # more than Docker's default pools hold
        got = ipaddress.IPv4Network(subnets.create_network(engine, spec(f"n{i}"), random.Random(i)))
        assert got.prefixlen == 28 and got.subnet_of(ipaddress.IPv4Network("198.19.0.0/16")), got
    assert len(set(engine.held)) == 40


def test_a_subnet_another_network_holds_is_skipped(monkeypatch):
    facts(monkeypatch, routes="")
    first = next(subnets.candidates(ipaddress.IPv4Network(subnets.DEFAULT_POOL), [], random.Random(7)))
    engine = Networks(held=[str(first)])
    got = subnets.create_network(engine, spec("n"), random.Random(7))
    assert engine.calls[0] == str(first) and got != str(first) and len(engine.calls) == 2


def test_a_full_pool_is_a_clear_error(monkeypatch):
    facts(monkeypatch, pool="10.99.0.0/24", routes="")
    engine = Networks(held=["10.99.0.0/24"])
    with pytest.raises(EngineError, match="(?s)no free /28 found in 10.99.0.0/24.*SANDBOX_NETWORK_POOL"):
        subnets.create_network(engine, spec("n"), random.Random(1))
    assert len(engine.calls) == subnets.TRIES


def test_engine_leaves_the_choice_to_the_engine_and_a_bad_pool_is_refused(monkeypatch):
    facts(monkeypatch, pool="engine")
    engine = Networks()
    assert subnets.create_network(engine, spec("n")) == "" and engine.calls == [""]
    for bad in ("10.0.0.0/30", "not-a-net", "fd00::/64"):
        facts(monkeypatch, pool=bad)
        with pytest.raises(EngineError, match="SANDBOX_NETWORK_POOL"):
            subnets.create_network(engine, spec("n"))


@pytest.mark.engine
def test_more_proxy_networks_than_the_default_pools_hold(engine):
    """41 internal networks at once on this engine, each on its own /28 (Docker's default pools
    give out ~31); the engine refuses a /28 another network holds, and the launcher picks another."""
    prefix = f"sandbox-test-subnets-{os.getpid()}"
    names = [f"{prefix}-{i}" for i in range(40)]
    holder = f"{prefix}-holder"
    try:
        routes = subnets.host_routes(subnets.host.network_facts()[1])
        first = next(subnets.candidates(ipaddress.IPv4Network(subnets.DEFAULT_POOL), routes, random.Random(3)))
        assert engine.create_network(spec(holder), subnet=str(first))
        assert not engine.create_network(spec(f"{prefix}-again"), subnet=str(first))
        got = [subnets.create_network(engine, spec(names[0]), random.Random(3))]
        got += [subnets.create_network(engine, spec(name)) for name in names[1:]]
        assert str(first) not in got and len(set(got)) == 40
        for name, subnet in zip(names, got):
            assert docker_sdk().api.inspect_network(name)["IPAM"]["Config"][0]["Subnet"] == subnet
    finally:
        for name in names + [holder, f"{prefix}-again"]:
            engine.remove_network(name)
    assert not [n for n in engine.list_networks() if n.name.startswith(prefix)]


@pytest.mark.engine
def test_a_proxy_mode_sandbox_lives_on_a_28_of_the_pool(engine, workspace, monkeypatch):
    """The sandbox's only route is its internal network's /28, inside the pool the launcher was given
    (no request leaves: the probe asks only for a .invalid name, which the proxy refuses unresolved)."""
    import subprocess
    import sys

    monkeypatch.setenv("SANDBOX_NETWORK_POOL", "198.19.128.0/20")
    result = subprocess.run([sys.executable, "-m", "launcher", "run", "-p", "ci", "-w", str(workspace),
                             "--allow", "api.example.invalid", "--", "cat", "/proc/net/route"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    nets = subnets.host_routes(result.stdout)
    assert len(nets) == 1 and nets[0].prefixlen == 28 and nets[0].subnet_of(ipaddress.IPv4Network("198.19.128.0/20"))
