"""The SandboxTemplate's Pod as the agent-sandbox controller makes it (renamed after its Sandbox,
with the controller's own labels), run by `podman kube play` in place of a cluster: the probe
passes and the agent runs, in proxy mode through the file's proxy Pod; a Pod the controller
changed (a mount added, as a service-account token would be) fails the probe and the agent never runs."""

from __future__ import annotations

import copy
import os
import subprocess

import pytest
import yaml

from test_agent_sandbox import template_of
from test_kubernetes import SANDBOX
import test_kubernetes_podman
from test_kubernetes_podman import AGENT_SAID, PROXY_IP, PROXY_NET

pytestmark = pytest.mark.engine
node = test_kubernetes_podman.node   # the podman node fixture: one per module, its images loaded once


def controller_pod(template: dict, suffix: str = "x7k2p") -> dict:
    """The Pod a warm pool's Sandbox gets (sandbox_controller.go at 2fd412d): named after the
    Sandbox (the pool's name and a random suffix), the template's labels and annotations with the
    controller's own added, the spec as the template has it."""
    pod_template = copy.deepcopy(template["spec"]["podTemplate"])
    labels = pod_template["metadata"]["labels"] | {"agents.x-k8s.io/sandbox-name-hash": "5f1c2e9a",
                                                   "agents.x-k8s.io/sandbox-template-ref-hash": "0d4b7c11",
                                                   "agents.x-k8s.io/warm-pool-sandbox": "7a3e9f02"}
    annotations = pod_template["metadata"]["annotations"] | {
        "agents.x-k8s.io/propagated-labels": ",".join(sorted(pod_template["metadata"]["labels"]))}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{template['metadata']['name']}-{suffix}", "labels": labels,
                         "annotations": annotations},
            "spec": pod_template["spec"]}


def played(policy: str, tmp_path, *more: str) -> list[dict]:
    """`sandbox compile --format agent-sandbox --node podman --warm 1` of the policy, the template
    and pool replaced by the Pod the controller makes from them."""
    ws = tmp_path / "ws"
    ws.mkdir()
    claim = f"sandbox-test-claim-{os.getpid()}-as-{policy}"
    result = subprocess.run(SANDBOX + ["compile", "-p", policy, "-w", str(ws), "--format", "agent-sandbox", "--warm",
                                       "1", "--node", "podman", "--claim", claim, *more, "--", "sh", "-c",
                                       f"echo {AGENT_SAID}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    template = template_of(objects)
    return [o for o in objects if not o["apiVersion"].startswith("extensions.")] + [controller_pod(template)]


def _agent(objects: list[dict]) -> dict:
    return objects[-1]["spec"]["containers"][0]


def test_the_controllers_pod_passes_its_probe_and_the_agent_runs(node, tmp_path):
    objects = played("read-only", tmp_path)
    code, logs = node.play(objects, tmp_path)
    failed = [line for line in logs.splitlines() if "\tfail\t" in line]
    assert code == 0 and not failed, logs
    assert "PROBE-END\tok" in logs and AGENT_SAID in logs


def test_a_proxy_mode_template_reaches_only_the_files_proxy_pod(node, tmp_path):
    objects = played("ci", tmp_path, "--proxy-ip", PROXY_IP)
    with node.network(f"sandbox-test-as-{os.getpid()}", PROXY_NET) as network:
        code, logs = node.play(objects, tmp_path, network=network, proxy_ip=PROXY_IP)
    failed = [line for line in logs.splitlines() if "\tfail\t" in line]
    assert code == 0 and not failed, logs
    for check in ("egress.proxy", "egress.denied", "pod.reach", "pod.dns"):
        assert f"PROBE\t{check}\tpass\t" in logs
    assert AGENT_SAID in logs


def test_a_pod_the_controller_changed_fails_its_probe(node, tmp_path):
    """A mount the template does not have (where a service-account token would go): the probe's
    inventory of mounts refuses it."""
    objects = played("read-only", tmp_path)
    spec = objects[-1]["spec"]
    spec["volumes"].append({"name": "injected", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    _agent(objects)["volumeMounts"].append({"name": "injected", "readOnly": True,
                                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    code, logs = node.play(objects, tmp_path)
    assert code == 97, logs
    assert "PROBE\tmounts.inventory\tfail\t" in logs and "PROBE-END\tfail" in logs and AGENT_SAID not in logs
