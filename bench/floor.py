"""Benchmark (not a test): the engine's own floor under proxy mode, with no launcher at all.

    python bench/floor.py [--rounds 15] [--at-once 50]

Both topologies built straight through the engine's API (the docker SDK's low-level client), each
request as soon as what it needs exists, as the launcher orders them:
  none     create (network none), start, wait, remove: what `docker run --rm` asks, without a CLI
  proxy    an internal network on a /28; a stand-in proxy (the agent image running `sleep`, no
           Squid) created on it, joined to an outside network and started while the agent's
           container is created and started on the internal network; wait; both removed; the
           internal network removed
Prints the medians, their ratio and the median of each proxy step (ms); --at-once N then builds N
proxy topologies at once and N none ones at once and prints each total. No Squid, no probe, no
policy: whatever the launcher adds comes on top, so proxy mode's time against none mode's can
never be better than this ratio plus the launcher's own work in both.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import docker  # noqa: E402

from launcher.engine import images  # noqa: E402

TAG = f"sandbox-bench-floor-{os.getpid()}"
SUBNETS = itertools.count()   # 198.19.0.0/16 in /28s: the launcher's own pool picks at random in 198.18.0.0/15
api = docker.from_env(timeout=300).api


def container(network: str, command: list[str]) -> str:
    host = api.create_host_config(network_mode=network, read_only=True, cap_drop=["ALL"],
                                  security_opt=["no-new-privileges"])
    return api.create_container(images.AGENT_IMAGE, command, user="1000:1000", host_config=host,
                                labels={TAG: "1"})["Id"]


def run_none() -> None:
    ref = container("none", ["true"])
    api.start(ref)
    api.wait(ref)
    api.remove_container(ref, force=True, v=True)


def run_proxy(outside: str, steps: list[tuple[float, ...]]) -> None:
    name, i = f"{TAG}-{random.randrange(1 << 30)}", next(SUBNETS)
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=f"198.19.{i // 16}.{i % 16 * 16}/28")])
    t0 = time.perf_counter()
    api.create_network(name, internal=True, ipam=ipam, labels={TAG: "1"})
    t1 = time.perf_counter()

    def proxy() -> str:
        ref = container(name, ["sleep", "600"])
        api.connect_container_to_network(ref, outside)
        api.start(ref)
        return ref

    def agent() -> str:
        ref = container(name, ["true"])
        api.start(ref)
        return ref

    with ThreadPoolExecutor(2) as pool:
        made = [pool.submit(proxy), pool.submit(agent)]
        proxy_ref, agent_ref = (m.result() for m in made)
    t2 = time.perf_counter()
    api.wait(agent_ref)
    t3 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda ref: api.remove_container(ref, force=True, v=True), (agent_ref, proxy_ref)))
    t4 = time.perf_counter()
    api.remove_network(name)
    steps.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, time.perf_counter() - t4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--at-once", type=int, default=0, metavar="N")
    args = parser.parse_args()
    outside = api.create_network(f"{TAG}-outside", labels={TAG: "1"})["Id"]
    try:
        times: dict[str, list[float]] = {"none": [], "proxy": []}
        steps: list[tuple[float, ...]] = []
        for _ in range(args.rounds):
            for kind in random.sample(sorted(times), 2):
                start = time.perf_counter()
                run_none() if kind == "none" else run_proxy(outside, steps)
                times[kind].append(time.perf_counter() - start)
        none, proxy = (statistics.median(times[k]) for k in ("none", "proxy"))
        print(f"median of {args.rounds}: none {none:.3f} s, proxy {proxy:.3f} s, proxy/none {proxy / none:.2f}")
        print("proxy steps (ms): network {:.0f}, proxy made and started beside the agent's start {:.0f}, "
              "agent's wait {:.0f}, both removed {:.0f}, network removed {:.0f}".format(
                  *(1000 * statistics.median(s) for s in zip(*steps))))
        if args.at_once:
            for kind, one in (("proxy", lambda _: run_proxy(outside, [])), ("none", lambda _: run_none())):
                start = time.perf_counter()
                with ThreadPoolExecutor(args.at_once) as pool:
                    list(pool.map(one, range(args.at_once)))
                print(f"{args.at_once} {kind} at once: {time.perf_counter() - start:.1f} s")
    finally:   # whatever a failure left: this run's containers, then its networks
        for item in api.containers(all=True, filters={"label": TAG}):
            api.remove_container(item["Id"], force=True, v=True)
        for item in api.networks(filters={"label": TAG}):
            api.remove_network(item["Id"])


if __name__ == "__main__":
    main()
