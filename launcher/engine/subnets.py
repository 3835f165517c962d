"""Small subnets for the networks the launcher creates, so that many proxy-mode sandboxes fit on
a stock engine: Docker's default address pools hold about 31 networks (a /16 or /20 each), and
every proxy-mode sandbox needs one or two.

Each network gets a /28 picked at random from SANDBOX_NETWORK_POOL (default 198.18.0.0/15, the
range RFC 2544 reserves for benchmarks, which no public name resolves to and the proxy refuses as
private anyway). A /28 that overlaps one of the host's routes is never picked; one another network
already holds is refused by the engine, and another is tried. SANDBOX_NETWORK_POOL=engine leaves
the choice to the engine's own pools, as before. The shared egress network (plan.SHARED_EGRESS)
takes one /22 of the pool (1021 proxies at once), a quarter of a smaller pool."""

from __future__ import annotations

import ipaddress
import os
import random

from launcher.engine.engineproto import Engine
from launcher.engine.engineproto import NetworkInfo
from launcher.errors import EngineError
from launcher.host import host
from launcher.plan.networks import ICC_OFF
from launcher.plan.plan import NetworkSpec

DEFAULT_POOL = "198.18.0.0/15"
PREFIX = 28          # 16 addresses: the gateway Docker reserves, the proxy and the sandbox
SHARED_PREFIX = 22   # the shared egress network: one address per proxy
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


def candidates(net: ipaddress.IPv4Network, routes: list[ipaddress.IPv4Network], rng: random.Random,
               prefix: int = PREFIX):
    """Random /`prefix`s of `net` that overlap no host route (at most TRIES of them)."""
    count = 1 << (prefix - net.prefixlen)
    for _ in range(TRIES):
        subnet = ipaddress.IPv4Network((int(net.network_address) + rng.randrange(count) * (1 << (32 - prefix)), prefix))
        if not any(subnet.overlaps(route) for route in routes):
            yield subnet


def create_network(engine: Engine, spec: NetworkSpec, rng: random.Random | None = None) -> str:
    """Create `spec` on a free /28 of the pool (or on the engine's choice); returns the subnet ("" for
    Docker's own choice, which it does not say)."""
    setting, table = host.network_facts()
    net = pool(setting)
    if net is None:
        return engine.create_network(spec) or ""
    prefix = min(max(SHARED_PREFIX, net.prefixlen + 2), PREFIX) if spec.shared else PREFIX
    for subnet in candidates(net, host_routes(table), rng or random.SystemRandom(), prefix):
        if made := engine.create_network(spec, subnet=str(subnet)):
            return made
    raise EngineError(f"creating network {spec.name}: no free /{prefix} found in {net} after {TRIES} tries "
                      "(other networks or the host's routes hold it).\n"
                      "    hint: set SANDBOX_NETWORK_POOL to a free IPv4 range (e.g. 10.213.0.0/16), or to `engine`")


def lock_path() -> str:
    return os.path.join(host.state_dir(), "egress-network.lock")


def shared_network(engine: Engine, spec: NetworkSpec) -> str:
    """The shared egress network (`spec`, plan.SHARED_EGRESS): the one there is, else made now, under
    a lock (one launcher of this user makes it; another's create that came first is taken as it
    is). Returns its subnet; EngineError when a network of that name is not as the launcher makes
    it: ours, a plain bridge, and its containers kept apart (ICC off), else proxies reach each other."""
    found = engine.network_info(spec.name)
    if found is None:
        with host.locked(lock_path()):
            found = engine.network_info(spec.name)
            if found is None:
                try:
                    create_network(engine, spec)
                except EngineError as exc:
                    if "already exists" not in str(exc):   # another user's launcher made it first
                        raise
                found = engine.network_info(spec.name)
    if found is None:
        raise EngineError(f"network {spec.name}: gone right after it was made (`sandbox gc`?); run again")
    return checked(found, spec)


def checked(found: NetworkInfo, spec: NetworkSpec) -> str:
    """`found`'s subnet when it is the shared egress network as `spec` asks, else EngineError."""
    wrong = [what for what, bad in (
        (f"not labelled as the launcher's ({dict(spec.labels)})", any(found.labels.get(k) != v for k, v in spec.labels)),
        ("not a bridge", found.driver not in ("", "bridge")), ("internal", found.internal),
        (f"containers can reach each other ({ICC_OFF[0]} is {found.options.get(ICC_OFF[0], 'unset')!r}, "
         f"not {ICC_OFF[1]!r})", found.options.get(ICC_OFF[0]) != ICC_OFF[1])) if bad]
    if wrong:
        raise EngineError(f"network {spec.name} is not the launcher's shared egress network: {'; '.join(wrong)}.\n"
                          f"    hint: remove it (`docker network rm {spec.name}`; the launcher makes it again), or "
                          "give the proxy another network (--egress-network NAME)")
    return found.subnets[0] if found.subnets else ""
