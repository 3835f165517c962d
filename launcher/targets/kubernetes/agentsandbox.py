"""`sandbox compile --format agent-sandbox`: the agent Pod of `--format kubernetes` as a
kubernetes-sigs/agent-sandbox SandboxTemplate (extensions.agents.x-k8s.io/v1beta1) and, with
`--warm N`, a SandboxWarmPool of it. The NetworkPolicies, the proxy and the Pod spec are the
Kubernetes target's, unchanged; the template names the agent's NetworkPolicy rules itself, so the
controller's own default policy never applies."""

from __future__ import annotations

from launcher.errors import PolicyError, Problem
from launcher.plan.plan import LaunchPlan
from launcher.targets import kubernetes
from launcher.targets.kubernetes import network
from launcher.targets.kubernetes.losses import header, pod_losses
from launcher.targets.protections import AGENT_SANDBOX, cannot

API_VERSION = "extensions.agents.x-k8s.io/v1beta1"
MAX_WARM = 2 ** 31 - 1   # replicas is an int32


def to_manifests(plan: LaunchPlan, options: kubernetes.KubeOptions = kubernetes.KubeOptions(),
                 warm: int | None = None) -> list[dict]:
    """The objects, in apply order: the NetworkPolicies (ours, before any Pod exists), the proxy,
    the SandboxTemplate in place of the agent Pod, then the warm pool that starts its Pods. A
    cluster's node is a kubelet; node podman is for the tests, which play the Pod the controller
    would make from the template with podman."""
    if warm is not None and not 0 <= warm <= MAX_WARM:
        raise PolicyError([Problem(file="command line", path="--warm", expected=f"a number of Pods, 0 to {MAX_WARM}",
                                   found=str(warm))])
    objects = kubernetes.to_manifests(plan, options)
    pod = objects.pop()   # the agent Pod comes last there
    assert pod["kind"] == "Pod" and pod["spec"]["containers"][0]["name"] == "agent"
    meta = pod["metadata"]
    isolate = next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == f"{meta['name']}-isolate")
    template = {
        "apiVersion": API_VERSION, "kind": "SandboxTemplate",
        "metadata": {"name": meta["name"], "labels": dict(meta["labels"])},   # copies: no YAML anchors
        "spec": {
            "podTemplate": {"metadata": {"labels": dict(meta["labels"]), "annotations": meta["annotations"]},
                            "spec": pod["spec"]},
            # Chosen, never defaulted: Managed with no networkPolicy is the controller's own default
            # (egress to every public address and port, DNS rewritten to public resolvers).
            "networkPolicyManagement": "Managed",
            "networkPolicy": {"ingress": isolate["spec"]["ingress"], "egress": isolate["spec"]["egress"]},
            "envVarsInjectionPolicy": "Disallowed",       # a claim adds no environment to the plan's
            "volumeClaimTemplatesPolicy": "Disallowed",   # nor volumes
            "service": False,                            # no headless Service: the Pod takes no ingress
        },
    }
    objects.append(template)
    if warm is not None:
        objects.append({
            "apiVersion": API_VERSION, "kind": "SandboxWarmPool",
            "metadata": {"name": meta["name"], "labels": dict(meta["labels"])},
            # Recreate: an unclaimed Pod of an older template is replaced, never handed to a claim.
            "spec": {"replicas": warm, "sandboxTemplateRef": {"name": meta["name"]},
                     "updateStrategy": {"type": "Recreate"}}})
    return objects


def losses(plan: LaunchPlan, *, warm: int | None = None, node: str = "kubelet",
           host_firewall: str = "") -> list[tuple[str, str]]:
    """The Kubernetes Pod's losses, and what the agent-sandbox controller changes or decides."""
    out = cannot(AGENT_SANDBOX) + pod_losses(plan, node=node, host_firewall=host_firewall)
    out.append(("the controller's NetworkPolicy", "the template sets networkPolicyManagement: Managed with the "
                "agent's own rules, so the controller's default (ingress from its sandbox-router; egress to every "
                "public address on every port, DNS rewritten to 8.8.8.8 and 1.1.1.1) never applies; the same rules "
                "are also this file's own NetworkPolicy, selecting the Pods by the sandbox's labels, so isolation "
                "does not rest on the controller labelling its Pods (before agent-sandbox#1067 it did not, and its "
                "policy isolated nothing). Still the controller's: that it honours networkPolicy (one that ignored "
                "it would apply its default, and NetworkPolicies add up: direct egress to public addresses, which "
                "the probe's pod.reach tries only at the public resolvers of its forbidden list, refusing the Pod "
                "if one answers) and creates no other policy for these Pods"))
    out.append(("the Pod the controller makes", "it names the Pod after its Sandbox, copies the template's labels "
                "and annotations and adds its own (agents.x-k8s.io/...), keeps automountServiceAccountToken false; "
                "nothing compares its Pod with the template"))
    out.append(("claims", "a SandboxClaim cannot add environment or volumes (Disallowed, set explicitly) nor change "
                "the template's labels, but it can add labels of the controller's allowed domains (by default "
                "sandbox.users.io) to its Pod: a NetworkPolicy of the namespace that selects such a label adds its "
                "allows to the Pod"))
    out.append(("the workspace", "every Pod of the template mounts the same PersistentVolumeClaim: sandboxes share "
                "one workspace, and several Pods on several nodes need a ReadWriteMany claim"))
    out.append(("the sandbox router", "the Pod takes no ingress and has no Service: the controller's router cannot "
                "reach it; use kubectl logs or exec"))
    if plan.proxy is not None:
        out.append(("the proxy", "one proxy Pod (and its Secret) serves every sandbox of the template"))
    if warm is not None:
        out.append(("--warm", "each warm Pod starts the agent's command when the pool creates it, before any claim: "
                    "give it a command that waits; a claimed sandbox keeps the Pod spec it started with when the "
                    "template changes (unclaimed ones are recreated), while the shared NetworkPolicy changes at once"))
    return out


def agent_sandbox_text(plan: LaunchPlan, options: kubernetes.KubeOptions = kubernetes.KubeOptions(),
                       warm: int | None = None) -> str:
    import yaml

    objects = to_manifests(plan, options, warm)
    plan = kubernetes.kube_named(plan)
    secrets = tuple(s.name for s in plan.proxy.secrets) if plan.proxy else ()
    notes = ("Needs the agent-sandbox controller with its extensions (v1beta1 CRDs) in the cluster.",)
    if warm is None:
        notes += ("A SandboxClaim names a SandboxWarmPool, not a template: compile with --warm N (0: every claim "
                  "starts a Pod) or write a pool whose sandboxTemplateRef is this template.",)
    head = header(plan, node=options.node, claim=options.claim, secrets=secrets, secret_name=network.secret_name(plan),
                  form="an agent-sandbox SandboxTemplate", notes=notes, lost=losses(plan, warm=warm, node=options.node,
                                                                           host_firewall=options.host_firewall))
    return head + yaml.safe_dump_all(objects, sort_keys=False, width=1000, explicit_start=True)
