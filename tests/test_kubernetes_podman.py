"""The compiled agent Pod run by a real consumer of Kubernetes YAML, `podman kube play`: the probe
passes and the agent runs; a Pod with its root filesystem writable, or a capability kept, fails
the probe and the agent never runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from conftest import external_tool
from launcher.engine import images
from podman_node import Node

SANDBOX = [sys.executable, "-m", "launcher"]
AGENT_SAID = "agent-ran-in-the-pod"
pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def node(engine, tmp_path_factory):
    podman = external_tool("podman", "apt-get install podman catatonit")
    external_tool("catatonit", "apt-get install catatonit")   # podman builds its pause image with it (no registry)
    images.ensure_for(engine, images.FULL_IMAGE, lambda line: None, proxy=True)   # untrusted's, devcontainer's
    n = Node(podman, tmp_path_factory.mktemp("podman-node"))
    for image in (images.probe_image().tag, images.proxy_image().tag, images.AGENT_IMAGE, images.FULL_IMAGE):
        n.load(image)
    return n


def compiled(policy: str, workspace, claim: str, *more: str) -> list[dict]:
    result = subprocess.run(SANDBOX + ["compile", "-p", policy, "-w", str(workspace), "--format", "kubernetes",
                                       "--node", "podman", "--claim", claim, *more, "--", "sh", "-c", f"echo {AGENT_SAID}"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def _agent(objects: list[dict]) -> dict:
    pod = next(d for d in objects if d["kind"] == "Pod" and d["metadata"]["labels"]["dev.sandbox.kind"] == "kubernetes")
    return pod["spec"]["containers"][0]


@pytest.mark.parametrize("policy", ["read-only", "untrusted"])
def test_the_agent_pod_passes_its_probe_under_podman_and_the_agent_runs(node, policy, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    claim = f"sandbox-test-claim-{os.getpid()}-{policy}"
    code, logs = node.play(compiled(policy, ws, claim), tmp_path)
    failed = [line for line in logs.splitlines() if "\tfail\t" in line]
    assert code == 0 and not failed, logs
    assert "PROBE-END\tok" in logs and AGENT_SAID in logs
    # no per-Pod pids limit: n/a with what the node gives, never a pass (the podman node knows the claim's path)
    assert "PROBE\tlimits.pids\tn/a\tmax\t" in logs and "PROBE\tmounts.workspace\tpass\t" in logs


def _writable_root(pod: list[dict]) -> str:
    _agent(pod)["securityContext"]["readOnlyRootFilesystem"] = False
    return "fs.root_ro"


def _capability_kept(pod: list[dict]) -> str:
    _agent(pod)["securityContext"]["capabilities"]["add"] = ["NET_RAW"]
    return "caps.bnd"


@pytest.mark.parametrize("tamper", [_writable_root, _capability_kept], ids=["writable-root", "capability-kept"])
def test_a_tampered_pod_fails_its_probe_and_the_agent_never_runs(node, tamper, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    objects = compiled("read-only", ws, f"sandbox-test-claim-{os.getpid()}-tamper")
    check = tamper(objects)
    code, logs = node.play(objects, tmp_path)
    assert code == 97, logs
    assert f"PROBE\t{check}\tfail\t" in logs and "PROBE-END\tfail" in logs
    assert AGENT_SAID not in logs


def test_under_podmans_own_default_seccomp_profile_the_probe_refuses_the_pod(node, tmp_path):
    """podman's (and CRI-O's, containers/common) RuntimeDefault lets any process create a user
    namespace; Docker's and containerd's do not. The probe notices: on such a node the agent never runs."""
    ws = tmp_path / "ws"
    ws.mkdir()
    objects = compiled("read-only", ws, f"sandbox-test-claim-{os.getpid()}-seccomp")
    code, logs = node.play(objects, tmp_path, node_seccomp=False)
    assert code == 97 and "PROBE\tseccomp.unshare\tfail\t" in logs and AGENT_SAID not in logs, logs


# An address plan of its own, away from Docker's and podman's default ranges.
PROXY_NET, PROXY_IP = "10.89.77.0/24", "10.89.77.10"


def test_a_proxy_mode_pod_reaches_only_its_proxy_pod_and_passes_the_egress_checks(node, tmp_path):
    """The ci preset (proxy mode, writable workspace with its protected paths): Squid in its own Pod
    at the address the agent was compiled with, on an internal podman network that stands in for the
    NetworkPolicies (podman ignores them). Nothing on that network leads anywhere else."""
    ws = tmp_path / "ws"
    ws.mkdir()
    objects = compiled("ci", ws, f"sandbox-test-claim-{os.getpid()}-proxy", "--proxy-ip", PROXY_IP)
    with node.network(f"sandbox-test-k8s-{os.getpid()}", PROXY_NET) as network:
        code, logs = node.play(objects, tmp_path, network=network, proxy_ip=PROXY_IP)
    failed = [line for line in logs.splitlines() if "\tfail\t" in line]
    assert code == 0 and not failed, logs
    for check in ("egress.proxy", "egress.denied", "pod.reach", "pod.dns", "fs.protected"):
        assert f"PROBE\t{check}\tpass\t" in logs
    assert "PROBE-END\tok" in logs and AGENT_SAID in logs
