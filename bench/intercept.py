"""Benchmark (not a test): HTTPS download throughput through a sandbox's proxy for a host with
`http:` rules (TLS terminated and judged by the proxy) against a plain CONNECT tunnel to the same
upstream and a direct download, all in one run; only this machine's own containers.

    python bench/intercept.py [--rounds 5] [--size-mib 100] [--proxy-image IMAGE]

One upstream container (python's ssl, a certificate from a throwaway CA made here) answers as
rules.test and tunnel.test on an internal network. One `sandbox run` (the launcher as users run
it) with the policy below downloads /big through both rules in every round; a plain container on
that network downloads it directly. The figures are medians of the rounds. `--proxy-image IMAGE`
(another build of the proxy image, e.g. on another Debian release) adds a second `sandbox run` in
the same bench run whose proxy is IMAGE: the launcher runs from a copy of this checkout whose
images/proxy differs by one file, and IMAGE is tagged with that copy's proxy tag.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PREFIX = "sandbox-bench-intercept"
LABEL = "dev.sandbox.bench=intercept"
AGENT = "sandbox/agent:bookworm"
UPSTREAM_IMAGE = "sandbox-test/upstream:1"

# The end of a TLS upstream's script: listen on 443, say READY, serve each connection in a thread.
LISTEN = r'''
sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("0.0.0.0", 443)); sock.listen(16)
print("READY", flush=True)
while True:
    threading.Thread(target=serve, args=(sock.accept()[0],), daemon=True).start()
'''

SERVER = r'''
import os, socket, ssl, threading
size = int(os.environ["SIZE"])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/tmp/cert.pem", "/tmp/key.pem")
chunk = b"x" * (1 << 20)
def serve(conn):
    try:
        with ctx.wrap_socket(conn, server_side=True) as tls:
            while b"\r\n\r\n" not in tls.recv(65536):
                pass
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
            left = size
            while left:
                left -= tls.send(chunk[:min(left, len(chunk))])
    except OSError:
        pass
''' + LISTEN

POLICY = """version: 1
name: bench-intercept
description: rules per request vs a tunnel, our own upstream
extends: [read-only]
network:
  mode: proxy
  allow:
    - {{host: rules.test, private: true, http: {{methods: [GET], paths: [/], ca_file: {ca}}}}}
    - {{host: tunnel.test, private: true}}
ca_certificates: [{ca}]
limits: {{timeout: 30m}}
"""

# One line per download: "<which> <seconds>", every round.
INSIDE = """for i in $(seq {rounds}); do
  for which in rules tunnel; do
    echo "$which $(curl -sS -o /dev/null -w '%{{time_total}} %{{size_download}}' https://$which.test/big)"
  done
