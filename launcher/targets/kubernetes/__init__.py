"""`sandbox compile --format kubernetes`: the LaunchPlan as objects a cluster admin applies with
`kubectl apply -f` (NetworkPolicies, the proxy's ConfigMap, Pod and Service, the agent Pod)."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass, replace

from launcher import labels as label
from launcher.errors import PolicyError, Problem
from launcher.plan.plan import PROXY_ALIAS
from launcher.plan.plan import PROBE_DIR, LaunchPlan
from launcher.targets.kubernetes import hostfirewall, network, pod
from launcher.targets.kubernetes.losses import header, losses

NODES = ("kubelet", "podman")
DEFAULT_CLAIM = "sandbox-workspace"
# A fixed ClusterIP for the proxy's Service, so that the agent is given an address and needs no
# DNS. In kubeadm's default service range (10.96.0.0/12); `--proxy-ip` picks another.
DEFAULT_PROXY_IP = "10.96.0.200"
# What the probe's pod.reach tries beside what it finds in the Pod (the gateway, the node, the API
# server's Service, the nameservers): the cloud metadata services (AWS, GCP, Azure, OpenStack at
# 169.254.169.254, AWS's IPv6 one, Alibaba's, ECS task metadata), NodeLocal DNSCache's address,
# the API server's and the cluster DNS's conventional Service addresses (kubeadm, k3s, EKS, AKS and
# GKE defaults), and public resolvers and web addresses. `--forbidden` replaces the list.
DEFAULT_FORBIDDEN = (
    "169.254.169.254:80", "[fd00:ec2::254]:80", "100.100.100.200:80", "169.254.170.2:80", "169.254.20.10:53",
    "10.96.0.1:443", "10.43.0.1:443", "10.100.0.1:443", "172.20.0.1:443", "10.0.0.1:443",
    "10.96.0.10:53", "10.43.0.10:53", "10.100.0.10:53", "172.20.0.10:53", "10.0.0.10:53",
    "1.1.1.1:443", "8.8.8.8:53", "[2606:4700:4700::1111]:443",
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class KubeOptions:
    claim: str = DEFAULT_CLAIM        # the PersistentVolumeClaim that holds the workspace
    workspace_root: str = ""          # the claim's mountinfo root on the node ("": / for the kubelet)
    proxy_ip: str = DEFAULT_PROXY_IP  # the proxy Service's ClusterIP
    node: str = "kubelet"             # kubelet | podman: whose own mounts the probe expects
    forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN   # ADDRESS:PORT the Pod's probe must find unreachable
    host_firewall: str = ""           # "", cilium, calico: that plugin's objects that keep the agent off the nodes


def _split_labels(pairs: tuple[tuple[str, str], ...]) -> tuple[dict, dict]:
    """The Docker path's labels: those whose value is a valid label value stay labels (selectable),
    the others (digests, paths, JSON) become annotations under the same key. The launcher's pid
    means nothing in a cluster and is left out."""
    labels, annotations = {}, {}
    for key, value in pairs:
        if key == label.OWNER_PID:
            continue
        if len(value) <= 63 and _LABEL_VALUE.match(value):
            labels[key] = value
        else:
            annotations[key] = value
    return labels, annotations


def _address_env(env: tuple[tuple[str, str], ...], address: str) -> dict[str, str]:
    """The proxy's name in the sandbox's environment becomes its Service address."""
    out = {}
    for key, value in env:
        if value.startswith(f"http://{PROXY_ALIAS}:"):
            value = value.replace(PROXY_ALIAS, address, 1)
        elif key in ("NO_PROXY", "no_proxy"):
            value = ",".join(address if item == PROXY_ALIAS else item for item in value.split(","))
        out[key] = value
    return out


MAX_NAME = 57   # a DNS label (63) with room for "-proxy": the proxy's Service is named after it


def kube_named(plan: LaunchPlan) -> LaunchPlan:
    """The plan with a sandbox name Kubernetes takes as a label value and, with "-proxy", as a
    Service name: a longer one is cut and keeps a hash of the whole."""
    name = plan.container.name
    if len(name) <= MAX_NAME:
        return plan
    short = f"{name[:MAX_NAME - 9].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"

    def relabel(pairs):
        return tuple((k, short if k == label.SANDBOX else v) for k, v in pairs)

    proxy = plan.proxy and replace(plan.proxy, name=f"{short}-proxy", labels=relabel(plan.proxy.labels))
    return replace(plan, container=replace(plan.container, name=short, labels=relabel(plan.container.labels)),
                   proxy=proxy)


def _forbidden_ok(target: str) -> bool:
    """ADDRESS:PORT as the probe reads it: an IPv6 address in brackets, each in its canonical form."""
    host, _, port = target.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        return False
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    return bracketed == (address.version == 6) and str(address) == (host[1:-1] if bracketed else host)


def _ipv4(text: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(text)) == text
    except ValueError:
        return False


def _check(plan: LaunchPlan, options: KubeOptions) -> None:
    problems = []
    names = [plan.container.name] + ([plan.proxy.name] if plan.proxy else [])
    for name in names:
        if not _DNS_LABEL.match(name):
            problems.append(Problem(file="policy", path="name", expected="a name that makes a DNS label (a-z, 0-9, -)",
                                    found=name, hint="name the policy with lower-case letters, digits and -"))
    if not _DNS_LABEL.match(options.claim):
        problems.append(Problem(file="command line", path="--claim", expected="a PersistentVolumeClaim name",
                                found=options.claim))
    if not _ipv4(options.proxy_ip):   # written unquoted into the objects' YAML, URLs and the probe's shell line
        problems.append(Problem(file="command line", path="--proxy-ip", expected="an IPv4 address (the proxy Service's "
                                "ClusterIP, inside the cluster's service range)", found=repr(options.proxy_ip),
                                hint=f"for example {DEFAULT_PROXY_IP}"))
    allowed = {f"{options.proxy_ip}:{port}" for port in network.listen_ports(plan.proxy)} if plan.proxy else set()
    for target in options.forbidden:
        if not _forbidden_ok(target):
            problems.append(Problem(file="command line", path="--forbidden", expected="ADDRESS:PORT (IPv6 in brackets)",
                                    found=target, hint="for example 169.254.169.254:80 or [fd00:ec2::254]:80"))
        elif target in allowed:
            problems.append(Problem(file="command line", path="--forbidden", expected="an address the Pod may not reach",
                                    found=f"{target}, the proxy's own address", hint="leave the proxy out, or move "
                                    "it with --proxy-ip"))
    if options.node not in NODES:
        problems.append(Problem(file="command line", path="--node", expected=" or ".join(NODES), found=options.node))
    if options.host_firewall and options.host_firewall not in hostfirewall.PLUGINS:
        problems.append(Problem(file="command line", path="--host-firewall", expected=" or ".join(hostfirewall.PLUGINS),
                                found=options.host_firewall))
    if problems:
        raise PolicyError(problems)


def to_manifests(plan: LaunchPlan, options: KubeOptions = KubeOptions()) -> list[dict]:
    """The objects, in apply order: the NetworkPolicies before any Pod they protect."""
    plan = kube_named(plan)
    _check(plan, options)
    c = plan.container
    labels, annotations = _split_labels(c.labels)
    address = f"{options.proxy_ip}:{plan.proxy.port}" if plan.proxy else "-"
    probe_volume = next(m.source for m in c.mounts if m.target == PROBE_DIR)
    probe_image = "sandbox/probe:" + probe_volume.removeprefix("sandbox-probe-")
    agent, files = pod.agent_pod(plan, claim=options.claim, node=options.node, workspace_root=options.workspace_root,
                                 proxy_address=address, probe_image=probe_image,
                                 env=_address_env(c.env, options.proxy_ip), labels=labels, annotations=annotations,
                                 forbidden=options.forbidden)
    agent_selector = {label.SANDBOX: labels[label.SANDBOX], label.KIND: labels[label.KIND]}
    objects: list[dict] = []
    proxy_selector = None
    proxy_objects: list[dict] = []
    if plan.proxy:
        plabels, pannotations = _split_labels(plan.proxy.labels)
        proxy_selector = {label.SANDBOX: plabels[label.SANDBOX], label.KIND: plabels[label.KIND]}
        proxy_objects = network.proxy_objects(plan, address=options.proxy_ip, labels=plabels, annotations=pannotations)
    objects += network.network_policies(plan, agent=agent_selector, proxy=proxy_selector, labels=labels)
    if options.host_firewall:
        objects += hostfirewall.host_firewall(options.host_firewall, name=c.name, agent=agent_selector, labels=labels)
    if files:
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{c.name}-files", "labels": labels},
                        "data": {pod.EMPTY_CONFIG: "{}\n"}})
    return objects + proxy_objects + [agent]


def kubernetes_text(plan: LaunchPlan, options: KubeOptions = KubeOptions()) -> str:
    import yaml

    objects = to_manifests(plan, options)
    plan = kube_named(plan)
    secrets = tuple(s.name for s in plan.proxy.secrets) if plan.proxy else ()
    head = header(plan, node=options.node, claim=options.claim, secrets=secrets, secret_name=network.secret_name(plan),
                  lost=losses(plan, node=options.node, host_firewall=options.host_firewall))
    return head + yaml.safe_dump_all(objects, sort_keys=False, width=1000, explicit_start=True)


__all__ = ["DEFAULT_FORBIDDEN", "KubeOptions", "NODES", "kubernetes_text", "losses", "to_manifests"]
