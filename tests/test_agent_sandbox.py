"""`sandbox compile --format agent-sandbox`: every preset's SandboxTemplate and SandboxWarmPool
validate against the v1beta1 schema of the agent-sandbox CRDs (strict), the embedded Pod against
Kubernetes' own Pod schema and the restricted Pod Security profile; the template carries the
Kubernetes target's Pod spec, NetworkPolicy and proxy unchanged and leaves the controller no
default to choose; the golden files; the CLI and its bad input."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import pytest
import yaml

import agent_sandbox_crds as crds
from conftest import fake_facts
from kube_pss import pod_violations
from launcher import resources
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import parse_policy
from launcher.targets.kubernetes import KubeOptions, to_manifests as kube_manifests
from launcher.targets.kubernetes.agentsandbox import agent_sandbox_text, losses, to_manifests
from test_kubernetes import SANDBOX, agent_pod, by_kind, kube_validate, preset_plan

GOLDEN = Path(__file__).parent / "golden" / "agent-sandbox"
RESERVED = ("agents.x-k8s.io/", "extensions.agents.x-k8s.io/")   # the controller drops such keys of ours


def template_of(objects: list[dict]) -> dict:
    (template,) = by_kind(objects, "SandboxTemplate")
    return template


def embedded_pod(template: dict) -> dict:
    """The Pod the controller makes from the template, as far as the template decides it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": template["metadata"]["name"],
                                                             **copy.deepcopy(template["spec"]["podTemplate"]["metadata"])},
            "spec": copy.deepcopy(template["spec"]["podTemplate"]["spec"])}


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_validates_against_the_crds_and_its_pod_against_kubernetes(name):
    kv, versions = kube_validate()
    objects = to_manifests(preset_plan(name), warm=3)
    template, (pool,) = template_of(objects), by_kind(objects, "SandboxWarmPool")
    assert crds.errors(template) == [] and crds.errors(pool) == []
    pod = embedded_pod(template)
    assert pod_violations(pod) == []
    for version in versions:
        for obj in [pod] + [o for o in objects if o["apiVersion"] != template["apiVersion"]]:
            try:
                kv.validate(obj, version, strict=True)
            except Exception as exc:   # the schema's message is pages long: its first line says it
                pytest.fail(f"{name} {obj['kind']} {obj['metadata']['name']} on {version}: {str(exc).splitlines()[0]}")


# Each breaks the CRD's schema once; the strict validator must say so (a check that cannot fail is a defect).
def _misspelled(o):
    o["spec"]["networkPolicyManagment"] = "Managed"


