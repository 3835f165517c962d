"""Benchmark (not a test): HTTPS download throughput through the sandbox's proxy image with variants
of its configuration, all in one run: a host with `http:` rules (TLS ended by the proxy, judged,
re-encrypted towards the upstream), a plain CONNECT tunnel, and a direct download; only this
machine's own containers.

    python bench/squidtls.py [--rounds 5] [--size-mib 100] [--upstreams python,nginx] [VARIANT ...]

A VARIANT is `name=` and parts separated by `;`: squid.conf lines (appended to the configuration
the launcher renders, so they override it), or `@sub=OLD=>NEW` (replace OLD with NEW in the rendered
configuration, e.g. to add an option to the `http_port` or `cache_peer` line), or `@proxy-image=IMAGE`
(another build of the proxy image, run as the launcher's). E.g.

    python bench/squidtls.py "rag64k=read_ahead_gap 64 KB" \
        "tls12=@sub=tls-default-ca=off=>tls-default-ca=off tls-options=NO_TLSv1_3 tls-cipher=ECDHE-ECDSA-AES128-GCM-SHA256"

Two upstreams answer the same names' certificates (a throwaway CA made here): python's `ssl`
(the tests' upstream image; rules.test, tunnel.test) and nginx from Debian (bench/compare's image;
ngx-rules.test, ngx-tunnel.test), so a slow upstream shows as one (direct = what that upstream
gives one client on this machine), and the tests' plain-HTTP upstream (plain.test) shows Squid's own
plain-HTTP path through the same proxy: it writes bodies to the client 4 KB at a time, and so does
the intercepted path (4 KB TLS records), which the tunnel does not. Every proxy gets the rules
the launcher would render for `{host: X, private: true, http: {methods: [GET], paths: [/],
ca_file: CA}}` and `{host: Y, private: true}` per upstream, the rule helper's file, its CA files,
and makes its own CA (start-proxy), as the launcher runs it; the client trusts that CA and the bench's. Figures are medians of the rounds,
with the CPU time per MiB of the proxy, of the client (curl) and, for direct, of the upstream.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.engine import images  # noqa: E402
from launcher.plan.networks import INTERNAL_OPTIONS  # noqa: E402
from launcher.plan.plan import PROXY_ALIAS, PROXY_PORT, ProxySpec  # noqa: E402
from launcher.plan.squidconf import http_rules_file, render_squid  # noqa: E402
from launcher.policy.allowlist import parse_rule  # noqa: E402
import squid  # noqa: E402  (bench/: the proxy bench's docker, CPU and cleanup helpers)
from intercept import SERVER as TLS_SERVER, make_certs  # noqa: E402  (the python TLS upstream, its CA)
from squid import cpu_seconds, docker  # noqa: E402

PREFIX = "sandbox-bench-squidtls"
LABEL = "dev.sandbox.bench=squidtls"
AGENT = "sandbox/agent:bookworm"
UPSTREAM_IMAGE = "sandbox-test/upstream:1"
COMPARE_IMAGE = "sandbox-bench/compare:1"
PLAIN = "plain.test"      # the tests' upstream, plain HTTP: Squid's own path without TLS, for reference
NAMES = {"python": ("rules.test", "tunnel.test"), "nginx": ("ngx-rules.test", "ngx-tunnel.test")}


# nginx from Debian (bench/compare's image) as a TLS upstream: its defaults, one file from a tmpfs.
NGINX = """daemon off; pid /tmp/nginx.pid; error_log stderr warn; worker_processes 1;
events { worker_connections 64; }
http { access_log off; client_body_temp_path /tmp/body; proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi; uwsgi_temp_path /tmp/uwsgi; scgi_temp_path /tmp/scgi;
  server { listen 443 ssl; ssl_certificate /etc/cert.pem; ssl_certificate_key /etc/key.pem;
           root /tmp/www; } }
