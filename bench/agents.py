"""Benchmark (not a test): time from `sandbox run --agent claude-code --model-key-env VAR` to the
stand-in model API's first request, in the default preset (untrusted: a copy, proxy mode for the
model API alone) and in `ci` (bind mode), against the same CLI in a plain `docker run` (same image,
a writable tmpfs home, the key in its environment, straight to the model API) in one run, alternating:
    python bench/agents.py [--rounds 5] [--agent claude-code]
The stand-in (images/model-api) logs each request with its wall-clock time; both runs start on the
same host, so the difference of the two clocks is the time to the first request.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from launcher import agents
from launcher.engine import engine as engine_mod, images  # noqa: E402

UPSTREAM = "api.test"


def docker(*argv: str, check: bool = True) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=check).stdout


def first_request(model_api: str, started: float) -> float:
    posts = [json.loads(line) for line in docker("exec", model_api, "cat", "/tmp/requests.jsonl").splitlines()]
    return min(p["time"] for p in posts if p["method"] == "POST") - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--agent", default="claude-code")
    args = parser.parse_args()
    profile = agents.get(args.agent)
    eng = engine_mod.connect()
    say = lambda line: print(line, file=sys.stderr)   # noqa: E731
    image = images.build_agent(eng, profile.image, say, images.extra_ca_files()).tag
    images.build(eng, images.model_api_image(), say)
    key, network = "bench-" + uuid.uuid4().hex, f"sandbox-bench-agents-{os.getpid()}"
    model_api = f"{network}-model-api"
    task = [a.replace("{task}", "Create the marker file.") for a in profile.headless]
    docker("network", "create", "--internal", network)
    try:
        docker("run", "-d", "--name", model_api, "--network", network, "--network-alias", UPSTREAM,
               "-e", f"MODEL_API_EXPECTED_KEY={key}", images.model_api_image().tag)
        time.sleep(1)
        plain_env = {**profile.environment(f"http://{UPSTREAM}"), profile.model.key_env or "MODEL_KEY": key}
        times_of: dict[str, list[float]] = {"plain": [], "untrusted": [], "ci": []}
        with tempfile.TemporaryDirectory(prefix="sandbox-bench-agents-") as tmp:
            os.chmod(tmp, 0o755)
            for n in range(args.rounds):
                for kind, times in times_of.items():
                    ws = os.path.join(tmp, f"{kind}{n}")
                    os.mkdir(ws)
                    os.chown(ws, 1000, 1000)
                    docker("exec", model_api, "sh", "-c", ": > /tmp/requests.jsonl")
                    started = time.time()
                    if kind == "plain":
                        argv = ["docker", "run", "--rm", "--network", network, "--read-only", "-u", "1000:1000",
                                "--tmpfs", "/tmp", "--tmpfs", "/home/agent:uid=1000,gid=1000,mode=0700",
                                "-e", "HOME=/home/agent", *[f"-e{k}={v}" for k, v in plain_env.items()],
                                "-v", f"{ws}:/workspace", "-w", "/workspace", image, *task]
                        env = None
                    else:
                        argv = [sys.executable, "-m", "launcher", "run", "--policy", kind, "--agent", args.agent,
                                "--model-key-env", "MODEL_KEY", "--model-upstream", f"http://{UPSTREAM}",
                                "--name", f"{network}-{n}", "--egress-network", network, "-w", ws, "--", *task]
                        env = {**os.environ, "MODEL_KEY": key}
                    subprocess.run(argv, check=True, capture_output=True, env=env)
                    times.append(first_request(model_api, started))
                    if kind == "untrusted":   # the copy holds the marker: drop it
                        subprocess.run([sys.executable, "-m", "launcher", "discard", f"{network}-{n}"],
                                       check=True, capture_output=True)
    finally:
        docker("rm", "-f", model_api, check=False)
        docker("network", "rm", network, check=False)
    medians = {kind: statistics.median(times) for kind, times in times_of.items()}
    print(json.dumps({"agent": args.agent, "rounds": args.rounds,
                      **{f"{kind}_first_request_s": round(s, 2) for kind, s in medians.items()},
                      **{f"{kind}_ratio": round(medians[kind] / medians["plain"], 2) for kind in ("untrusted", "ci")}},
                     indent=2))


if __name__ == "__main__":
    main()
