"""Small subnets for the networks the launcher creates, so that many proxy-mode sandboxes fit on
a stock engine: Docker's default address pools hold about 31 networks (a /16 or /20 each), and
every proxy-mode sandbox needs one or two.

Each network gets a /28 picked at random from SANDBOX_NETWORK_POOL (default 198.18.0.0/15, the
range RFC 2544 reserves for benchmarks, which no public name resolves to and the proxy refuses as
private anyway). A /28 that overlaps one of the host's routes is never picked; one another network
already holds is refused by the engine, and another is tried. SANDBOX_NETWORK_POOL=engine leaves
the choice to the engine's own pools, as before."""

from __future__ import annotations

import ipaddress
import random

from launcher.engine.engineproto import Engine
from launcher.errors import EngineError
from launcher.host import host
from launcher.plan.plan import NetworkSpec

DEFAULT_POOL = "198.18.0.0/15"
PREFIX = 28          # 16 addresses: the gateway Docker reserves, the proxy and the sandbox
TRIES = 64


def host_routes(table: str) -> list[ipaddress.IPv4Network]:
    """The destinations of /proc/net/route's routes, the default route left out."""
    nets = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            dest = ipaddress.IPv4Address(bytes.fromhex(fields[1])[::-1])
            mask = ipaddress.IPv4Address(bytes.fromhex(fields[7])[::-1])
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        if net.prefixlen:
            nets.append(net)
    return nets


def pool(setting: str) -> ipaddress.IPv4Network | None:
    """The configured pool, or None for the engine's own; EngineError when it is unusable."""
    if setting.strip().lower() == "engine":
        return None
    try:
        net = ipaddress.IPv4Network(setting.strip() or DEFAULT_POOL)
    except ValueError:
        net = None
    if net is None or net.prefixlen > PREFIX:
        raise EngineError(f"SANDBOX_NETWORK_POOL={setting!r}: expected an IPv4 network of /{PREFIX} or larger "
                          "(e.g. 198.18.0.0/15), or `engine` for Docker's default address pools")
    return net


def candidates(net: ipaddress.IPv4Network, routes: list[ipaddress.IPv4Network], rng: random.Random):
    """Random /28s of `net` that overlap no host route (at most TRIES of them)."""
    count = 1 << (PREFIX - net.prefixlen)
    for _ in range(TRIES):
        subnet = ipaddress.IPv4Network((int(net.network_address) + rng.randrange(count) * (1 << (32 - PREFIX)), PREFIX))
        if not any(subnet.overlaps(route) for route in routes):
            yield subnet


def create_network(engine: Engine, spec: NetworkSpec, rng: random.Random | None = None) -> str:
    """Create `spec` on a free /28 of the pool (or on the engine's choice); returns the subnet ("" for
    Docker's own choice, which it does not say)."""
    setting, table = host.network_facts()
    net = pool(setting)
    if net is None:
        return engine.create_network(spec) or ""
    for subnet in candidates(net, host_routes(table), rng or random.SystemRandom()):
        if made := engine.create_network(spec, subnet=str(subnet)):
            return made
    raise EngineError(f"creating network {spec.name}: no free /{PREFIX} found in {net} after {TRIES} tries "
                      "(other networks or the host's routes hold it).\n"
                      "    hint: set SANDBOX_NETWORK_POOL to a free IPv4 range (e.g. 10.213.0.0/16), or to `engine`")