def _deep_unknown(o):
    o["spec"]["podTemplate"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystm"] = True


def _bad_enum(o):
    o["spec"]["networkPolicyManagement"] = "Off"


def _bad_peer(o):
    o["spec"]["networkPolicy"]["egress"] = [{"to": [{"ipBlock": {"except": ["10.0.0.0/8"]}}]}]


def _no_pod(o):
    del o["spec"]["podTemplate"]


def _negative(o):
    o["spec"]["replicas"] = -1


def _no_ref(o):
    del o["spec"]["sandboxTemplateRef"]


def _policy_types(o):   # the controller owns podSelector and policyTypes: the CRD has no room for them
    o["spec"]["networkPolicy"]["policyTypes"] = ["Ingress"]


TAMPERS = {"misspelled": _misspelled, "deep-unknown": _deep_unknown, "enum": _bad_enum, "peer": _bad_peer,
           "no-pod": _no_pod, "policy-types": _policy_types, "negative": _negative, "no-ref": _no_ref}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_the_schema_check_refuses_each_broken_field(tamper):
    objects = to_manifests(preset_plan("ci"), warm=1)
    obj = next(o for o in objects if o["kind"] == ("SandboxWarmPool" if tamper in ("negative", "no-ref")
                                                   else "SandboxTemplate"))
    assert crds.errors(obj) == []
    TAMPERS[tamper](obj)
    assert crds.errors(obj), tamper


@pytest.mark.parametrize("name", resources.preset_names())
def test_the_template_is_the_kubernetes_pod_with_its_policy_and_proxy(name):
    plan = preset_plan(name)
    kube, ours = kube_manifests(plan), to_manifests(plan)
    pod, template = agent_pod(kube), template_of(ours)
    assert template["spec"]["podTemplate"]["spec"] == pod["spec"]
    assert template["spec"]["podTemplate"]["metadata"] == {k: pod["metadata"][k] for k in ("labels", "annotations")}
    assert [o for o in ours if o is not template] == [o for o in kube if o is not pod]   # the policies, the proxy
    (isolate,) = [o for o in by_kind(kube, "NetworkPolicy") if o["metadata"]["name"] == f"{pod['metadata']['name']}-isolate"]
    assert template["spec"]["networkPolicy"] == {"ingress": isolate["spec"]["ingress"],
                                                 "egress": isolate["spec"]["egress"]}
    assert isolate["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert not [k for k in pod["metadata"]["labels"] | pod["metadata"]["annotations"] if k.startswith(RESERVED)]


def test_the_controller_is_left_no_default_to_choose():
    """What the CRD defaults, the template says; and the networkPolicy is there even when empty:
    the controller applies its own allow-public default exactly when the field is absent."""
    spec = template_of(to_manifests(preset_plan("read-only")))["spec"]
    defaulted = crds.defaults("SandboxTemplate")
    assert set(defaulted) >= {"networkPolicyManagement", "envVarsInjectionPolicy", "volumeClaimTemplatesPolicy"}
    assert set(defaulted) <= set(spec)
    assert spec["networkPolicyManagement"] == "Managed" and spec["networkPolicy"] == {"ingress": [], "egress": []}
    assert spec["envVarsInjectionPolicy"] == spec["volumeClaimTemplatesPolicy"] == "Disallowed"
    assert spec["service"] is False
    (pool,) = by_kind(to_manifests(preset_plan("read-only"), warm=0), "SandboxWarmPool")
    assert set(crds.defaults("SandboxWarmPool")) <= set(pool["spec"])
    assert pool["spec"]["updateStrategy"] == {"type": "Recreate"} and pool["spec"]["replicas"] == 0


# The controller's policy for a template's Pods, as sandboxtemplate_controller.go (2fd412d) builds it:
# the template's rules when networkPolicy is there, else its "secure default"; the Pods by a hash label.
PUBLIC = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                               "169.254.0.0/16"]}},
                  {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}}]}]


def controller_policy(template: dict) -> dict | None:
    spec = template["spec"]
    if spec.get("networkPolicyManagement", "Managed") == "Unmanaged":
        return None
    rules = spec.get("networkPolicy")
    if rules is None:
        rules = {"ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                                              "agent-sandbox-system"}},
                                        "podSelector": {"matchLabels": {"app": "sandbox-router"}}}]}],
                 "egress": PUBLIC}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{template['metadata']['name']}-network-policy"},
            "spec": {"podSelector": {"matchLabels": {"agents.x-k8s.io/sandbox-template-ref-hash": "0"}},
                     "policyTypes": ["Ingress", "Egress"], "ingress": rules.get("ingress") or [],
                     "egress": rules.get("egress") or []}}


@pytest.mark.parametrize("name", resources.preset_names())
def test_the_controllers_policy_allows_what_ours_allows_and_its_default_would_not(name):
    kv, versions = kube_validate()
    objects = to_manifests(preset_plan(name))
    template = template_of(objects)
    made = controller_policy(template)
    kv.validate(made, versions[-1], strict=True)
    (ours,) = [o for o in by_kind(objects, "NetworkPolicy") if o["metadata"]["name"] == f"{template['metadata']['name']}-isolate"]
    assert (made["spec"]["ingress"], made["spec"]["egress"]) == (ours["spec"]["ingress"], ours["spec"]["egress"])
    del template["spec"]["networkPolicy"]   # what leaving the choice to the controller would give
    assert controller_policy(template)["spec"]["egress"] == PUBLIC != ours["spec"]["egress"]


def test_the_warm_pool_names_the_template_and_comes_last():
    objects = to_manifests(preset_plan("ci"), warm=2)
    assert [o["kind"] for o in objects][-2:] == ["SandboxTemplate", "SandboxWarmPool"]
    assert objects[-1]["spec"]["sandboxTemplateRef"] == {"name": objects[-2]["metadata"]["name"]}
    assert objects[-1]["spec"]["replicas"] == 2
    assert not by_kind(to_manifests(preset_plan("ci")), "SandboxWarmPool")
    assert [o["kind"] for o in objects[:2]] == ["NetworkPolicy", "NetworkPolicy"]   # before any Pod exists


