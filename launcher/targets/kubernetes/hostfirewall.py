"""`compile --format kubernetes --host-firewall cilium|calico`: the network plugin's own cluster-wide
objects that keep the agent Pod away from the nodes, where NetworkPolicy may not (Kubernetes lets a
plugin always allow traffic between a Pod and its own node). Each only denies: the nodes' other
traffic, and every other Pod's, is left as it was (docs/targets.md says how, and what is untested)."""

from __future__ import annotations

PLUGINS = ("cilium", "calico")
# Each sandbox's Calico tier (named after it: `kubectl delete -f` removes its own and no other) comes
# before the AdminNetworkPolicy tier (1000) and the default tier (1000000); what its policies do not
# deny passes on to those unchanged.
CALICO_TIER_ORDER = 100
# The label calico-kube-controllers puts on the host endpoints it creates for every node.
CALICO_AUTO_HOST_ENDPOINTS = "projectcalico.org/created-by == 'calico-kube-controllers'"


def _cilium(name: str, agent: dict, labels: dict) -> list[dict]:
    """A host policy on every node: ingress from the agent's identity denied. enableDefaultDeny
    false keeps the policy from turning the nodes default-deny (it adds a deny, allows nothing)."""
    return [{"apiVersion": "cilium.io/v2", "kind": "CiliumClusterwideNetworkPolicy",
             "metadata": {"name": f"{name}-host-firewall", "labels": labels},
             "spec": {"description": f"sandbox {name}: the agent Pod may not reach any node",
                      "nodeSelector": {},
                      "enableDefaultDeny": {"ingress": False, "egress": False},
                      "ingressDeny": [{"fromEndpoints": [{"matchLabels": dict(agent)}]}]}}]


def calico_selector(agent: dict) -> str:
    """The agent's labels as a Calico selector expression."""
    return " && ".join(f"{key} == '{value}'" for key, value in sorted(agent.items()))


def _calico(name: str, agent: dict, labels: dict) -> list[dict]:
    """The sandbox's tier, then two policies in it: the host endpoints deny ingress from the agent
    (what reaches a node's own interfaces, from any node's Pods), and the agent's endpoint denies
    egress to the host endpoints' addresses (its own node: Felix takes a workload's packets to its
    host through the workload's egress policy, never through host endpoint policy)."""
    agent_selector = calico_selector(agent)
    tier = {"apiVersion": "projectcalico.org/v3", "kind": "Tier", "metadata": {"name": name, "labels": labels},
            "spec": {"order": CALICO_TIER_ORDER, "defaultAction": "Pass"}}

    def policy(suffix: str, spec: dict) -> dict:
        return {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
                # Calico 3.29 wants a tier's policy named "<tier>.<name>"; later ones take it so too.
                "metadata": {"name": f"{name}.{suffix}", "labels": labels},
                "spec": {"tier": name, "order": 10, **spec}}

    return [tier,
            policy("nodes-in", {"selector": CALICO_AUTO_HOST_ENDPOINTS, "types": ["Ingress"],
                                "applyOnForward": False,   # only what is for the node itself, not its Pods
                                "ingress": [{"action": "Deny", "source": {"selector": agent_selector}}]}),
            policy("nodes-out", {"selector": agent_selector, "types": ["Egress"],
                                 "egress": [{"action": "Deny",
                                             "destination": {"selector": CALICO_AUTO_HOST_ENDPOINTS}}]})]


def host_firewall(plugin: str, *, name: str, agent: dict, labels: dict) -> list[dict]:
    """The objects for `plugin` (one of PLUGINS), for the agent Pod selected by `agent`."""
    return {"cilium": _cilium, "calico": _calico}[plugin](name, agent, labels)


# What the opt-in adds, for the loss report and `explain --target kubernetes`.
WHAT_IT_ADDS = {
    "cilium": "a CiliumClusterwideNetworkPolicy host policy (nodeSelector: every node) that denies ingress to "
              "the nodes from the agent Pod's identity, enableDefaultDeny false so the nodes' other traffic is "
              "untouched; needs Cilium 1.16 or later with the host firewall on",
    "calico": "a Calico tier of the sandbox's name (defaultAction Pass) with two GlobalNetworkPolicies: the "
              "automatic host endpoints deny ingress from the agent, and the agent denies egress to them (its own "
              "node); needs Calico 3.29 or later, projectcalico.org/v3 served, and automatic host endpoints",
}
