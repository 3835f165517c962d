"""Benchmark (not a test): download throughput through the sandbox's proxy image with variants of
its configuration, all in one run, against a direct download; only this machine's own containers.

    python bench/squid.py [--rounds 5] [--size-mib 256] [VARIANT ...]

A VARIANT is `name=` and squid.conf lines separated by `;` (appended to the configuration the
launcher renders, so they override it), or these: `@cpus=N` (a CPU quota for that proxy), `@mtu=N`
(its inner network's MTU; the launcher's is 65000, `@mtu=1500` is Docker's default), `@egress-mtu=N`
(the proxy's egress side is another network with that MTU, with its own upstream and direct
client, measured as "direct egress-mtu=N"), `@noconnect`
(plain HTTP only), `@proxy-image=IMAGE` (another build of the proxy image, run as the launcher's),
`@image=IMAGE COMMAND` (another proxy instead, a comparison only:
sandbox-bench/compare:1, built from bench/compare/, has Debian's tinyproxy, nginx and socat). E.g.

    python bench/squid.py "rag16k=read_ahead_gap 16 KB" "mtu1500=@mtu=1500" "cpus1=@cpus=1" \
        "nginx=@image=sandbox-bench/compare:1 exec nginx -c /etc/bench/nginx-big.conf;@noconnect"

The proxy runs as the launcher runs it: its own user, read-only root, no capabilities, memory and
pids limits, on an internal network (the launcher's options) shared with the client only, and on
the upstream's network. Every round fetches /big through each variant, plain HTTP and through a
CONNECT tunnel (as HTTPS goes), and directly; the figures are medians of the rounds.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.engine import images  # noqa: E402
from launcher.plan.networks import INTERNAL_OPTIONS  # noqa: E402
from launcher.plan.plan import PROXY_ALIAS, PROXY_PORT  # noqa: E402
from launcher.plan.plan import ProxySpec  # noqa: E402
from launcher.plan.squidconf import render_squid  # noqa: E402
from launcher.policy.allowlist import parse_rule  # noqa: E402

PREFIX = "sandbox-bench-squid"
LABEL = "dev.sandbox.bench=squid"
AGENT = "sandbox/agent:bookworm"
BASELINE = ("baseline", "")


def docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], check=False, capture_output=True, text=True)
    if check and result.returncode:
        raise SystemExit(f"docker {' '.join(args)[:200]}: exit {result.returncode}: {result.stderr.strip()[-500:]}")
    return result.stdout.strip()


def parse_variant(text: str) -> tuple[str, str]:
    name, _, lines = text.partition("=")
    return name, lines


def start_proxy(index: int, name: str, lines: str, config: str) -> str:
    """One proxy on its own inner network; returns the inner network's name."""
    inner = f"{PREFIX}-in{index}"
    opts = [f"--opt={k}={v}" for k, v in INTERNAL_OPTIONS]
    mtu = [p.strip()[len("@mtu="):] for p in lines.split(";") if p.strip().startswith("@mtu=")]
    opts = [o for o in opts if not (mtu and "driver.mtu=" in o)] + [f"--opt=com.docker.network.driver.mtu={m}" for m in mtu]
    docker("network", "create", "--internal", "--label", LABEL, *opts, inner)
    spec = ProxySpec(name="bench", image="", config="", internal_network="", egress_network="", alias="", port=0,
                     labels=())
    extra, cpus, other, proxy_image = [], "", "", images.proxy_image().tag
    for part in filter(None, (p.strip() for p in lines.split(";"))):
        if part.startswith("@cpus="):
            cpus = part[len("@cpus="):]
        elif part.startswith("@proxy-image="):
            proxy_image = part[len("@proxy-image="):]
        elif part == "@noconnect" or part.startswith(("@mtu=", "@egress-mtu=")):
            pass
        elif part.startswith("@image="):
            other = part[len("@image="):]
        else:
            extra.append(part)
    conf = config + "".join(line + "\n" for line in extra)
    tmpfs = [a for d in spec.scratch_dirs for a in ("--tmpfs", f"{d}:{spec.scratch_options}")]
    argv = ["create", "--name", f"{PREFIX}-p{index}", "--label", LABEL, "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--pids-limit", str(spec.pids_limit),
            "--memory", str(spec.memory_bytes), "--memory-swap", str(spec.memory_bytes), *tmpfs,
            "--network", inner, "--network-alias", PROXY_ALIAS]
    argv += ["--cpus", cpus] if cpus else []
    if other:
        image, _, command = other.partition(" ")
        argv += ["--user", "65534:65534", "--tmpfs", "/tmp", image, "sh", "-c", command]
    else:
        argv += ["--user", spec.user, "-e", "SANDBOX_SQUID_CONF=" + base64.b64encode(conf.encode()).decode(),
                 proxy_image]
    ref = docker(*argv)
    docker("network", "connect", egress_network(lines), ref)
    docker("start", ref)
    for _ in range(200):
        logs = subprocess.run(["docker", "logs", ref], capture_output=True, text=True)
        if other or "Socket connections at" in logs.stderr:
            break
        subprocess.run(["sleep", "0.05"])
    else:
        raise SystemExit(f"proxy {name} did not come up:\n{logs.stderr[-2000:]}")
    return inner


def egress_network(lines: str) -> str:
    mtu = [p.strip()[len("@egress-mtu="):] for p in lines.split(";") if p.strip().startswith("@egress-mtu=")]
    return f"{PREFIX}-net{mtu[0]}" if mtu else f"{PREFIX}-net"


