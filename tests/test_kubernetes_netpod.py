"""The Pod modes of the probe (net=pod, net=podproxy) against a real bridge network closed as a
NetworkPolicy-enforcing plugin closes it (tests/podman_closed.py): every preset's cluster rendering
starts when every rule is in place, and the probe refuses the Pod (the agent never runs) when any
one rule is missing, or when silence cannot be judged because the control does not answer."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import external_tool
from launcher.engine import images
from podman_closed import AGENT_IP, FORBIDDEN, NODE_ENV, PROXY_IP, RULES, ClosedNetwork
from podman_node import Node
from test_kubernetes_podman import AGENT_SAID, compiled

pytestmark = pytest.mark.engine
# Every preset whose cluster rendering this node can run: untrusted-gvisor's needs runsc, which
# podman 4.3 cannot start here ("cannot run with network enabled in root network namespace").
PRESETS = ("read-only", "untrusted", "ci", "devcontainer")
PROXY_PRESETS = ("ci", "devcontainer")


@pytest.fixture(scope="module")
def node(engine, tmp_path_factory):
    podman = external_tool("podman", "apt-get install podman catatonit")
    external_tool("catatonit", "apt-get install catatonit")
    external_tool("nft", "apt-get install nftables")
    images.ensure_for(engine, images.FULL_IMAGE, lambda line: None, proxy=True)   # untrusted's, devcontainer's
    # IPv6 left on: the kernel's link-local address on the Pod's interface, which the Pod modes accept
    n = Node(podman, tmp_path_factory.mktemp("podman-netpod"), link_local_ipv6=True, network_backend="cni")
    assert n.run("info", "--format", "{{.Host.NetworkBackend}}").stdout.strip() == "cni"
    for image in (images.probe_image().tag, images.proxy_image().tag, images.AGENT_IMAGE, images.FULL_IMAGE):
        n.load(image)
    return n


def play(node, tmp_path, preset: str, rules: tuple[str, ...], **closing) -> tuple[int, str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    forbidden = [arg for target in FORBIDDEN for arg in ("--forbidden", target)]
    objects = compiled(preset, ws, f"sandbox-test-claim-{os.getpid()}-netpod", "--proxy-ip", PROXY_IP, *forbidden)
    with ClosedNetwork(node, f"sandbox-test-netpod-{os.getpid()}", rules, images.AGENT_IMAGE, **closing) as closed:
        return node.play(objects, tmp_path, network=closed.network, proxy_ip=PROXY_IP, agent_ip=AGENT_IP,
                         node_env=NODE_ENV, agent_also=closed.second)


def line(logs: str, check: str) -> str:
    return next((ln for ln in logs.splitlines() if ln.startswith(f"PROBE\t{check}\t")), "")


@pytest.mark.parametrize("preset", PRESETS)
def test_on_the_closed_network_every_preset_passes_its_probe_and_the_agent_runs(node, preset, tmp_path):
    code, logs = play(node, tmp_path, preset, tuple(RULES))
    failed = [ln for ln in logs.splitlines() if "\tfail\t" in ln]
    assert code == 0 and not failed, logs
    for check in ("net.interfaces", "net.routes", "pod.reach", "pod.dns"):
        assert line(logs, check).startswith(f"PROBE\t{check}\tpass\t"), logs
    # refusals and silence were seen (tests/podman_closed.py: ICMP rejects end silent here too),
    # silence beside the control that answered in the same window
    reach = line(logs, "pod.reach")
    assert ":refused" in reach and ":silent" in reach, reach
    control = "proxy:connected" if preset in PROXY_PRESETS else "gateway:answered"
    assert f"control {control}" in reach
    assert "PROBE-END\tok" in logs and AGENT_SAID in logs


# rule -> the address a missing rule lets answer, and the checks that must then refuse the Pod
OPENED = {
    "gateway": ("10.89.78.1:10250:connected", ("pod.reach",)),
    "node": ("10.89.78.254:10250:connected", ("pod.reach",)),
    "api-server": ("10.89.78.54:6443:connected", ("pod.reach",)),
    "cluster-dns": ("10.89.78.53:53:connected", ("pod.reach", "pod.dns")),
    "metadata": ("10.89.78.55:80:connected", ("pod.reach",)),
    "public": ("10.89.78.56:443:connected", ("pod.reach",)),
}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("missing", list(RULES))
def test_with_any_one_rule_missing_the_probe_refuses_the_pod(node, preset, missing, tmp_path):
    code, logs = play(node, tmp_path, preset, tuple(r for r in RULES if r != missing))
    answered, checks = OPENED[missing]
    assert code == 97 and AGENT_SAID not in logs and "PROBE-END\tfail" in logs, logs
    for check in checks:
        assert line(logs, check).startswith(f"PROBE\t{check}\tfail\t"), logs
    assert answered in line(logs, "pod.reach"), logs
    if missing == "cluster-dns":
        assert "10.89.78.53:answered" in line(logs, "pod.dns")


def test_silence_without_an_answering_control_is_no_proof(node, tmp_path):
    """Every rule in place, but the gateway answers no ARP: the dropped targets stay silent and the
    none-mode control (the gateway resolved at the link layer) is missing, so silence proves nothing."""
    code, logs = play(node, tmp_path, "read-only", tuple(RULES), arp_blocked=True)
    assert code == 97 and AGENT_SAID not in logs, logs
    reach = line(logs, "pod.reach")
    assert reach.startswith("PROBE\tpod.reach\tfail\t") and "silence without an answering control" in reach, logs
    assert "control gateway:silent" in reach


def test_a_global_ipv6_address_on_the_pods_interface_fails_net_routes(node, tmp_path):
    """Link-local IPv6 is accepted (the test above runs with it); an address beyond it is not."""
    code, logs = play(node, tmp_path, "read-only", tuple(RULES), ipv6=True)
    assert code == 97 and AGENT_SAID not in logs, logs
    routes = line(logs, "net.routes")
    assert routes.startswith("PROBE\tnet.routes\tfail\t") and "if_inet6:eth0" in routes, logs


def test_a_second_interface_fails_net_interfaces(node, tmp_path):
    """The Pod modes accept the plugin's one interface, not another network beside it."""
    code, logs = play(node, tmp_path, "read-only", tuple(RULES), second=True)
    assert code == 97 and AGENT_SAID not in logs, logs
    interfaces = line(logs, "net.interfaces")
    assert interfaces.startswith("PROBE\tnet.interfaces\tfail\t") and "eth1" in interfaces, logs


def test_a_closed_network_that_fails_to_come_up_leaves_nothing_behind(node, monkeypatch):
    """A failure after the network, the listener, the rules and the addresses were made (the
    host's listeners refuse to start): all of it goes again."""
    import podman_closed

    def refuse(listeners):
        raise OSError("the host's listeners did not start")

    monkeypatch.setattr(podman_closed, "_HostListeners", refuse)
    name = f"sandbox-test-netpod-{os.getpid()}"
    with pytest.raises(OSError, match="did not start"):
        with ClosedNetwork(node, name, tuple(RULES), images.AGENT_IMAGE):
            pass
    assert name not in node.run("network", "ls", "--format", "{{.Name}}").stdout
    assert f"{name}-world" not in node.run("ps", "-a", "--format", "{{.Names}}").stdout
    left = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert f"sandbox_test_netpod_{os.getpid()}" not in left
    assert "10.89.78." not in subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
