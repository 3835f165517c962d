"""Benchmark (not a test): proxy-mode sandboxes against `none` ones, and download throughput
through the proxy against a direct download, all on this machine's own containers.

    python bench/proxy.py [--rounds 7]

Startup: `sandbox run -- true` in mode none vs mode proxy. "Cold" is the first proxy-mode run
after the proxy image was removed from the cache of running containers (each sandbox gets its own
proxy, so every run starts one: warm means the image and base layers are already on disk).
Throughput (medians of `rounds` downloads, each checked whole): 256 MiB from an upstream container, curl inside a sandbox through the proxy (plain HTTP,
and a CONNECT tunnel as HTTPS uses) vs curl in a container on the upstream's network, no proxy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = [sys.executable, "-m", "launcher"]
NET = "sandbox-bench-internet"
SIZE = 256 << 20


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def downloads(argv: list[str]) -> float:
    """The median time of the downloads `argv` prints (code, size, seconds a line); each must be whole."""
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split("\n")
    times = []
    for line in filter(None, out):
        code, size, seconds = line.split()
        if code != "200" or int(size) != SIZE:
            raise SystemExit(f"download failed: HTTP {code}, {size} of {SIZE} bytes ({' '.join(argv[-3:])[:120]})")
        times.append(float(seconds))
    return statistics.median(times)


def docker(*args: str, capture: bool = False) -> str:
    result = subprocess.run(["docker", *args], check=True, capture_output=True, text=True)
    return result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    docker("build", "-q", "-t", "sandbox-test/upstream:1", str(ROOT / "images" / "upstream"))
    docker("network", "create", "--internal", NET)
    docker("run", "-d", "--name", f"{NET}-up", "--network", NET, "--network-alias", "files.test",
           "-e", f"UPSTREAM_PAYLOAD={SIZE}", "sandbox-test/upstream:1")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = os.path.join(tmp, "ws")
            os.mkdir(ws)
            if os.geteuid() == 0:
                os.chown(ws, 1000, 1000)
            none = SANDBOX + ["run", "-p", "untrusted", "--workspace-mode", "bind", "-w", ws, "--", "true"]
            proxy = SANDBOX + ["run", "-p", "ci", "-w", ws, "--allow-private", "files.test", "--egress-network", NET, "--"]
            subprocess.run(none, check=True)           # builds what is missing
            cold = timed(proxy + ["true"])             # first proxy-mode run: builds the proxy image if missing
            none_s = statistics.median(timed(none) for _ in range(rounds))
            warm_s = statistics.median(timed(proxy + ["true"]) for _ in range(rounds))
            # files.test lives on a private test network: --allow-private, as the tests do. Each
            # figure is the median of `rounds` downloads in one sandbox (one proxy), each checked.
            fetch = ('for i in $(seq %d); do curl -sS -o /dev/null %%s -w "%%%%{http_code} %%%%{size_download} '
                     '%%%%{time_total}\\n" http://files.test/big; done' % rounds)
            through = downloads(proxy + ["sh", "-c", fetch % ""])
            # HTTPS goes through a CONNECT tunnel, which Squid only relays: measure that path too.
            tunnel = downloads(proxy + ["sh", "-c", fetch % "-p"])
            direct = downloads(["docker", "run", "--rm", "--network", NET, "sandbox/agent:bookworm", "sh", "-c",
                                fetch % ""])
    finally:
        docker("rm", "-f", f"{NET}-up")
        docker("network", "rm", NET)
    mib = SIZE / (1 << 20)
    print(f"rounds per figure:                         {rounds}")
    print(f"sandbox run -- true, network none:         {none_s:.3f} s")
    print(f"sandbox run -- true, network proxy (warm): {warm_s:.3f} s   ratio {warm_s / none_s:.2f}")
    print(f"sandbox run -- true, network proxy (cold): {cold:.3f} s")
    print(f"download {mib:.0f} MiB directly:              {direct:.3f} s   {mib / direct:.0f} MiB/s")
    print(f"download {mib:.0f} MiB through the proxy:     {through:.3f} s   {mib / through:.0f} MiB/s"
          f"   ratio {direct / through:.2f} (plain HTTP)")
    print(f"download {mib:.0f} MiB through a tunnel:      {tunnel:.3f} s   {mib / tunnel:.0f} MiB/s"
          f"   ratio {direct / tunnel:.2f} (CONNECT, as HTTPS)")


if __name__ == "__main__":
    main()
