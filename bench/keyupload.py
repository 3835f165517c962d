"""Benchmark (not a test): a large HTTPS upload through a sandbox's proxy to a host with `http:`
rules, with a key bound to that host (every request read in clear also goes, headers and whole
body, to the key ICAP service in the proxy) against the same rule without a bound key (no ICAP);
only this machine's own containers.

    python bench/keyupload.py [--rounds 3] [--size-mib 100] [--data zero|random|gzip]

One upstream container (python's ssl, a certificate from a throwaway CA made here) answers as
rules.test and reads and drops what it is sent. Two `sandbox run`s (the launcher as users run it),
one per policy below, each upload SIZE bytes (curl -T, a Content-Length) in every round: zeros
(the service's best case), random bytes (an archive, an image: its worst ordinary case), or
random bytes sent as `Content-Encoding: gzip` (the service decodes them too). The figures are
medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from intercept import LISTEN, UPSTREAM_IMAGE, docker, make_certs  # noqa: E402

PREFIX = "sandbox-bench-keyupload"
LABEL = "dev.sandbox.bench=keyupload"

SERVER = r'''
import socket, ssl, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
def serve(conn):
    try:
        with ctx.wrap_socket(conn, server_side=True) as tls, tls.makefile("rb", buffering=1 << 20) as stream:
            head = {}
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                head[name.strip().lower()] = value.strip().lower()
            if "100-continue" in head.get("expect", ""):
                tls.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            got = 0
            if "chunked" in head.get("transfer-encoding", ""):
                while (size := int(stream.readline().split(b";")[0], 16)):
                    got += len(stream.read(size)); stream.readline()
                stream.readline()
            else:
                left = int(head.get("content-length", "0"))
                while left and (chunk := stream.read(min(left, 1 << 20))):
                    got += len(chunk); left -= len(chunk)
            body = b"%d %s\n" % (got, head.get("transfer-encoding", "length").encode())
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    except (OSError, ValueError) as exc:
        print("FAIL", exc, flush=True)
''' + LISTEN

POLICY = """version: 1
name: bench-keyupload
description: an upload through an intercepted rule, with or without a bound key
extends: [read-only]
tmpfs: [{{target: /tmp, size: {tmp}m}}]
network:
  mode: proxy
  allow:
    - {{host: rules.test, private: true, http: {{methods: [POST], paths: [/], ca_file: {ca}}}}}
ca_certificates: [{ca}]
limits: {{timeout: 30m}}
"""
KEY = """secrets:
  - name: bench
    env: SANDBOX_BENCH_KEY
    header: "Authorization: Bearer {value}"
    bind: {host: rules.test, variable: BENCH_KEY}
"""

# One line per upload: "<seconds> <bytes the upstream got>", every round.
DATA = {"zero": ("head -c {size} /dev/zero > /tmp/up", ""),
        "random": ("head -c {size} /dev/urandom > /tmp/up", ""),
        # gzip -1 of random bytes: about as large, and every byte still to decode
        "gzip": ("head -c $(({size} - {size} / 1000)) /dev/urandom | gzip -1 > /tmp/up", "-H 'Content-Encoding: gzip'")}
INSIDE = """{make}
size=$(wc -c < /tmp/up)
for i in $(seq {rounds}); do
  echo "$(curl -sS -o /tmp/got -w '%{{time_total}} %{{http_code}}' -X POST -H 'Expect:' {coding} -T /tmp/up {auth} https://rules.test/up) $(cat /tmp/got) $size"
done"""


def cleanup() -> None:
    for ls, rm in ((["ps", "-aq"], ["rm", "-f"]), (["network", "ls", "-q"], ["network", "rm"])):
        refs = docker(*ls, "--filter", f"label={LABEL}").split()
        if refs:
            docker(*rm, *refs, check=False)


def upload(root: Path, folder: Path, network: str, bound: bool, size: int, rounds: int, data: str) -> list[float]:
    policy = folder / f"policy-{bound}.yaml"
    policy.write_text(POLICY.format(ca=folder / "ca.pem", tmp=size // (1 << 20) + 32) + (KEY if bound else ""))
    auth = '-H "Authorization: Bearer $BENCH_KEY"' if bound else ""
    report = folder / f"report-{bound}.json"
    done = subprocess.run([sys.executable, "-m", "launcher", "run", "-p", str(policy), "--report", str(report),
                           "-w", str(root / "examples" / "untrusted-repo"), "--egress-network", network,
                           "--", "sh", "-c", INSIDE.format(make=DATA[data][0].format(size=size), coding=DATA[data][1],
                                                                      rounds=rounds, auth=auth)],
                          capture_output=True, text=True, cwd=root,
                          env={**os.environ, "SANDBOX_BENCH_KEY": "bench-real-key-" + os.urandom(8).hex()})
    if done.returncode:
        raise SystemExit(f"sandbox run: exit {done.returncode}\n{done.stderr[-2000:]}")
    times = []
    for line in done.stdout.splitlines():
        seconds, status, got, _, sent = (line.split() + ["-"] * 5)[:5]
        if status != "200" or got != sent:
            import json
            requests = json.loads(report.read_text())["egress"]["requests"]
            raise SystemExit(f"{'bound' if bound else 'unbound'}: {line}\n{done.stderr[-2000:]}\n{requests}")
        times.append(float(seconds))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--data", choices=sorted(DATA), default="zero")
    args = parser.parse_args()
    size = args.size_mib << 20
    root = Path(__file__).resolve().parent.parent
    docker("build", "-q", "-t", UPSTREAM_IMAGE, str(root / "images" / "upstream"))
    cleanup()
    network = f"{PREFIX}-net"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_certs(folder)
        try:
            docker("network", "create", "--internal", "--label", LABEL, network)
            up = docker("create", "--name", f"{PREFIX}-up", "--label", LABEL, "--network", network,
                        "--network-alias", "rules.test", UPSTREAM_IMAGE, "python3", "-u", "-c", SERVER)
            for name in ("cert.pem", "key.pem"):
                docker("cp", str(folder / name), f"{up}:/tmp/{name}")
            docker("start", up)
            times = {"unbound": upload(root, folder, network, False, size, args.rounds, args.data),
                     "bound": upload(root, folder, network, True, size, args.rounds, args.data)}
        finally:
            cleanup()
    mib = size / (1 << 20)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.rounds} rounds, {mib:.0f} MiB of {args.data} each, medians (all: {times})")
    for key, label in (("unbound", "intercepted, no bound key"), ("bound", "intercepted + key ICAP service")):
        t = medians[key]
        print(f"{label:32} {t:6.3f} s {mib / t:6.0f} MiB/s  vs no ICAP {medians['unbound'] / t:.2f}")


if __name__ == "__main__":
    main()
