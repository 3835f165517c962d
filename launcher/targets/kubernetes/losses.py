"""What a Pod in this form cannot enforce that `sandbox run` does: the loss report, written at the
top of the manifests and said on stderr by `sandbox compile`."""

from __future__ import annotations

from launcher.plan.plan import LaunchPlan
from launcher.targets.kubernetes.hostfirewall import WHAT_IT_ADDS
from launcher.targets.kubernetes.network import private_rules
from launcher.targets.kubernetes.pod import NODE_PORTS
from launcher.targets.protections import KUBERNETES, cannot

RESTRICTED_ADDS = ("NET_BIND_SERVICE",)   # the only capability the restricted profile lets a Pod add


def node_losses(host_firewall: str) -> list[tuple[str, str]]:
    """The node exception: what NetworkPolicy may leave open, what the probe still proves, and what
    `--host-firewall` adds (untested here)."""
    ports = ", ".join(str(p) for p in NODE_PORTS)
    probe = (f"the probe's pod.reach tries the node (status.hostIP) and the gateway on ports {ports} and refuses a "
             "Pod that one answers, which proves those, at the start, and nothing of the node's other ports "
             "(NodePorts), of the other nodes or of what changes later")
    if not host_firewall:
        return [("the node", "NetworkPolicy may leave traffic between a Pod and its own node open (Kubernetes lets "
                             f"a plugin always allow it): {probe}; `--host-firewall cilium|calico` adds the plugin's "
                             "objects that deny the agent every node")]
    return [("the node", f"NetworkPolicy may leave traffic between a Pod and its own node open: {probe}; "
                         f"--host-firewall {host_firewall} adds {WHAT_IT_ADDS[host_firewall]}"),
            (f"host firewall ({host_firewall})", "its objects are untested: no schema of the plugin's CRDs can be "
                                                 "had from a package registry here and no cluster runs here, so "
                                                 "only their fields are checked (tests/test_kubernetes_hostfw.py); "
                                                 "without the plugin `kubectl apply` fails on the unknown kind, "
                                                 "with the feature off (Cilium's host firewall, Calico's automatic "
                                                 "host endpoints) they are accepted and do nothing")]


def losses(plan: LaunchPlan, *, node: str, host_firewall: str = "") -> list[tuple[str, str]]:
    """(policy field or protection, why) for everything this Pod does not enforce as Docker does."""
    return cannot(KUBERNETES) + pod_losses(plan, node=node, host_firewall=host_firewall)


def pod_losses(plan: LaunchPlan, *, node: str, host_firewall: str = "") -> list[tuple[str, str]]:
    """What the agent Pod itself, wherever it comes from, does not enforce as Docker does."""
    out = [
        ("limits.pids", "the Pod API has no per-Pod process limit: only the kubelet's podPidsLimit (node-wide "
                        "setting) bounds it; the probe expects the container's own pids.max, max"),
        ("tmpfs mode and owner", "an emptyDir is created 0777 by the kubelet (only the agent's uid runs in the Pod)"),
        ("home.mode tmpfs", "the home is a disk emptyDir (gone with the Pod), not memory: the probe proves it by its "
                            "node path, which a memory volume does not have"),
        ("logging", "the node's container log rotation (containerLogMaxSize), not the plan's json-file options"),
    ]
    out += node_losses(host_firewall)
    out.append(("IPv6 and ICMP", "a Pod with an IPv6 address beyond link-local is refused by net.routes (on a "
                                 "dual-stack cluster the agent does not start); NetworkPolicy covers TCP, UDP and SCTP "
                                 "only, and the probe tries TCP and DNS over UDP, not ICMP; the link-local IPv6 it accepts "
                                 "could reach the node's side of the link, whose address the probe does not know and "
                                 "does not try"))
    out.append(("the Pod's network (proven by answers)", "pod.reach and pod.dns try the addresses the probe is given "
                "(--forbidden: metadata services, the conventional API server and cluster DNS Services, public "
                "resolvers) and those it finds (gateway, node, KUBERNETES_SERVICE_HOST, the nameservers): refused or "
                "no route passes, silence only while the control answers in the same window"
                + (" (the proxy)" if plan.probe.net == "proxy" else " (the gateway at the link layer)")
                + "; addresses and ports not tried stay the NetworkPolicy's word, not the probe's"))
    out.append(("egress enforcement", "NetworkPolicy needs a network plugin that enforces it (Calico, Cilium, ...); "
                                      "without one the API server's Service and the node answer the probe's "
                                      "pod.reach, which refuses the Pod"))
    if plan.probe.net == "none":
        out.append(("network.mode none", "a Pod always has the network plugin's interface: the probe's Pod mode "
                                         "(net=pod) accepts it and refuses the Pod if anything above answers; the "
                                         "NetworkPolicy denies all its traffic"))
    else:
        out.append(("network.allow", "NetworkPolicy is L3/L4: the host allow-list stays Squid's job; the proxy Pod "
                                     "may reach every public address on the allowed ports"))
        if plan.proxy is not None and private_rules(plan.proxy):
            out.append(("network.allow private: true", "the proxy's NetworkPolicy never reaches private ranges: such "
                                                       "a host is unreachable from the Pod"))
    if plan.copy is not None:
        out.append(("workspace.mode copy", "the claim is the copy: no `sandbox diff` or `sandbox apply`, and no "
                                           "read-only control paths inside it (apply never carried them back)"))
    extra = [c for c in plan.container.cap_add if c not in RESTRICTED_ADDS]
    if extra:
        out.append(("capabilities", f"{', '.join(extra)} break the restricted profile (it allows adding only "
                                    "NET_BIND_SERVICE): the namespace needs the baseline level"))
    if node == "podman":
        out.append(("NetworkPolicy (podman)", "podman kube play ignores NetworkPolicy objects"
                                              + (" and the host firewall's" if host_firewall else "")))
    return out


def header(plan: LaunchPlan, *, node: str, claim: str, secrets: tuple[str, ...], secret_name: str,
           form: str = "Kubernetes objects", notes: tuple[str, ...] = (),
           lost: list[tuple[str, str]] | None = None) -> str:
    """The file's head: how to apply it, what to create first, and the loss report (`lost`, by default this Pod's)."""
    lines = [f"sandbox: policy {plan.policy_name} (sha256 {plan.policy_digest[:12]}) as {form} for "
             f"{node}; `kubectl apply -f` this file.",
             "The probe (the agent container's entrypoint) refuses to start the agent unless every check passes.",
             f"The workspace is the PersistentVolumeClaim {claim!r}: create and fill it first.",
             "Apply into a namespace labelled pod-security.kubernetes.io/enforce=restricted."]
    if secrets:
        keys = " ".join(f"--from-file={s}=FILE" for s in secrets)
        lines.append(f"Injected secrets: `kubectl create secret generic {secret_name} {keys}` first (no value is in "
                     "this file); only the proxy Pod mounts it.")
    lines += notes
    lines.append("Not enforced in this form (`sandbox run` enforces it):")
    lines += [f"  - {name}: {why}" for name, why in (losses(plan, node=node) if lost is None else lost)]
    return "".join(f"# {line}\n" for line in lines)