"""


def start_upstreams(folder: Path, size: int, which: list[str]) -> None:
    net = f"{PREFIX}-net"
    for kind in which:
        aliases = [a for n in NAMES[kind] for a in ("--network-alias", n)]
        if kind == "python":
            argv = [UPSTREAM_IMAGE, "python3", "-u", "-c", TLS_SERVER]
        else:
            (folder / "nginx.conf").write_text(NGINX)
            argv = ["--tmpfs", "/tmp:size=%dm" % ((size >> 20) + 16), COMPARE_IMAGE, "sh", "-c",
                    f"mkdir /tmp/www && head -c {size} /dev/zero > /tmp/www/big && exec nginx -c /etc/nginx-bench.conf"]
        ref = docker("create", "--name", f"{PREFIX}-up-{kind}", "--label", LABEL, "--network", net, *aliases,
                     "-e", f"SIZE={size}", *argv)
        for name in ("cert.pem", "key.pem"):
            docker("cp", str(folder / name), f"{ref}:/tmp/{name}" if kind == "python" else f"{ref}:/etc/{name}")
        if kind == "nginx":
            docker("cp", str(folder / "nginx.conf"), f"{ref}:/etc/nginx-bench.conf")
        docker("start", ref)
        if kind == "nginx":   # the tmpfs hides /tmp's files: the key and certificate live in /etc
            docker("exec", ref, "sh", "-c", "for i in $(seq 100); do [ -s /tmp/nginx.pid ] && break; sleep 0.1; done")


def start_proxy(index: int, lines: str, config: str, env: dict[str, str]) -> tuple[str, str]:
    """One proxy on its own inner network; returns (inner network, the proxy's CA in PEM)."""
    inner = f"{PREFIX}-in{index}"
    docker("network", "create", "--internal", "--label", LABEL, *[f"--opt={k}={v}" for k, v in INTERNAL_OPTIONS], inner)
    spec = ProxySpec(name="bench", image="", config="", internal_network="", egress_network="", alias="", port=0,
                     labels=())
    extra, proxy_image = [], images.proxy_image().tag
    for part in filter(None, (p.strip() for p in lines.split(";"))):
        if part.startswith("@proxy-image="):
            proxy_image = part[len("@proxy-image="):]
        elif part.startswith("@sub="):
            old, _, new = part[len("@sub="):].partition("=>")
            if old not in config:
                raise SystemExit(f"@sub: {old!r} is not in the rendered configuration")
            config = config.replace(old, new)
        else:
            extra.append(part)
    conf = config + "".join(line + "\n" for line in extra)
    tmpfs = [a for d in spec.scratch_dirs for a in ("--tmpfs", f"{d}:{spec.scratch_options}")]
    envs = [a for k, v in {**env, "SANDBOX_SQUID_CONF": base64.b64encode(conf.encode()).decode()}.items()
            for a in ("-e", f"{k}={v}")]
    ref = docker("create", "--name", f"{PREFIX}-p{index}", "--label", LABEL, "--read-only", "--cap-drop", "ALL",
                 "--security-opt", "no-new-privileges", "--pids-limit", str(spec.pids_limit),
                 "--memory", str(spec.memory_bytes), "--memory-swap", str(spec.memory_bytes), *tmpfs,
                 "--network", inner, "--network-alias", PROXY_ALIAS, "--user", spec.user, *envs,
                 proxy_image)
    docker("network", "connect", f"{PREFIX}-net", ref)
    docker("start", ref)
    for _ in range(200):
        logs = subprocess.run(["docker", "logs", ref], capture_output=True, text=True).stderr
        if "Socket connections at" in logs:
            break
        subprocess.run(["sleep", "0.05"])
    else:
        raise SystemExit(f"proxy {index} did not come up:\n{logs[-2000:]}")
    ca = logs[logs.index("-----BEGIN CERTIFICATE-----"):logs.index("-----END CERTIFICATE-----") + 25] + "\n"
    return inner, ca


def client(network: str, name: str, ca: str) -> str:
    ref = docker("run", "-d", "--rm", "--name", f"{PREFIX}-c{name}", "--label", LABEL, "--network", network,
                 "--user", "1000:1000", "--entrypoint", "sleep", AGENT, "infinity")
    subprocess.run(["docker", "exec", "-i", ref, "sh", "-c", "cat > /tmp/ca.pem"], input=ca, text=True, check=True)
    return ref


def fetch(ref: str, host: str, size: int, proxy: bool, scheme: str = "https") -> float:
    flags = ["-x", f"http://{PROXY_ALIAS}:{PROXY_PORT}"] if proxy else []
    out = docker("exec", ref, "curl", "-sS", "-o", "/dev/null", "--cacert", "/tmp/ca.pem", *flags,
                 "-w", "%{http_code} %{size_download} %{time_total}", f"{scheme}://{host}/big")
    code, got, seconds = out.split()
    if code != "200" or int(got) != size:
        raise SystemExit(f"https://{host}/big (proxy={proxy}) got HTTP {code}, {got} bytes")
    return float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--upstreams", default="python,nginx")
    parser.add_argument("variants", nargs="*", help="name=squid lines or @sub=OLD=>NEW;… (see the module docstring)")
    args = parser.parse_args()
    size = args.size_mib << 20
    which = [u for u in args.upstreams.split(",") if u]
    variants = [("baseline", "")] + [(v.partition("=")[0], v.partition("=")[2]) for v in args.variants]
    docker("build", "-q", "-t", UPSTREAM_IMAGE, str(ROOT / "images" / "upstream"))
    if "nginx" in which:
        docker("build", "-q", "-t", COMPARE_IMAGE, str(ROOT / "bench" / "compare"))
    from launcher.engine.engine import connect

    images.build(connect(), images.proxy_image(), lambda line: None)     # the launcher's proxy image
    squid.cleanup(LABEL)
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    client_cpu: dict[str, list[float]] = {}     # curl's own (decrypting), in the client's container
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_certs(folder, tuple(n for pair in NAMES.values() for n in pair))
        bench_ca = (folder / "ca.pem").read_text()
        rules = [parse_rule({"host": PLAIN, "private": True})]
        for kind in which:
            intercepted, tunnel = NAMES[kind]
            rules.append(parse_rule({"host": intercepted, "private": True,
                                     "http": {"methods": ["GET"], "paths": ["/"], "ca_file": str(folder / "ca.pem")}}))
            rules.append(parse_rule({"host": tunnel, "private": True}))
        config = render_squid("bench", tuple(rules))
        env = {"SANDBOX_HTTP_RULES": base64.b64encode(http_rules_file(tuple(rules)).encode()).decode(),
               "SANDBOX_BUMP_NAMES": " ".join(NAMES[k][0] for k in which),
               **{f"SANDBOX_CA_{i}": base64.b64encode(bench_ca.encode()).decode() for i in range(len(which))}}
        try:
            docker("network", "create", "--internal", "--label", LABEL, f"{PREFIX}-net")
            start_upstreams(folder, size, which)
            docker("run", "-d", "--name", f"{PREFIX}-up-plain", "--label", LABEL, "--network", f"{PREFIX}-net",
                   "--network-alias", PLAIN, "-e", f"UPSTREAM_PAYLOAD={size}", UPSTREAM_IMAGE)
            direct = client(f"{PREFIX}-net", "direct", bench_ca)
            clients, proxies = [], []
            for i, (_name, lines) in enumerate(variants):
                inner, ca = start_proxy(i, lines, config, env)
                clients.append(client(inner, str(i), ca + bench_ca))
                proxies.append(f"{PREFIX}-p{i}")
            for _ in range(args.rounds):
                for kind in which:   # and what the upstream itself spends on a direct download
                    up = f"{PREFIX}-up-{kind}"
                    before, mine = cpu_seconds(up), cpu_seconds(direct)
                    times.setdefault(f"{kind} direct", []).append(fetch(direct, NAMES[kind][0], size, False))
                    cpu.setdefault(f"{kind} direct", []).append(cpu_seconds(up) - before)
                    client_cpu.setdefault(f"{kind} direct", []).append(cpu_seconds(direct) - mine)
                for (name, _l), ref, proxy in zip(variants, clients, proxies):
                    before, mine = cpu_seconds(proxy), cpu_seconds(ref)
                    times.setdefault(f"{name} plain", []).append(fetch(ref, PLAIN, size, True, "http"))
                    cpu.setdefault(f"{name} plain", []).append(cpu_seconds(proxy) - before)
                    client_cpu.setdefault(f"{name} plain", []).append(cpu_seconds(ref) - mine)
                    for kind in which:
                        for host, path in zip(NAMES[kind], ("intercepted", "tunnel")):
                            key = f"{kind} {name} {path}"
                            before, mine = cpu_seconds(proxy), cpu_seconds(ref)
                            times.setdefault(key, []).append(fetch(ref, host, size, True))
                            cpu.setdefault(key, []).append(cpu_seconds(proxy) - before)
                            client_cpu.setdefault(key, []).append(cpu_seconds(ref) - mine)
        finally:
            squid.cleanup(LABEL)
    mib = size / (1 << 20)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) / mib * 1000:5.2f}"
    print(f"{args.rounds} rounds, {mib:.0f} MiB each, medians; ratios against the same upstream's direct and tunnel;"
          " CPU in ms per MiB (direct: the upstream's)")
    for kind in which:
        base = statistics.median(times[f"{kind} direct"])
        print(f"{kind + ' direct':36} {base:6.3f} s {mib / base:5.0f} MiB/s{'':31}"
              f"upstream CPU {ms(cpu[f'{kind} direct'])}  client CPU {ms(client_cpu[f'{kind} direct'])}")
        for (name, _l) in variants:
            tunnel = statistics.median(times[f"{kind} {name} tunnel"])
            plain = statistics.median(times[f"{name} plain"])
            for path in ("tunnel", "intercepted"):
                key = f"{kind} {name} {path}"
                t = statistics.median(times[key])
                print(f"{key:36} {t:6.3f} s {mib / t:5.0f} MiB/s  vs direct {base / t:.2f}  vs tunnel {tunnel / t:.2f}"
                      f"  vs plain {plain / t:.2f}  proxy CPU {ms(cpu[key])}  client CPU {ms(client_cpu[key])}")
    for (name, _l) in variants:     # Squid's own plain-HTTP path (4 KB writes to the client), same proxy
        t = statistics.median(times[f"{name} plain"])
        print(f"{'plain HTTP ' + name:36} {t:6.3f} s {mib / t:5.0f} MiB/s{'':45}"
              f"proxy CPU {ms(cpu[f'{name} plain'])}  client CPU {ms(client_cpu[f'{name} plain'])}")


if __name__ == "__main__":
    main()
