"""Proxy mode's egress network: the one every launched proxy shares on an engine that can keep the
containers of one network apart, and the sandbox's own elsewhere. The shared one trades a bridge
made and removed per sandbox (with its masquerading: ~180 ms of the engine's serial work to remove)
for one kept; what keeps proxies from reaching each other on it is the bridge's ICC switch, off."""

from __future__ import annotations

from launcher import labels as label
from launcher.plan.plan import NetworkSpec

SHARED_EGRESS = "sandbox-egress"
ICC_OFF = ("com.docker.network.bridge.enable_icc", "false")


def egress_networks(name: str, egress_network: str | None, net_labels: tuple,
                    shared: bool) -> tuple[str, list[NetworkSpec]]:
    """The proxy's egress network and what the launcher makes of it: none for --egress-network (it
    exists); where the launcher starts the sandbox on an engine that can keep containers of one
    network apart (Dialect.shared_egress), the shared one, SHARED_EGRESS, made once on demand and
    kept, with ICC off, so that no proxy on it reaches another (subnets.shared_network refuses one
    of that name made otherwise); else one of the sandbox's own."""
    if egress_network:
        return egress_network, []
    if shared:
        return SHARED_EGRESS, [NetworkSpec(name=SHARED_EGRESS, internal=False, options=(ICC_OFF,), shared=True,
                                           labels=((label.KIND, "egress"), (label.MANAGED, "1")))]
    return f"{name}-egress", [NetworkSpec(name=f"{name}-egress", internal=False, options=(), labels=net_labels)]
