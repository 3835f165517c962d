"""Benchmark (not a test): N sandboxes started at once, each probed and running a short command.

    python bench/parallel.py N [--modes none,proxy] [--layouts separate,shared] [--helper]

For each network mode (none: the untrusted preset; proxy: the ci preset, each sandbox with its own
proxy and networks) and each layout (separate: one workspace each; shared: all N on one workspace,
bind mode, which goes through the workspace lock and placeholder registry), N `sandbox run` are
started together. Prints the total wall time, the per-sandbox median and worst, the failures (with
their last lines), and what was left behind: containers, networks and volumes with our labels and
this run's names, any file left in the workspaces, and placeholders still registered for them. Leftovers must be zero.
--helper hands every `sandbox run` to a resident helper (`sandbox helper start`, on a runtime
directory of this run's own, stopped after): N interpreter starts and imports saved, the pipeline
and the probe still run per sandbox.
The shared egress network (`sandbox-egress`, Docker's proxy mode) is kept by design: it is not a
leftover, but any container of this run still on it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launcher import labels as label  # noqa: E402
from launcher.host import workspaces as registry  # noqa: E402
from launcher.plan.networks import SHARED_EGRESS  # noqa: E402

SANDBOX = [sys.executable, "-m", "launcher"]
POLICY = {"none": ["-p", "untrusted"], "proxy": ["-p", "ci"]}


def one(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    ok = result.returncode == 0 and "sandbox-ok" in result.stdout
    tail = "" if ok else " | ".join((result.stderr.strip().splitlines() or ["(no output)"])[-3:])
    return time.perf_counter() - start, (0 if ok else result.returncode or 1), tail


def leftovers(tag: str) -> list[str]:
    found = []
    for kind, argv in (("container", ["ps", "-a"]), ("network", ["network", "ls"]), ("volume", ["volume", "ls"])):
        out = subprocess.run(["docker", *argv, "--filter", f"label={label.MANAGED_SELECTOR}", "--format",
                              "{{.Name}}" if kind == "volume" else "{{.Names}}" if kind == "container" else "{{.Name}}"],
                             capture_output=True, text=True, check=True).stdout.split()
        found += [f"{kind} {name}" for name in out if tag in name]
    # the shared egress network stays (made once, kept: docs/egress.md); what of this run is on it does not
    shared = subprocess.run(["docker", "network", "inspect", SHARED_EGRESS, "--format",
                             "{{range .Containers}}{{.Name}} {{end}}"], capture_output=True, text=True)
    found += [f"on network {SHARED_EGRESS}: container {name}" for name in shared.stdout.split() if tag in name]
    return found


def tree(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), path) for d, dirs, files in os.walk(path) for f in dirs + files}


def batch(n: int, mode: str, layout: str, tmp: str, tag: str, env: dict[str, str] | None) -> dict:
    workspaces = []
    for i in range(n if layout == "separate" else 1):
        ws = os.path.join(tmp, f"{tag}-{mode}-{layout}-{i}")
        os.mkdir(ws)
        with open(os.path.join(ws, "README"), "w") as out:
            out.write("bench\n")
        if os.geteuid() == 0:
            os.chown(ws, 1000, 1000)
        workspaces.append(ws)
    before = {ws: tree(ws) for ws in workspaces}
    argvs = [SANDBOX + ["run", *POLICY[mode], "--workspace-mode", "bind", "-w", workspaces[i % len(workspaces)],
                        "--", "sh", "-c", "echo sandbox-ok"] for i in range(n)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda argv: one(argv, env), argvs))
    wall = time.perf_counter() - start
    changed = [f"{ws}: {sorted(tree(ws) ^ before[ws])}" for ws in workspaces if tree(ws) != before[ws]]
    changed += [f"{ws}: registered placeholders {registry.placeholders(ws)}" for ws in workspaces
                if registry.placeholders(ws)]
    return {"wall": wall, "times": [r[0] for r in results], "failures": [r for r in results if r[1]],
            "left": leftovers(tag) + changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("--modes", default="none,proxy")
    parser.add_argument("--layouts", default="separate,shared")
    parser.add_argument("--helper", action="store_true", help="every sandbox run through a resident helper")
    args = parser.parse_args()
    tag = "par" + uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        # as run.py: without PYTHONDONTWRITEBYTECODE (set on these machines), so the launcher keeps its
        # compiled dataclass code and squid.conf renderings as on a machine without it
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        if args.helper:   # the helper's XDG_RUNTIME_DIR: this run's own (0700), so no other helper answers
            runtime = os.path.join(tmp, "runtime")
            os.mkdir(runtime, 0o700)
            env |= {"XDG_RUNTIME_DIR": runtime, "SANDBOX_HELPER": "on"}
            subprocess.run(SANDBOX + ["helper", "start"], check=True, env=env, cwd=ROOT)
        try:
            bad = _batches(args, tmp, tag, env)
        finally:
            if args.helper:
                subprocess.run(SANDBOX + ["helper", "stop"], env=env, cwd=ROOT)
    sys.exit(1 if bad else 0)


def _batches(args, tmp: str, tag: str, env: dict[str, str]) -> int:
    warm = os.path.join(tmp, "warm")
    os.mkdir(warm)
    if os.geteuid() == 0:
        os.chown(warm, 1000, 1000)
    for mode in args.modes.split(","):    # builds whatever image is missing, outside the timing
        subprocess.run(SANDBOX + ["run", *POLICY[mode], "--workspace-mode", "bind", "-w", warm, "--", "true"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"{args.n} sandboxes at once, {os.cpu_count()} cores; sandbox run ... -- sh -c 'echo sandbox-ok'"
          + (" (through the resident helper)" if args.helper else ""))
    bad = 0
    for mode in args.modes.split(","):
        for layout in args.layouts.split(","):
            r = batch(args.n, mode, layout, tmp, tag, env)
            times = sorted(r["times"])
            print(f"{mode:5} {layout:8}  total {r['wall']:6.1f} s  per sandbox median {statistics.median(times):5.1f} s"
                  f"  worst {times[-1]:5.1f} s  failures {len(r['failures'])}  leftovers {len(r['left'])}",
                  flush=True)
            for _t, code, tail in r["failures"][:5]:
                print(f"    failed (exit {code}): {tail[:400]}")
            for item in r["left"][:10]:
                print(f"    left: {item}")
            bad += len(r["failures"]) + len(r["left"])
    return bad


if __name__ == "__main__":
    main()
