"""Benchmark (not a test): how long a sandbox takes to start, against plain `docker run`.

    python bench/run.py [--rounds 9] [--compare DIR] [--modes none,proxy,copy] [--helper] [--probe-volume]
                        [--default-egress]

One run measures, round after round, each command once per round in a shuffled order (so a busy
machine slows every figure alike, and no command always follows the same one: the engine still
tidies up after a `docker run --rm` that has returned):
  plain    docker run --rm with the flags `sandbox compile --format argv` prints, the command
           straight away (no probe)
  probed   the same docker run with the probe in front (what the probe itself costs)
  none     sandbox run --policy untrusted --workspace-mode bind -- true
  proxy    sandbox run --policy ci --workspace-mode bind --allow files.test -- true (proxy mode;
           the proxy's outside network is one this script made, internal, unless --default-egress)
  copy     sandbox run --policy untrusted -- true (copy mode: the copy made, then dropped unchanged)
  srt      `srt true`, Anthropic's sandbox-runtime (bubblewrap), the peer to beat, when `srt` is on PATH
on a small repository (examples/untrusted-repo with one commit), and prints medians, the ratios
none/plain, proxy/none and copy/none, and the median of each launch phase
(SANDBOX_TIMINGS=1). --compare DIR runs the launcher in DIR (a checkout of another commit) in the
same rounds as well, for before/after figures from one run; --helper measures this tree through
its resident helper too (`helper` rows, and `compare helper` ones with --compare; the others run
with SANDBOX_HELPER=off), --probe-volume
with the shared probe volume (`volume` rows: what the launcher's own probe directory saves). The
launcher runs byte-compiled, as an installed one does (PYTHONDONTWRITEBYTECODE is dropped for it).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NET = f"sandbox-bench-start-{os.getpid()}"


def env_for(tree: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree), "SANDBOX_TIMINGS": "1", "SANDBOX_HELPER": "off", **(extra or {})}


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    # run in the launcher's own tree: `python -m` puts the working directory first on sys.path,
    # before PYTHONPATH, so from another checkout's root --compare would measure that checkout
    cwd = env["PYTHONPATH"] if env and "PYTHONPATH" in env else None
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr}")
    return seconds, done.stderr


def phases(stderr: str) -> dict[str, float]:
    """The --timings table: phase name -> milliseconds."""
    table, inside = {}, False
    for line in stderr.splitlines():
        if line.startswith("sandbox: timings"):
            inside = True
        elif inside and line.startswith("  "):
            parts = line.split()
            table["total" if parts[0] == "total" else " ".join(parts[:-2])] = float(parts[-1])
    return table


def small_repository(ws: str) -> None:
    """examples/untrusted-repo with one commit, owned by the agent's uid (bind mode writes there)."""
    shutil.copytree(ROOT / "examples" / "untrusted-repo", ws)
    git = ["git", "-C", ws, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "start"], check=True)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "1000:1000", ws], check=True)


