"""A closed Pod network for the podman node: a real bridge network (`podman network create`) whose
traffic the test closes the way a NetworkPolicy-enforcing plugin closes it, with nftables rules of
its own (tables named after the test's pid, removed afterwards even on failure), and something that
answers behind every rule, so that a missing rule gives the probe an actual answer to refuse.

Every address is on this machine: the "gateway" is the bridge's own address, the "node", "API
server" and "public" ones are added on the test bridge (listeners of the test process answer
there), the "cluster DNS" and "metadata" ones are those of a listener container on the bridge
(tests/netpod_world.py). A base rule keeps anything
from the test network from leaving through another interface, so no missing rule reaches outside.
The rules answer as plugins do: some drop (silence, judged by the probe's control), some reject
with a TCP reset (refused) or ICMP administratively prohibited (no route). This kernel has no
reject in nftables' bridge family, so the rejecting rules are for addresses of the host (inet).
An ICMP error to a SYN is a soft error for the kernel here (6.18: connect() fails with "No route
to host" only once the retransmitted SYN gets one too, after the probe's window), so the probe
sees silence there as it does for a drop: the control judges both."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.89.78.0/24"
SUBNET6 = "fd89:78::/64"
SECOND_SUBNET = "10.89.79.0/24"   # only with second=True: an internal network of its own   # only with ipv6=True: an address beyond link-local, which net.routes refuses
GATEWAY = "10.89.78.1"     # the bridge's address, podman's choice for the first of the subnet
PROXY_IP = "10.89.78.10"
AGENT_IP = "10.89.78.20"
WORLD_IP = "10.89.78.30"
DNS_IP, API_IP, METADATA_IP, PUBLIC_IP = "10.89.78.53", "10.89.78.54", "10.89.78.55", "10.89.78.56"
NODE_IP = "10.89.78.254"   # the node's address as the Pod is told it (status.hostIP)
API_PORT = 6443
KUBELET = 10250
# What the Pods are compiled with (`--forbidden`): the stand-ins for the metadata service, a
# public address and the cluster DNS; the API server comes as the kubelet tells it (env).
FORBIDDEN = (f"{METADATA_IP}:80", f"{PUBLIC_IP}:443", f"{DNS_IP}:53")
NODE_ENV = {"SANDBOX_NODE_IP": NODE_IP, "KUBERNETES_SERVICE_HOST": API_IP, "KUBERNETES_SERVICE_PORT": str(API_PORT)}
WORLD_PORTS = (22, 53, 80, 443, API_PORT, KUBELET)

_TCP_REFUSED = "meta l4proto tcp reject with tcp reset"
_NO_ROUTE = "reject with icmp type admin-prohibited"
# rule -> (nftables family of the chain: inet for the host's own addresses, bridge for the
# listener's; the statements, each for traffic from the agent Pod)
RULES = {
    "gateway": ("inet", (f"ip daddr {GATEWAY} drop",)),
    "node": ("inet", (f"ip daddr {NODE_IP} {_TCP_REFUSED}", f"ip daddr {NODE_IP} drop")),
    "api-server": ("inet", (f"ip daddr {API_IP} {_TCP_REFUSED}", f"ip daddr {API_IP} drop")),
    "cluster-dns": ("bridge", (f"ip daddr {DNS_IP} drop",)),
    "metadata": ("bridge", (f"ip daddr {METADATA_IP} drop",)),
    "public": ("inet", (f"ip daddr {PUBLIC_IP} {_NO_ROUTE}",)),
}
HOST_ADDED = (NODE_IP, API_IP, PUBLIC_IP)   # added on the bridge; the listeners' ports below
HOST_LISTENERS = ((GATEWAY, KUBELET), (NODE_IP, KUBELET), (API_IP, API_PORT), (PUBLIC_IP, 443))
WORLD_ADDED = (DNS_IP, METADATA_IP)


@dataclass(frozen=True)
class Closed:
    network: str
    rules: tuple[str, ...]
    second: str = ""   # a second network for the agent Pod ("": none)


class _HostListeners:
    """TCP listeners of this machine at the gateway's and the added addresses."""

    def __init__(self, listeners: tuple[tuple[str, int], ...]):
        self.servers = [socket.create_server(pair) for pair in listeners]
        for server in self.servers:
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    @staticmethod
    def _accept(server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        for server in self.servers:
            server.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread: the port is free again
            server.close()


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check)


