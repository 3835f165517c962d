"""`sandbox compile --format kubernetes`: every preset's objects validate against the official
OpenAPI schemas of several Kubernetes versions (strict), every Pod meets the restricted Pod
Security profile field by field, the golden files, and what the objects say and refuse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import fake_facts, preset
from kube_pss import pod_violations
from launcher import labels as label
from launcher import resources
from launcher.errors import PolicyError
from launcher.host.hostpaths import PathFact
from launcher.plan.compiler import compile_policy
from launcher.policy import inject
from launcher.policy.policy import parse_policy
from launcher.targets.kubernetes import DEFAULT_FORBIDDEN, KubeOptions, kubernetes_text, to_manifests
from launcher.targets.kubernetes import pod as kpod
from launcher.targets.kubernetes.network import PRIVATE_V4, PRIVATE_V6

GOLDEN = Path(__file__).parent / "golden" / "kubernetes"
SANDBOX = [sys.executable, "-m", "launcher"]
ENV = (("TERM", "xterm"), ("LANG", "C.UTF-8"))
NODES = ("kubelet", "podman")


def kube_validate():
    try:
        import kubernetes_validate
        from kubernetes_validate.utils import all_versions
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail("CI=true and no kubernetes-validate: it is in the test extra")
        pytest.skip("pip install kubernetes-validate")
    versions = sorted(set(all_versions()), key=lambda v: tuple(map(int, v.split("."))))
    return kubernetes_validate, [versions[0], versions[len(versions) // 2], versions[-1]]


def preset_plan(name: str, **facts):
    policy = replace(preset(name), source=f"policies/{name}.yaml")
    return compile_policy(policy, fake_facts(env=ENV, config_placeholder="/state/empty-config.json", **facts),
                          kind="kubernetes")


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def agent_pod(objects: list[dict]) -> dict:
    return next(o for o in by_kind(objects, "Pod") if o["metadata"]["labels"][label.KIND] == "kubernetes")


def probe_args(objects: list[dict]) -> dict[str, str]:
    args = agent_pod(objects)["spec"]["containers"][0]["args"]
    return dict(a.split("=", 1) for a in args[:args.index("--")])


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_validates_strictly_against_several_kubernetes_versions(name, node):
    kv, versions = kube_validate()
    objects = to_manifests(preset_plan(name), KubeOptions(node=node))
    assert {o["kind"] for o in objects} >= {"Pod", "NetworkPolicy"}
    for version in versions:
        for obj in objects:
            try:
                kv.validate(obj, version, strict=True)
            except Exception as exc:   # the schema's message is pages long: its first line says it
                pytest.fail(f"{name} {obj['kind']} {obj['metadata']['name']} on {version}: {str(exc).splitlines()[0]}")


def test_strict_validation_catches_a_field_no_schema_has():
    kv, versions = kube_validate()
    pod = agent_pod(to_manifests(preset_plan("read-only")))
    pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystm"] = True
    with pytest.raises(Exception, match="readOnlyRootFilesystm"):
        kv.validate(pod, versions[-1], strict=True)


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("name", resources.preset_names())
def test_names_and_labels_are_what_the_api_server_accepts(name):
    """What the schemas do not check: object and volume names are DNS labels, label values fit."""
    for obj in to_manifests(preset_plan(name)):
        assert _DNS_LABEL.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
        for key, value in obj["metadata"].get("labels", {}).items():
            assert len(value) <= 63 and _LABEL_VALUE.match(value), (key, value)
        for volume in obj.get("spec", {}).get("volumes", []):
            assert _DNS_LABEL.match(volume["name"]) and len(volume["name"]) <= 63


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_pod_meets_the_restricted_pod_security_profile(name):
    pods = by_kind(to_manifests(preset_plan(name)), "Pod")
    assert pods
    for pod in pods:
        assert pod_violations(pod) == [], pod["metadata"]["name"]


def _set(path: str, value):
    def change(pod):
        *head, last = path.split(".")
        at = pod
        for key in head:
            at = at[int(key)] if key.isdigit() else at.setdefault(key, {})
        at[last] = value
    return change


# Each change breaks one control; the checker must name it (a check that cannot fail is a defect).
TAMPERS = {
    "hostNetwork": _set("spec.hostNetwork", True),
    "hostPID": _set("spec.hostPID", True),
    "privileged": _set("spec.containers.0.securityContext.privileged", True),
    "capability": _set("spec.containers.0.securityContext.capabilities.add", ["SYS_ADMIN"]),
    "no-drop": _set("spec.containers.0.securityContext.capabilities.drop", []),
    "escalation": _set("spec.initContainers.0.securityContext.allowPrivilegeEscalation", True),
    "root": _set("spec.containers.0.securityContext.runAsUser", 0),
    "nonroot": _set("spec.containers.0.securityContext.runAsNonRoot", False),
    "unconfined": _set("spec.containers.0.securityContext.seccompProfile", {"type": "Unconfined"}),
    "procMount": _set("spec.containers.0.securityContext.procMount", "Unmasked"),
    "hostPath": lambda pod: pod["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "hostPort": _set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": 80}]),
    "selinux": _set("spec.securityContext.seLinuxOptions", {"type": "spc_t"}),
    "sysctl": _set("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_the_profile_checker_names_each_broken_control(tamper):
    pod = agent_pod(to_manifests(preset_plan("ci")))
    TAMPERS[tamper](pod)
    assert pod_violations(pod), tamper


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_renders_its_golden_manifests(name):
    got = kubernetes_text(preset_plan(name))
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") and (not path.exists() or path.read_text() != got):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
        pytest.fail(f"rewrote {path.name}: review the diff, then run again without UPDATE_GOLDEN")
    assert got == path.read_text(), "manifests changed: review, then UPDATE_GOLDEN=1 pytest"


def test_the_agent_pod_is_the_plans_container():
    plan = preset_plan("read-only")
    pod = agent_pod(to_manifests(plan))
    spec, agent = pod["spec"], pod["spec"]["containers"][0]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert not (spec["hostNetwork"] or spec["hostPID"] or spec["hostIPC"] or spec["shareProcessNamespace"])
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == plan.timeout_seconds
    assert spec["dnsPolicy"] == "None" and spec["dnsConfig"]["nameservers"] == ["127.0.0.11"]
    assert "runtimeClassName" not in spec
    sc = agent["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["capabilities"] == {"drop": ["ALL"]}
    assert (sc["runAsUser"], sc["runAsGroup"]) == (plan.probe.uid, plan.probe.gid)
    assert agent["command"] == list(plan.container.entrypoint)
    assert agent["args"][agent["args"].index("--") + 1:] == list(plan.agent_command)
    assert agent["resources"]["limits"] == {"memory": str(plan.container.memory_bytes),
                                            "cpu": f"{plan.container.nano_cpus // 1_000_000}m"}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/workspace"] == {"name": "workspace", "mountPath": "/workspace", "readOnly": True}
    assert mounts["/.sandbox/probe"]["readOnly"] and mounts["/home/agent"]["subPath"] == kpod.HOME_DIR
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "sandbox-workspace", "readOnly": True}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(64 * 1024 ** 2)}
    # the init container copies the probe from the probe image; the agent mounts it read-only
    init = spec["initContainers"][0]
    assert init["image"] == "sandbox/probe:test" and pod_violations(pod) == []
    assert {m["name"] for m in init["volumeMounts"]} == {mounts["/.sandbox/probe"]["name"], mounts["/home/agent"]["name"]}
    # the Docker path's labels: the selectable ones as labels, digests and paths as annotations
    docker = dict(plan.container.labels)
    assert pod["metadata"]["labels"][label.POLICY] == "read-only"
    assert pod["metadata"]["annotations"][label.POLICY_DIGEST] == docker[label.POLICY_DIGEST]
    assert pod["metadata"]["annotations"][label.WORKSPACE] == docker[label.WORKSPACE]
    assert set(pod["metadata"]["labels"]) | set(pod["metadata"]["annotations"]) == set(docker) - {label.OWNER_PID}


def test_the_probe_expects_what_each_node_makes():
    kubelet = probe_args(to_manifests(preset_plan("read-only")))
    podman = probe_args(to_manifests(preset_plan("read-only"), KubeOptions(node="podman", claim="c")))
    assert kpod.TERMINATION_LOG in kubelet["mounts"].split(",") and kubelet["writable"].endswith(kpod.TERMINATION_LOG)
    assert "/etc/passwd" in podman["mounts"].split(",") and kpod.TERMINATION_LOG not in podman["writable"]
    assert kubelet["wsroot"] == "/" and podman["wsroot"] == "/var/lib/containers/storage/volumes/c/_data"
    assert kubelet["homesrc"].startswith("/volumes/kubernetes.io~empty-dir/home-") and kubelet["pids"] == "max"
    assert kubelet["net"] == "pod" and kubelet["proxy"] == "-" and kubelet["wsupper"] == "-"
    assert kubelet["forbidden"].split(",") == list(DEFAULT_FORBIDDEN) + [
        f"{host}:{port}" for host in ("gateway", "node") for port in kpod.NODE_PORTS] and "pod.reach" in kubelet["checks"]
    rooted = probe_args(to_manifests(preset_plan("read-only"), KubeOptions(workspace_root="/mnt/pv/ws")))
    assert rooted["wsroot"] == "/mnt/pv/ws"


def test_none_mode_pod_may_send_and_receive_nothing():
    objects = to_manifests(preset_plan("read-only"))
    (policy,) = by_kind(objects, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"][label.KIND] == "kubernetes"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["egress"] == []
    assert not by_kind(objects, "Service")


SECRETS_POLICY = b"""version: 1
name: c
description: c
network: {mode: proxy, allow: [api.example.com, "pkgs.example.org:8443", {host: intranet.example.com, private: true}]}
secrets:
  - {name: model, env: MODEL_API_KEY, upstream: "https://api.example.com", header: "x-api-key: {value}"}