def docker_argvs(sandbox: list[str], env: dict[str, str], common: list[str]) -> tuple[list[str], list[str]]:
    import json

    plan = json.loads(subprocess.run(sandbox + ["compile", *common, "--", "true"], check=True, env=env,
                                     capture_output=True, text=True).stdout)
    probed = shlex.split(subprocess.run(sandbox + ["compile", *common, "--format", "argv", "--", "true"], check=True,
                                        env=env, capture_output=True, text=True).stdout)
    at = probed.index("--name")   # none: the engine names each one (`--rm` may still be removing the last)
    del probed[at:at + 2]
    plain = probed[:probed.index("--entrypoint")] + ["--entrypoint", "true", plan["container"]["image"]]
    return plain, probed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--compare", type=Path, help="another launcher tree, measured in the same rounds")
    parser.add_argument("--modes", default="none,proxy,copy",
                        help="the launcher's modes to measure (comma-separated; fewer: more rounds in the same time)")
    parser.add_argument("--helper", action="store_true",
                        help="this tree (and the --compare tree) through its own resident helper as well "
                             "(`sandbox helper start`, stopped after)")
    parser.add_argument("--probe-volume", action="store_true",
                        help="this tree with SANDBOX_PROBE_VOLUME=1 as well (the shared probe volume, read "
                             "through the engine's archive API, instead of the launcher's own directory)")
    parser.add_argument("--default-egress", action="store_true",
                        help="proxy mode with the egress bridge each sandbox makes (its outside network)")
    args = parser.parse_args()
    sandbox = [sys.executable, "-m", "launcher"]
    runtime = tempfile.mkdtemp(prefix="sandbox-bench-run-")   # the helper's XDG_RUNTIME_DIR (0700)
    trees = {"": (ROOT, {}), **({"compare ": (args.compare.resolve(), {})} if args.compare else {}),
             **({"volume ": (ROOT, {"SANDBOX_PROBE_VOLUME": "1"})} if args.probe_volume else {})}
    # --helper: each tree's own helper, in a runtime directory of its own
    helpers = {f"{label}helper ": (tree, {"XDG_RUNTIME_DIR": os.path.join(runtime, label.strip() or "this"),
                                          "SANDBOX_HELPER": "on"})
               for label, (tree, extra) in trees.items() if args.helper and label in ("", "compare ")}
    for tree, extra in helpers.values():
        os.mkdir(extra["XDG_RUNTIME_DIR"], 0o700)
        subprocess.run(sandbox + ["helper", "start"], check=True, env=env_for(tree, extra), cwd=tree)
    trees.update(helpers)
    if not args.default_egress:
        subprocess.run(["docker", "network", "create", "--internal", NET], check=True, capture_output=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = os.path.join(tmp, "ws")
            small_repository(ws)
            none = ["run", "--policy", "untrusted", "--workspace-mode", "bind", "--workspace", ws, "--", "true"]
            proxy = ["run", "--policy", "ci", "--workspace-mode", "bind", "--workspace", ws, "--allow", "files.test",
                     *([] if args.default_egress else ["--egress-network", NET]), "--", "true"]
            plain, probed = docker_argvs(sandbox, env_for(ROOT), none[1:7])
            runs: dict[str, tuple[list[str], dict | None]] = {"docker plain": (plain, None),
                                                              "docker probed": (probed, None)}
            copy = ["run", "--policy", "untrusted", "--workspace-mode", "copy", "--workspace", ws, "--", "true"]
            if shutil.which("srt"):
                runs["srt true"] = ([shutil.which("srt"), "true"], None)
            modes = {"none": none, "proxy": proxy, "copy": copy}
            for label, (tree, extra) in trees.items():
                for mode in args.modes.split(","):
                    runs[f"{label}{mode}"] = (sandbox + modes[mode], env_for(tree, extra))
            # once each, the launcher's first: builds images, writes byte code, fills the probe
            # volume that `docker probed` (compile --format argv) names
            for name, (argv, env) in sorted(runs.items(), key=lambda item: item[0].startswith("docker")):
                timed(argv, env)
            wall: dict[str, list[float]] = {name: [] for name in runs}
            table: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
            for r in range(args.rounds):
                # Shuffled each round (seeded: the same order on a rerun): what ran just before
                # must not always slow the same command.
                order = list(runs)
                random.Random(r).shuffle(order)
                for name in order:
                    argv, env = runs[name]
                    seconds, err = timed(argv, env)
                    wall[name].append(seconds)
                    table[name].append(phases(err))
                    if name.startswith(tuple(helpers)) and "helper" not in table[name][-1]:
                        # the client ran it in-process: its helper is of another build now
                        raise SystemExit(f"bench: `{name}` ran without its helper: a file of that tree "
                                         "changed during the run (its helper is stale); run it again")
            py = [timed([sys.executable, "-c", "pass"])[0] for _ in range(args.rounds)]
            imp = [timed([sys.executable, "-c", "import launcher.cli"], env_for(ROOT))[0] for _ in range(args.rounds)]
            dock = [timed([sys.executable, "-c", "import docker"])[0] for _ in range(args.rounds)]
    finally:
        if not args.default_egress:
            subprocess.run(["docker", "network", "rm", NET], capture_output=True)
        for tree, extra in helpers.values():
            subprocess.run(sandbox + ["helper", "stop"], env=env_for(tree, extra), cwd=tree)
        shutil.rmtree(runtime, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in wall.items()}
    print(f"rounds: {args.rounds} (medians; each round runs every command once, in a shuffled order)")
    for name, value in med.items():
        print(f"  {name:<22} {value:6.3f} s")
    print(f"  {'python -c pass':<22} {statistics.median(py):6.3f} s")
    print(f"  {'import launcher.cli':<22} {statistics.median(imp):6.3f} s")
    print(f"  {'import docker':<22} {statistics.median(dock):6.3f} s")
    if "srt true" in med:
        print(f"srt true / docker plain  {med['srt true'] / med['docker plain']:.2f}")
    for label in trees:
        ratios = [(f"{a} / {b}", med[label + a] if a in modes else med[a], med[label + b] if b in modes else med[b])
                  for a, b in (("none", "docker plain"), ("none", "docker probed"), ("copy", "docker plain"),
                               ("proxy", "none"), ("copy", "none"))
                  if all(x in modes and label + x in med or x.startswith("docker") for x in (a, b))]
        print(f"{label or 'this '}tree: " + "   ".join(f"{name}  {x / y:.2f}" for name, x, y in ratios))
    print("phase medians, ms (proxy-mode phases overlap; 'total' is the launcher's own clock):")
    names = [n for n in runs if table[n] and table[n][0]]
    keys = list(dict.fromkeys(k for n in names for row in table[n] for k in row))
    widths = [max(16, len(n) + 2) for n in names]
    print(f"  {'':<14}" + "".join(f"{n:>{w}}" for n, w in zip(names, widths)))
    for key in keys:
        cells = [statistics.median([row[key] for row in table[n] if key in row] or [float("nan")]) for n in names]
        print(f"  {key:<14}" + "".join(f"{c:{w}.1f}" for c, w in zip(cells, widths)))


if __name__ == "__main__":
    main()
