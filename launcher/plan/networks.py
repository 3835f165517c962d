"""Proxy mode's networks: the internal one's options, and the egress network: the one every launched proxy shares on an engine that can keep the
containers of one network apart, and the sandbox's own elsewhere. The shared one trades a bridge
made and removed per sandbox (with its masquerading: ~180 ms of the engine's serial work to remove)
for one kept; what keeps proxies from reaching each other on it is the bridge's ICC switch, off."""

from __future__ import annotations

from launcher import labels as label
from launcher.plan.plan import NetworkSpec

# The sandbox's only network. inhibit_ipv4 keeps the gateway address off the host's bridge, so
# the sandbox cannot reach services on the host through it (a plain --internal network can).
# A large MTU: it leads nowhere but to the proxy, and Squid writes plain-HTTP bodies 4 KB at a
# time, each one packet then instead of three (bench/squid.py: plain ~0.22 -> ~0.28 of direct).
INTERNAL_OPTIONS = (("com.docker.network.bridge.inhibit_ipv4", "true"), ("com.docker.network.driver.mtu", "65000"))

# The sandbox's neighbour discovery on that network, in its own namespace: an address nobody owns
# (the gateway, which inhibit_ipv4 leaves ownerless, and through it every outside address) fails at
# once with "No route to host" after two ARP requests 20 ms apart, instead of after 3 s. The probe's
# egress.direct then gets connect()'s own refusal in ~50 ms rather than waiting out its 1 s window
# (which stays, for runtimes that do not take these: gVisor's netstack, a cluster's Pod). A bridge
# answers a live neighbour in microseconds, so the proxy's address still resolves.
ARP_SYSCTLS = (("net.ipv4.neigh.eth0.mcast_solicit", "2"), ("net.ipv4.neigh.eth0.retrans_time_ms", "20"))

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