"""


def test_proxy_mode_gives_the_agent_the_proxy_address_and_nothing_else(monkeypatch):
    monkeypatch.setenv("MODEL_API_KEY", "never-in-the-file")
    plan = compile_policy(parse_policy(SECRETS_POLICY, "c.yaml"), fake_facts(), kind="kubernetes")
    text = kubernetes_text(plan, KubeOptions(proxy_ip="10.100.0.9"))
    objects = list(yaml.safe_load_all(text))
    assert "never-in-the-file" not in text and "kubectl create secret generic" in text
    env = {e["name"]: e.get("value") for e in agent_pod(objects)["spec"]["containers"][0]["env"]}
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://10.100.0.9:3128"
    port = plan.proxy.secrets[0].port
    assert env[inject.endpoint_var("model")] == f"http://10.100.0.9:{port}"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,10.100.0.9"
    assert "sandbox-proxy" not in "".join(v for v in env.values() if v)
    assert probe_args(objects)["proxy"] == "10.100.0.9:3128"
    (service,) = by_kind(objects, "Service")
    assert service["spec"]["clusterIP"] == "10.100.0.9"
    assert [p["port"] for p in service["spec"]["ports"]] == [3128, port]
    agent_np, proxy_np = by_kind(objects, "NetworkPolicy")
    assert agent_np["spec"]["ingress"] == []
    (rule,) = agent_np["spec"]["egress"]
    assert rule["to"] == [{"podSelector": {"matchLabels": {label.SANDBOX: plan.container.name, label.KIND: "proxy"}}}]
    assert [p["port"] for p in rule["ports"]] == [3128, port]
    dns, public = proxy_np["spec"]["egress"]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert [p["port"] for p in public["ports"]] == [80, 443, 8443]
    v4, v6 = public["to"]
    assert v4["ipBlock"]["cidr"] == "0.0.0.0/0" and set(v4["ipBlock"]["except"]) == set(PRIVATE_V4)
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"} <= set(PRIVATE_V4)
    assert v6["ipBlock"]["cidr"] == "::/0" and "fc00::/7" in PRIVATE_V6 and "fe80::/10" in PRIVATE_V6
    assert proxy_np["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": agent_np["spec"]["podSelector"]
                                                                       ["matchLabels"]}}]
    # the secret: a Secret volume in the proxy Pod only
    proxy = next(o for o in by_kind(objects, "Pod") if o["metadata"]["labels"][label.KIND] == "proxy")
    (secret,) = [v["secret"] for v in proxy["spec"]["volumes"] if "secret" in v]
    assert secret["secretName"] == f"{plan.container.name}-secrets" and secret["defaultMode"] == 0o440
    assert proxy["spec"]["securityContext"]["fsGroup"] == 13      # the files are root's: readable by the proxy's group
    assert not any("secret" in v for v in agent_pod(objects)["spec"]["volumes"])
    assert pod_violations(proxy) == []
    assert "network.allow private: true" in text


def test_the_runtime_goes_through_one_function(monkeypatch):
    monkeypatch.setattr(kpod, "runtime_class_name", lambda plan: "gvisor")
    assert agent_pod(to_manifests(preset_plan("read-only")))["spec"]["runtimeClassName"] == "gvisor"


def test_what_a_pod_cannot_hold_is_refused():
    home = replace(preset("read-only"), home=replace(preset("read-only").home, mode=__import__(
        "launcher.policy.model", fromlist=["HomeMode"]).HomeMode.VOLUME))
    with pytest.raises(PolicyError, match="home.mode"):
        to_manifests(compile_policy(home, fake_facts(), kind="kubernetes"))
    mounted = parse_policy(b"version: 1\nname: m\ndescription: m\nmounts: [{source: /srv/data, target: /data}]\n", "m.yaml")
    plan = compile_policy(mounted, fake_facts(mounts=(PathFact(given="/srv/data", real="/srv/data", kind="dir"),)),
                          kind="kubernetes")
    with pytest.raises(PolicyError, match="hostPath"):
        to_manifests(plan)
    with pytest.raises(PolicyError, match="--node"):
        to_manifests(preset_plan("read-only"), KubeOptions(node="minikube"))


def test_protected_paths_are_read_only_sub_mounts_of_the_claim():
    plan = preset_plan("ci", protected_kind="dir")
    mounts = agent_pod(to_manifests(plan))["spec"]["containers"][0]["volumeMounts"]
    git = next(m for m in mounts if m["mountPath"] == "/workspace/.git")
    assert git == {"name": "workspace", "mountPath": "/workspace/.git", "subPath": ".git", "readOnly": True}
    missing = agent_pod(to_manifests(preset_plan("ci")))["spec"]
    ro = [m for m in missing["containers"][0]["volumeMounts"] if m["mountPath"] == "/workspace/.git"]
    assert ro and ro[0]["readOnly"] and ro[0]["name"].startswith("protect-")


def test_the_cli_prints_the_objects_and_says_what_is_lost(tmp_path):
    result = subprocess.run(SANDBOX + ["compile", "-p", "read-only", "-w", str(tmp_path), "--format", "kubernetes"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert [o["kind"] for o in yaml.safe_load_all(result.stdout)] == ["NetworkPolicy", "Pod"]
    assert "kubernetes does not enforce limits.pids" in result.stderr
    assert "kubernetes does not enforce network.mode none" in result.stderr
    assert result.stdout.startswith("# sandbox: policy read-only")


def test_what_the_plan_says_stays_literal_for_the_kubelet():
    """The kubelet would expand $(HOME) in args and env values; podman kube play expands nothing."""
    policy = parse_policy(b"version: 1\nname: d\ndescription: d\nenv: {set: {PRICE: '$(HOME) $5'}}\n", "d.yaml")
    plan = compile_policy(policy, fake_facts(), command=("sh", "-c", "echo $(HOME) $$"), kind="kubernetes")
    for node, want in (("kubelet", "$$(HOME)"), ("podman", "$(HOME)")):
        agent = agent_pod(to_manifests(plan, KubeOptions(node=node)))["spec"]["containers"][0]
        assert agent["args"][-1] == f"echo {want} {'$$$$' if node == 'kubelet' else '$$'}"
        assert {e["name"]: e.get("value") for e in agent["env"]}["PRICE"] == f"{want} {'$$5' if node == 'kubelet' else '$5'}"


@pytest.mark.parametrize("name", resources.preset_names())
def test_the_podman_pod_differs_from_the_kubelets_only_in_what_the_probe_expects_and_the_home_step(name):
    """What podman kube play runs (tests/test_kubernetes_podman.py) is the kubelet's Pod but for the
    probe's expectations of the node's own mounts, the $ escaping, and the init container's home step."""
    plan = preset_plan(name)
    kubelet, podman = (to_manifests(plan, KubeOptions(node=node)) for node in NODES)
    assert [o["kind"] for o in kubelet] == [o["kind"] for o in podman]
    for a, b in zip(kubelet, podman):
        if a is agent_pod(kubelet):
            for pod in (a, b):
                agent, init = pod["spec"]["containers"][0], pod["spec"]["initContainers"][0]
                agent["args"] = agent["args"][agent["args"].index("--"):]
                agent["env"] = [e["name"] for e in agent["env"]]
                init["command"] = init["command"][:3]
        assert a == b
    differing = {k for k, v in probe_args(to_manifests(plan)).items()
                 if probe_args(to_manifests(plan, KubeOptions(node="podman")))[k] != v}
    # na: the kubelet's claim has no known node path (wsroot /), so its mounts.workspace is n/a; podman's has one
    assert differing <= {"mounts", "writable", "wsroot", "homesrc", "na"}


def test_a_long_sandbox_name_is_cut_to_what_a_label_and_a_service_take():
    policy = parse_policy(b"version: 1\nname: a-rather-long-policy-name-for-one-team\ndescription: d\n"
                          b"network: {mode: proxy, allow: [api.example.com]}\n", "d.yaml")
    plan = compile_policy(policy, fake_facts(workspace="/home/dev/a-repository-with-a-long-name-too"), kind="kubernetes")
    assert len(plan.container.name) > 63
    objects = to_manifests(plan)
    pod = agent_pod(objects)
    name = pod["metadata"]["name"]
    assert len(name) <= 57 and name.startswith("sandbox-a-rather") and pod["metadata"]["labels"][label.SANDBOX] == name
    (service,) = by_kind(objects, "Service")
    assert service["metadata"]["name"] == f"{name}-proxy" and len(service["metadata"]["name"]) <= 63
    assert to_manifests(plan) == objects      # the same cut every time
