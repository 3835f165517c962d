#!/bin/sh
# Every benchmark, one after another in one run, as the table of docs/benchmarks.md reports them:
#     sh bench/all.sh 2>&1 | tee bench.log        (about 25 minutes on 2 cores)
# PYTHON names the interpreter that has the launcher installed (default: python3).
set -eu
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
for step in "run.py --rounds 9" "proxy.py --rounds 5" "intercept.py --rounds 7" "squidtls.py --rounds 7" "parallel.py 50" "floor.py --rounds 15 --at-once 50" "agents.py --rounds 5" "workspace.py --rounds 3"; do
  echo "== bench/$step"
  # shellcheck disable=SC2086 - the step's words are its arguments
  $py bench/$step
done