def test_the_docs_claim_validates_and_names_a_pool_as_the_file_names_it():
    text = (Path(__file__).parent.parent / "docs" / "targets.md").read_text()
    (block,) = [b for b in text.split("```yaml\n")[1:] if "kind: SandboxClaim" in b]
    claim = yaml.safe_load(block.split("```")[0])
    assert crds.errors(claim) == []
    (pool,) = by_kind(to_manifests(preset_plan("ci"), warm=1), "SandboxWarmPool")
    assert claim["spec"]["warmPoolRef"].keys() == pool["spec"]["sandboxTemplateRef"].keys() == {"name"}
    assert pool["metadata"]["name"] == pool["spec"]["sandboxTemplateRef"]["name"]   # "named as the template"


def test_a_long_name_leaves_room_for_the_pools_sandbox_names():
    """A pool's Sandboxes (and their Pods) are named `POOL-` and five random characters: still a DNS label."""
    policy = parse_policy(b"version: 1\nname: a-rather-long-policy-name-for-one-team\ndescription: d\n", "d.yaml")
    plan = compile_policy(policy, fake_facts(workspace="/home/dev/a-repository-with-a-long-name-too"), kind="kubernetes")
    (pool,) = by_kind(to_manifests(plan, warm=1), "SandboxWarmPool")
    assert len(pool["metadata"]["name"]) + len("-x7k2p") <= 63


def test_the_loss_report_names_what_the_controller_decides():
    plan = preset_plan("ci")
    said = dict(losses(plan, warm=1))
    assert "8.8.8.8" in said["the controller's NetworkPolicy"] and "Managed" in said["the controller's NetworkPolicy"]
    assert "tries only at the public resolvers" in said["the controller's NetworkPolicy"]
    assert {"the Pod the controller makes", "claims", "the workspace", "the proxy", "--warm", "limits.pids"} <= set(said)
    assert "--warm" not in dict(losses(plan)) and "the proxy" not in dict(losses(preset_plan("read-only")))
    text = agent_sandbox_text(plan, KubeOptions())
    assert "compile with --warm N" in text and "  - the controller's NetworkPolicy:" in text


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_renders_its_golden_objects(name):
    got = agent_sandbox_text(preset_plan(name), KubeOptions(), warm=1)
    assert "&id" not in got   # each object its own copies: no YAML anchors for a reader to follow
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") and (not path.exists() or path.read_text() != got):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
        pytest.fail(f"rewrote {path.name}: review the diff, then run again without UPDATE_GOLDEN")
    assert got == path.read_text(), "objects changed: review, then UPDATE_GOLDEN=1 pytest"


def _sandbox(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, cwd=cwd)


def test_the_cli_prints_the_template_and_pool_and_says_what_is_lost(tmp_path):
    result = _sandbox("compile", "-p", "read-only", "-w", str(tmp_path), "--format", "agent-sandbox", "--warm", "2",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    kinds = [o["kind"] for o in yaml.safe_load_all(result.stdout)]
    assert kinds == ["NetworkPolicy", "SandboxTemplate", "SandboxWarmPool"]
    assert "agent-sandbox does not enforce the controller's NetworkPolicy" in result.stderr
    assert result.stdout.startswith("# sandbox: policy read-only") and "compile with --warm" not in result.stdout


@pytest.mark.parametrize("args, says", [
    (("--warm", "2"), "--warm is for --format agent-sandbox, not json"),
    (("--format", "kubernetes", "--warm", "1"), "--warm is for --format agent-sandbox, not kubernetes"),
    (("--format", "agent-sandbox", "--warm", "-1"), "-1 is not in the range 0<=x<=2147483647"),
    (("--format", "agent-sandbox", "--warm", "two"), "'two' is not a valid integer"),
    (("--format", "agent-sandbox", "--warm", "4294967296"), "4294967296 is not in the range"),
])
def test_bad_warm_input_is_a_usage_error(tmp_path, args, says):
    result = _sandbox("compile", "-p", "read-only", "-w", str(tmp_path), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr and result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_explain_and_check_know_the_target(tmp_path):
    explained = _sandbox("explain", "-p", "ci", "--target", "agent-sandbox", cwd=tmp_path)
    assert explained.returncode == 0, explained.stderr
    said = " ".join(explained.stdout.split())   # wrapped to the terminal's width
    assert "not enforced for agent-sandbox (`run` enforces it): limits.timeout: " in said
    assert "a warm pool's Pod starts its agent" in said
    checked = _sandbox("check", "ci", "--target", "agent-sandbox", "--strict", cwd=tmp_path)
    assert checked.returncode == 120 and "agent-sandbox" in checked.stdout + checked.stderr