def _nft_tables(table: str, bridge: str, rules: tuple[str, ...], arp_blocked: bool) -> str:
    chains = {"inet": [], "bridge": []}
    for name in rules:
        family, statements = RULES[name]
        chains[family] += [f"ip saddr {AGENT_IP} {s}" for s in statements]
    inet = "\n".join(chains["inet"])
    br = "\n".join(chains["bridge"])
    return (f"table inet {table} {{\n"
            f" chain input {{ type filter hook input priority -5; policy accept;\n{inet}\n }}\n"
            # the base rule: nothing from the test network leaves through another interface
            f" chain forward {{ type filter hook forward priority -5; policy accept;\n"
            f"  ip saddr {SUBNET} oifname != \"{bridge}\" drop\n"
            f"  ip6 saddr {SUBNET6} oifname != \"{bridge}\" drop\n }}\n"
            f"}}\n"
            f"table bridge {table} {{\n"
            f" chain forward {{ type filter hook forward priority -5; policy accept;\n{br}\n }}\n"
            f"}}\n"
            # the gateway answers no ARP from the agent: no link-layer answer, the none-mode control
            f"table arp {table} {{\n"
            f" chain input {{ type filter hook input priority -5; policy accept;\n"
            f"{f'  arp saddr ip {AGENT_IP} drop' if arp_blocked else ''}\n }}\n"
            f"}}\n")


class ClosedNetwork:
    """`with ClosedNetwork(node, name, rules) as closed:` the network, its listeners and the rules
    named (a subset of RULES); all of it goes again on exit."""

    def __init__(self, node, name: str, rules: tuple[str, ...], world_image: str, *, arp_blocked: bool = False,
                 ipv6: bool = False, second: bool = False):
        self.node, self.name, self.rules, self.world_image = node, name, rules, world_image
        self.arp_blocked, self.ipv6, self.second = arp_blocked, ipv6, second
        self.table = f"sandbox_test_netpod_{os.getpid()}"
        self.world = f"{name}-world"
        self.done: list = []

    def __enter__(self) -> Closed:
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return Closed(self.name, self.rules, f"{self.name}-second" if self.second else "")

    def _make(self) -> None:
        run = self.node.run
        six = ("--ipv6", "--subnet", SUBNET6) if self.ipv6 else ()
        run("network", "create", "--disable-dns", "--subnet", SUBNET, "--gateway", GATEWAY, *six, self.name)
        self.done.append(lambda: run("network", "rm", "-f", self.name, check=False))
        if self.second:
            run("network", "create", "--internal", "--disable-dns", "--subnet", SECOND_SUBNET, f"{self.name}-second")
            self.done.append(lambda: run("network", "rm", "-f", f"{self.name}-second", check=False))
        # the bridge exists once the first container joins (netavark; CNI makes it then too): the listener first
        script = Path(__file__).with_name("netpod_world.py")
        run("run", "-d", "--name", self.world, "--network", self.name, "--ip", WORLD_IP, "--entrypoint", "python3",
            "-v", f"{script}:/world.py:ro", "--user", "0", self.world_image, "-u", "/world.py", *map(str, WORLD_PORTS),
            "--dns", DNS_IP)
        self.done.append(lambda: run("rm", "-f", "-t", "0", self.world, check=False))
        bridge = run("network", "inspect", self.name, "--format", "{{.NetworkInterface}}").stdout.strip()
        # Bridged traffic passes iptables here (bridge-nf-call-iptables) and dockerd's FORWARD
        # policy may be DROP: the Pods on this bridge reach each other (podman_node._Network).
        accept = ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
        _sh("iptables", "-I", *accept)
        self.done.append(lambda: _sh("iptables", "-D", *accept, check=False))
        result = subprocess.run(["nft", "-f", "-"], input=_nft_tables(self.table, bridge, self.rules, self.arp_blocked),
                                capture_output=True, text=True)
        self.done.append(self._drop_tables)
        assert result.returncode == 0, result.stderr
        for address in HOST_ADDED:
            _sh("ip", "addr", "add", f"{address}/32", "dev", bridge)
            self.done.append(lambda a=address: _sh("ip", "addr", "del", f"{a}/32", "dev", bridge, check=False))
        host = _HostListeners(HOST_LISTENERS)
        self.done.append(host.close)
        pid = run("inspect", "--format", "{{.State.Pid}}", self.world).stdout.strip()
        for address in WORLD_ADDED:
            _sh("nsenter", "-t", pid, "-n", "ip", "addr", "add", f"{address}/32", "dev", "eth0")
        for _ in range(50):
            if "listening" in run("logs", self.world).stdout:
                break
            threading.Event().wait(0.1)

    def _drop_tables(self) -> None:
        for family in ("inet", "bridge", "arp"):
            _sh("nft", "delete", "table", family, self.table, check=False)

    def __exit__(self, *exc) -> None:
        while self.done:
            self.done.pop()()
