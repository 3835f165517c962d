"""Benchmark (not a test): copy mode's copy of a workspace against `cp -a` of the same tree.

Generates a repository of --files files and --size bytes in all (default 100 000 files, 1 GiB)
in a scratch directory, then times, alternating, in one run:
  - cp -a of it to a sibling directory (removed after each round);
  - the launcher making a copy (launcher.copies.store.prepare: the tree into a volume owned by the
    agent's uid, the overlay volumes, checkpoint 0), discarded after each round.
Prints the medians and their ratio as JSON:
    python bench/workspace.py [--rounds 3] [--files 100000] [--size 1g]
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from launcher import labels as label  # noqa: E402
from launcher.copies import store  # noqa: E402
from launcher.engine import engine as engine_mod, images  # noqa: E402
from launcher.plan.plan import CopySpec  # noqa: E402


def generate(root: str, files: int, size: int) -> None:
    """files files of equal size in directories of 100, like a source tree with many small files."""
    each = max(1, size // files)
    block = os.urandom(1 << 20)
    for n in range(files):
        folder = os.path.join(root, f"pkg{n // 100:04d}")
        if n % 100 == 0:
            os.makedirs(folder)
        start = (n * 7919) % (len(block) - each) if each < len(block) else 0
        with open(os.path.join(folder, f"mod{n % 100:03d}.py"), "wb") as out:
            out.write(block[start:start + each])


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--size", default="1g", help="total bytes: a number with k, m or g")
    args = parser.parse_args()
    size = int(args.size[:-1]) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[args.size[-1]] \
        if args.size[-1] in "kmg" else int(args.size)
    eng = engine_mod.connect()
    images.build(eng, images.agent_image(), lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-ws-") as tmp:
        src = os.path.join(tmp, "repo")
        os.mkdir(src)
        print(f"generating {args.files} files, {size} bytes in {src}", file=sys.stderr)
        generate(src, args.files, size)
        subprocess.run(["sync"], check=True)
        spec = CopySpec(name=f"sandbox-bench-copy-{os.getpid()}", source=src, uid=1000, gid=1000, exclude=(),
                        protected=(), labels=((label.MANAGED, "1"), (label.KIND, "copy"), (label.WORKSPACE, src)))
        cp_times, copy_times = [], []
        for _ in range(args.rounds):
            dst = os.path.join(tmp, "cp-a")
            cp_times.append(timed(lambda: subprocess.run(["cp", "-a", src, dst], check=True)))
            shutil.rmtree(dst)
            copy_times.append(timed(lambda: store.prepare(eng, spec, lambda m: None)))
            store.discard(eng, spec.name)
    cp_median, copy_median = statistics.median(cp_times), statistics.median(copy_times)
    print(json.dumps({"files": args.files, "bytes": size, "rounds": args.rounds,
                      "cp_a_seconds": round(cp_median, 2), "sandbox_copy_seconds": round(copy_median, 2),
                      "ratio": round(copy_median / cp_median, 2)}, indent=2))


if __name__ == "__main__":
    main()