def upstream(network: str, size: int, mtu: str = "") -> None:
    """The upstream on `network` (created here, with that MTU if given)."""
    docker("network", "create", "--internal", "--label", LABEL,
           *([f"--opt=com.docker.network.driver.mtu={mtu}"] if mtu else []), network)
    docker("run", "-d", "--name", f"{network}-up", "--label", LABEL, "--network", network,
           "--network-alias", "files.test", "-e", f"UPSTREAM_PAYLOAD={size}", "sandbox-test/upstream:1")


def client(network: str, index: str) -> str:
    return docker("run", "-d", "--rm", "--name", f"{PREFIX}-c{index}", "--label", LABEL, "--network", network,
                  "--user", "1000:1000", "--entrypoint", "sleep", AGENT, "infinity")


def fetch(ref: str, proxy: str, tunnel: bool, size: int) -> float:
    flags = (["-p"] if tunnel else []) + (["-x", proxy] if proxy else [])
    out = docker("exec", ref, "curl", "-sS", "-o", "/dev/null", *flags, "-w", "%{http_code} %{size_download} %{time_total}",
                 "http://files.test/big")
    code, got, seconds = out.split()
    if code != "200" or int(got) != size:
        raise SystemExit(f"fetch through {proxy or 'nothing'} (tunnel={tunnel}) got HTTP {code}, {got} bytes")
    return float(seconds)


def cpu_seconds(ref: str) -> float:
    """The container's CPU time so far (cgroup v1 cpuacct, v2 cpu.stat)."""
    v1 = docker("exec", ref, "cat", "/sys/fs/cgroup/cpuacct/cpuacct.usage", check=False)
    if v1:
        return int(v1) / 1e9
    v2 = docker("exec", ref, "sed", "-n", "s/^usage_usec //p", "/sys/fs/cgroup/cpu.stat", check=False)
    return int(v2 or 0) / 1e6


def cleanup(label: str = LABEL) -> None:
    for kind, ls in (("container", ["ps", "-aq"]), ("network", ["network", "ls", "-q"])):
        refs = docker(*ls, "--filter", f"label={label}").split()
        if refs:
            docker(*(["rm", "-f"] if kind == "container" else ["network", "rm"]), *refs, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("variants", nargs="*", help="name=squid lines;… (see the module docstring)")
    args = parser.parse_args()
    size = args.size_mib << 20
    variants = [BASELINE] + [parse_variant(v) for v in args.variants]
    rule = parse_rule({"host": "files.test", "private": True})
    config = render_squid("bench", (rule,))
    docker("build", "-q", "-t", "sandbox-test/upstream:1", str(ROOT / "images" / "upstream"))
    from launcher.engine.engine import connect

    images.build(connect(), images.proxy_image(), lambda line: None)     # the launcher's proxy image
    if any("sandbox-bench/compare:1" in lines for _n, lines in variants):
        docker("build", "-q", "-t", "sandbox-bench/compare:1", str(ROOT / "bench" / "compare"))
    cleanup()
    try:
        upstream(f"{PREFIX}-net", size)
        direct = client(f"{PREFIX}-net", "direct")
        others = sorted({egress_network(lines) for _n, lines in variants} - {f"{PREFIX}-net"})
        for network in others:   # @egress-mtu=N: another egress network, its own upstream and direct client
            upstream(network, size, network[len(f"{PREFIX}-net"):])
        directs = {f"direct egress-mtu={n[len(f'{PREFIX}-net'):]}": client(n, f"direct{i}") for i, n in enumerate(others)}
        clients = [client(start_proxy(i, n, lines, config), str(i)) for i, (n, lines) in enumerate(variants)]
        proxies = [f"{PREFIX}-p{i}" for i in range(len(variants))]
        url = f"http://{PROXY_ALIAS}:{PROXY_PORT}"
        times: dict[str, list[float]] = {"direct": []}
        cpu: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            times["direct"].append(fetch(direct, "", False, size))
            for key, ref in directs.items():
                times.setdefault(key, []).append(fetch(ref, "", False, size))
            for (name, _l), ref, proxy in zip(variants, clients, proxies):
                for tunnel in (False, True) if "@noconnect" not in _l else (False,):
                    key = f"{name} {'CONNECT' if tunnel else 'plain'}"
                    before = cpu_seconds(proxy) if "@image=" not in _l else 0.0
                    times.setdefault(key, []).append(fetch(ref, url, tunnel, size))
                    cpu.setdefault(key, []).append((cpu_seconds(proxy) if "@image=" not in _l else 0.0) - before)
    finally:
        cleanup()
    mib = size / (1 << 20)
    base = statistics.median(times["direct"])
    print(f"{args.rounds} rounds, {mib:.0f} MiB each, medians")
    print(f"{'direct':34} {base:6.3f} s {mib / base:6.0f} MiB/s")
    for key, values in times.items():
        if key.startswith("direct"):
            if key != "direct":
                print(f"{key:34} {statistics.median(values):6.3f} s {mib / statistics.median(values):6.0f} MiB/s"
                      f"  ratio {base / statistics.median(values):.2f}")
            continue
        t = statistics.median(values)
        c = statistics.median(cpu[key])
        shown = f"{c:.2f} s ({c / mib * 1000:.2f} ms/MiB)" if c else "n/a"    # another proxy's image: its cgroup is not read
        print(f"{key:34} {t:6.3f} s {mib / t:6.0f} MiB/s  ratio {base / t:.2f}  proxy CPU {shown}")


if __name__ == "__main__":
    main()
