"""Benchmark (not a test): `sandbox run -- true` against plain `docker run --rm` with the same flags.

Prints medians from one run so the ratio compares like with like on this machine:
    python bench/run.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def timed(argv: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - start


def median_of(rounds: int, argv: list[str], **kwargs) -> float:
    return statistics.median(timed(argv, **kwargs) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    sandbox = [sys.executable, "-m", "launcher"]
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        os.chown(ws, 1000, 1000) if os.geteuid() == 0 else None
        common = ["--policy", "untrusted", "--workspace-mode", "bind", "--workspace", ws]
        subprocess.run(sandbox + ["run", *common, "--", "true"], check=True)  # builds images once
        plan = json.loads(subprocess.run(sandbox + ["compile", *common, "--", "true"], check=True,
                                         capture_output=True, text=True).stdout)
        argv = subprocess.run(sandbox + ["compile", *common, "--format", "argv", "--", "true"], check=True,
                              capture_output=True, text=True).stdout
        import shlex

        probed = shlex.split(argv)
        probed[probed.index("--name") + 1] += "-bench"
        # Plain docker run: same flags and image, the agent command straight away, no probe.
        image_at = probed.index(plan["container"]["image"])
        plain = probed[:probed.index("--entrypoint")] + ["--entrypoint", "true", plan["container"]["image"]]
        docker_plain = median_of(args.rounds, plain)
        docker_probed = median_of(args.rounds, probed[:image_at + 1] + probed[image_at + 1:])
        ours = median_of(args.rounds, sandbox + ["run", *common, "--", "true"])
        compile_s = median_of(args.rounds, sandbox + ["compile", *common, "--", "true"])
        import_s = median_of(args.rounds, [sys.executable, "-c", "import launcher.cli"])
    print(f"rounds per figure:                          {args.rounds}")
    print(f"docker run --rm, same flags, no probe:      {docker_plain:.3f} s")
    print(f"docker run --rm, same flags, with probe:    {docker_probed:.3f} s")
    print(f"sandbox run --policy untrusted -- true:     {ours:.3f} s")
    print(f"ratio sandbox run / plain docker run:       {ours / docker_plain:.2f}")
    print(f"ratio sandbox run / docker run with probe:  {ours / docker_probed:.2f}")
    print(f"sandbox compile:                            {compile_s:.3f} s")
    print(f"python -c 'import launcher.cli':            {import_s:.3f} s")
    if shutil.which("docker") is None:
        print("note: no docker CLI found", file=sys.stderr)


if __name__ == "__main__":
    main()