done"""


def docker(*args: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, input=stdin)
    if check and done.returncode:
        raise SystemExit(f"docker {' '.join(args)[:200]}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def make_certs(folder: Path, names: tuple[str, ...] = ("rules.test", "tunnel.test")) -> None:
    """A throwaway CA and one certificate for all of `names` (openssl on this host)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
        "-subj", "/CN=bench CA", "-keyout", "ca.key", "-out", "ca.pem")
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=rules.test",
        "-keyout", "key.pem", "-out", "req.pem")
    (folder / "san.cnf").write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
    ssl("x509", "-req", "-in", "req.pem", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-extfile", "san.cnf", "-out", "cert.pem")


def cleanup() -> None:
    for ls, rm in ((["ps", "-aq"], ["rm", "-f"]), (["network", "ls", "-q"], ["network", "rm"])):
        refs = docker(*ls, "--filter", f"label={LABEL}").split()
        if refs:
            docker(*rm, *refs, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--proxy-image", default="", help="also measure the launcher with this proxy image")
    args = parser.parse_args()
    size = args.size_mib << 20
    root = Path(__file__).resolve().parent.parent
    docker("build", "-q", "-t", UPSTREAM_IMAGE, str(root / "images" / "upstream"))
    cleanup()
    network = f"{PREFIX}-net"
    runs = [("", root)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_certs(folder)
        try:
            docker("network", "create", "--internal", "--label", LABEL, network)
            up = docker("create", "--name", f"{PREFIX}-up", "--label", LABEL, "--network", network,
                        "--network-alias", "rules.test", "--network-alias", "tunnel.test", "-e", f"SIZE={size}",
                        UPSTREAM_IMAGE, "python3", "-u", "-c", SERVER)
            for name in ("cert.pem", "key.pem"):
                docker("cp", str(folder / name), f"{up}:/tmp/{name}")
            docker("start", up)
            direct = docker("run", "-d", "--label", LABEL, "--network", network, "--user", "1000:1000",
                            "--entrypoint", "sleep", AGENT, "infinity")
            docker("cp", str(folder / "ca.pem"), f"{direct}:/tmp/ca.pem")
            (folder / "policy.yaml").write_text(POLICY.format(ca=folder / "ca.pem"))
            times: dict[str, list[float]] = {"direct": [], "rules": [], "tunnel": []}
            if args.proxy_image:
                runs.append(("other ", other_checkout(root, folder / "other", args.proxy_image)))
                times.update({"other rules": [], "other tunnel": []})
            for _ in range(args.rounds):
                out = docker("exec", direct, "curl", "-sS", "-o", "/dev/null", "--cacert", "/tmp/ca.pem",
                             "-w", "%{time_total} %{size_download}", "https://rules.test/big")
                seconds, got = out.split()
                if int(got) != size:
                    raise SystemExit(f"direct download got {got} bytes")
                times["direct"].append(float(seconds))
            inside = INSIDE.format(rounds=args.rounds)
            for prefix, checkout in runs:
                done = subprocess.run([sys.executable, "-m", "launcher", "run", "-p", str(folder / "policy.yaml"),
                                       "-w", str(root / "examples" / "untrusted-repo"), "--egress-network", network,
                                       "--", "sh", "-c", inside], capture_output=True, text=True, cwd=checkout)
                if done.returncode:
                    raise SystemExit(f"sandbox run: exit {done.returncode}\n{done.stderr[-2000:]}")
                for line in done.stdout.splitlines():
                    which, seconds, got = line.split()
                    if int(float(got)) != size:
                        raise SystemExit(f"{which}: got {got} bytes\n{done.stderr[-2000:]}")
                    times[prefix + which].append(float(seconds))
        finally:
            cleanup()
            for prefix, checkout in runs[1:]:   # the borrowed tag: no sandbox/proxy tag on another image
                docker("rmi", (checkout / "proxy-tag").read_text().strip(), check=False)
    mib = size / (1 << 20)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.rounds} rounds, {mib:.0f} MiB each, medians")
    for prefix in ("", "other ") if args.proxy_image else ("",):
        if prefix:
            print(f"with {args.proxy_image}:")
        for key, label in (("direct", "direct"), ("tunnel", "CONNECT tunnel"), ("rules", "intercepted (http: rules)")):
            t = medians[prefix + key if key != "direct" else key]
            print(f"{label:28} {t:6.3f} s {mib / t:6.0f} MiB/s  vs direct {medians['direct'] / t:.2f}"
                  f"  vs tunnel {medians[prefix + 'tunnel'] / t:.2f}")


def other_checkout(root: Path, dest: Path, image: str) -> Path:
    """A copy of the launcher and its images whose proxy context differs by one file, so its proxy
    tag is its own; `image` gets that tag (the launcher then finds it and builds nothing)."""
    for name in ("launcher", "images", "policies", "examples"):
        shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "images" / "proxy" / "bench-other").write_text(image + "\n")
    tag = subprocess.run([sys.executable, "-c", "from launcher.engine import images; print(images.proxy_image().tag)"],
                         capture_output=True, text=True, check=True, cwd=dest).stdout.strip()
    docker("tag", image, tag)
    (dest / "proxy-tag").write_text(tag + "\n")
    return dest


if __name__ == "__main__":
    main()
