"""Proxy mode as Kubernetes objects: Squid in its own Pod with the same generated configuration,
a Service with a fixed ClusterIP (the agent is given that address, so it needs no DNS at all), the
injected secrets as a Secret only the proxy mounts, and the NetworkPolicies around both Pods."""

from __future__ import annotations

import re

from launcher.plan.plan import LaunchPlan, ProxySpec, proxy_env
from launcher.targets.kubernetes.pod import restricted_context

SECRET_DIR = "/run/sandbox-secrets"
# Where the proxy may never connect, whatever the allow-list says: the cluster's and the
# company's private ranges, CGNAT, loopback, link-local (the metadata address 169.254.169.254).
PRIVATE_V4 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8",
              "0.0.0.0/8")
PRIVATE_V6 = ("fc00::/7", "fe80::/10", "::1/128")
# The cluster resolver, the proxy's one in-cluster destination (Squid resolves allowed names);
# CoreDNS keeps kube-dns's label.
DNS_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}


def allowed_ports(proxy: ProxySpec) -> tuple[int, ...]:
    """The upstream ports the proxy may connect to: those of the generated configuration's allow
    rules and of the injected secrets' upstreams."""
    ports = {int(p) for line in re.findall(r"^acl allow\d+_port port (.+)$", proxy.config, re.M) for p in line.split()}
    ports |= {s.upstream_port for s in proxy.secrets}
    return tuple(sorted(ports))


def private_rules(proxy: ProxySpec) -> bool:
    """Whether an allow rule opts into private addresses (NetworkPolicy refuses them all the same)."""
    return any("!to_private" not in line for line in re.findall(r"^http_access allow allow\d+_host .*$", proxy.config,
                                                                re.M))


def listen_ports(proxy: ProxySpec) -> tuple[int, ...]:
    return (proxy.port,) + tuple(s.port for s in proxy.secrets if not s.bind)   # a bound key has no endpoint


def secret_name(plan: LaunchPlan) -> str:
    return f"{plan.container.name}-secrets"


def proxy_objects(plan: LaunchPlan, *, address: str, labels: dict, annotations: dict) -> list[dict]:
    """ConfigMap (the Squid configuration), proxy Pod and Service."""
    p = plan.proxy
    assert p is not None
    uid, gid = (int(x) for x in p.user.split(":"))
    env = proxy_env(p)
    conf = f"{p.name}-config"
    container_env = [{"name": k, "valueFrom": {"configMapKeyRef": {"name": conf, "key": k}}} for k in env]
    mounts = [{"name": f"scratch-{i}", "mountPath": d} for i, d in enumerate(p.scratch_dirs)]
    volumes = [{"name": f"scratch-{i}", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}
               for i, _ in enumerate(p.scratch_dirs)]
    if p.secrets:
        container_env += [{"name": f"{s.var}_FILE", "value": f"{SECRET_DIR}/{s.name}"} for s in p.secrets]
        mounts.append({"name": "secrets", "mountPath": SECRET_DIR, "readOnly": True})
        # Group-readable by the proxy's gid alone (fsGroup below): the kubelet makes the files root's.
        volumes.append({"name": "secrets", "secret": {"secretName": secret_name(plan), "defaultMode": 0o440,
                                                      "optional": False,   # said: podman 4.3 crashes without it
                                                      "items": [{"key": s.name, "path": s.name} for s in p.secrets]}})
    limits = {"memory": str(p.memory_bytes), "cpu": "1"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": p.name, "labels": labels, "annotations": annotations},
           "spec": {
               "restartPolicy": "Always", "automountServiceAccountToken": False, "enableServiceLinks": False,
               "hostNetwork": False, "hostPID": False, "hostIPC": False,
               # Squid binds to the configuration's own name for the proxy: any address of this Pod.
               "hostAliases": [{"ip": "0.0.0.0", "hostnames": [p.alias]}],
               "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
                                   **({"fsGroup": gid} if p.secrets else {}),
                                   "seccompProfile": {"type": "RuntimeDefault"}},
               "containers": [{
                   "name": "proxy", "image": p.image, "env": container_env,
                   "securityContext": restricted_context(uid, gid),
                   "resources": {"limits": limits, "requests": dict(limits)}, "volumeMounts": mounts,
                   "readinessProbe": {"tcpSocket": {"port": p.port}, "periodSeconds": 1},
                   "imagePullPolicy": "IfNotPresent"}],
               "volumes": volumes}}
    selector = {k: labels[k] for k in sorted(labels) if k.endswith((".sandbox", ".kind"))}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": p.name, "labels": labels},
               "spec": {"type": "ClusterIP", "clusterIP": address, "selector": selector,
                        "ports": [{"name": f"p{port}", "port": port, "targetPort": port, "protocol": "TCP"}
                                  for port in listen_ports(p)]}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": conf, "labels": labels}, "data": env}
    return [config, pod, service]


def _policy(name: str, labels: dict, selector: dict, ingress: list, egress: list) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name, "labels": labels},
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": ingress, "egress": egress}}


def network_policies(plan: LaunchPlan, *, agent: dict, proxy: dict | None, labels: dict) -> list[dict]:
    """The agent: no ingress, egress only to the proxy Pod on its ports (none without a proxy).
    The proxy: ingress only from the agent, egress only to public addresses on the allowed ports,
    and DNS to the cluster resolver."""
    name = plan.container.name
    if proxy is None:
        return [_policy(f"{name}-isolate", labels, agent, [], [])]
    p = plan.proxy
    assert p is not None
    tcp = [{"protocol": "TCP", "port": port} for port in listen_ports(p)]
    up = [{"protocol": "TCP", "port": port} for port in allowed_ports(p)]
    public = [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_V4)}},
              {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_V6)}}]
    proxy_egress = [{"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
    if up:
        proxy_egress.append({"to": public, "ports": up})
    return [
        _policy(f"{name}-isolate", labels, agent, [], [{"to": [{"podSelector": {"matchLabels": proxy}}], "ports": tcp}]),
        _policy(f"{p.name}-isolate", labels, proxy, [{"from": [{"podSelector": {"matchLabels": agent}}], "ports": tcp}],
                proxy_egress),
    ]
