"""The shared egress network on the real engine: what keeps one sandbox's proxy from reaching
another's there is the bridge's ICC switch, so this proves that a container on the network the
launcher makes cannot reach another's port 3128, and (tamper) that with ICC on it can, that the
launcher refuses such a network, and that a launch on it never starts the agent. Only our own
containers and networks: nothing leaves the host. On podman (no such switch: Dialect.shared_egress
is off) each sandbox keeps its own egress network, which is what is checked there."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import replace

import pytest

from conftest import docker_sdk, launch_facts, preset
from launcher import labels as label
from launcher.engine import images, subnets
from launcher.errors import EngineError
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.plan.networks import ICC_OFF, SHARED_EGRESS
from launcher.policy.policy import with_allowed
from launcher.selftest import testnet
from fakes import Recorder
from test_proxy import SANDBOX, leftovers

pytestmark = pytest.mark.engine

LISTEN = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('', 3128))\ns.listen()\nprint('READY', flush=True)\n"
          "while True:\n    c, _ = s.accept()\n    c.sendall(b'proxy-port-reached')\n    c.close()\n")
CONNECT = ("import socket, sys\ntry:\n    print(socket.create_connection((sys.argv[1], 3128), timeout=2).recv(64).decode())\n"
           "except OSError as exc:\n    print('blocked', exc)\n")


def _plan(engine, workspace, **how):
    policy = with_allowed(preset("ci"), ("api.example.invalid",))
    facts = launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag)
    return compile_policy(policy, facts, command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"), **how)


@contextlib.contextmanager
def _listener(engine, network: str):
    """A container on `network` listening on port 3128 (as a proxy whose port were open there);
    yields its address on it."""
    api = docker_sdk().api
    ref = api.create_container(testnet.ensure_upstream(engine), command=["python3", "-u", "-c", LISTEN],
                               labels={"sandbox-test": "shared-egress"},
                               host_config=api.create_host_config(network_mode=network))["Id"]
    try:
        api.start(ref)
        deadline = time.monotonic() + 30
        while b"READY" not in api.logs(ref) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield api.inspect_container(ref)["NetworkSettings"]["Networks"][network]["IPAddress"]
    finally:
        api.remove_container(ref, force=True)


def _reach(engine, network: str, address: str) -> str:
    """What a second container on `network` gets from `address`:3128."""
    return docker_sdk().containers.run(testnet.ensure_upstream(engine), ["python3", "-c", CONNECT, address],
                                       network=network, remove=True).decode()


def _shared_spec(engine, workspace):
    return next(n for n in _plan(engine, workspace).networks if n.shared)


def test_one_container_on_the_shared_egress_network_cannot_reach_another(engine, workspace):
    if not engine.dialect.plan.shared_egress:
        assert not any(n.shared for n in _plan(engine, workspace).networks)   # podman: its own, as before
        return
    spec = _shared_spec(engine, workspace)
    subnets.shared_network(engine, spec)
    info = engine.network_info(SHARED_EGRESS)
    assert info.options.get(ICC_OFF[0]) == ICC_OFF[1] and not info.internal and info.labels[label.KIND] == "egress"
    with _listener(engine, SHARED_EGRESS) as address:
        got = _reach(engine, SHARED_EGRESS, address)
    assert got.startswith("blocked"), got


def test_tampered_with_icc_on_it_reaches_and_the_launcher_refuses_it(engine, workspace):
    if not engine.dialect.plan.shared_egress:
        return test_one_container_on_the_shared_egress_network_cannot_reach_another(engine, workspace)
    name = f"sandbox-test-egress-icc-{os.getpid()}"
    tampered = replace(_shared_spec(engine, workspace), name=name, options=())   # ICC left on
    subnets.create_network(engine, tampered)
    try:
        with _listener(engine, name) as address:
            got = _reach(engine, name, address)
        assert got.strip() == "proxy-port-reached", got   # the switch is what keeps them apart here
        with pytest.raises(EngineError, match="containers can reach each other"):
            subnets.shared_network(engine, replace(tampered, options=(ICC_OFF,)))
        # a launch whose shared network is that one: refused before the proxy joins; the agent never runs
        plan = _plan(engine, workspace)
        plan = replace(plan, networks=tuple(replace(n, name=name) if n.shared else n for n in plan.networks),
                       proxy=replace(plan.proxy, egress_network=name))
        with pytest.raises(EngineError, match="not the launcher's shared egress network"):
            launch.run(engine, plan, Recorder())
        assert not (workspace / "AGENT-RAN").exists() and leftovers(engine, workspace) == []
    finally:
        engine.remove_network(name)


def test_two_sandboxes_proxies_share_it_and_leave_it_behind_unused(engine, workspace, tmp_path):
    if not engine.dialect.plan.shared_egress:
        return
    names = [f"sandbox-test-shared-{i}-{os.getpid()}" for i in (1, 2)]
    try:
        for name in names:
            result = subprocess.run(SANDBOX + ["up", str(workspace), "-p", "ci", "--name", name, "--no-shell",
                                               "--allow", "api.example.invalid"], capture_output=True, text=True)
            assert result.returncode == 0, result.stderr
        on = set(engine.network_info(SHARED_EGRESS).containers)
        proxies = [c.id for c in engine.list(label.selector(label.KIND, "proxy")) if c.name in {f"{n}-proxy" for n in names}]
        assert len(proxies) == 2 and set(proxies) <= on
    finally:
        for name in names:
            subprocess.run(SANDBOX + ["down", name], capture_output=True)
    assert leftovers(engine, workspace) == []
    still = set(engine.network_info(SHARED_EGRESS).containers)
    assert not still & set(proxies)   # kept, without them
