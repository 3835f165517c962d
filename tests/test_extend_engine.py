"""`sandbox extend` on a real engine: a session outlives its first end and ends after the new one,
its terminals are warned again; the ceiling (limits.session before --timeout) holds against
`extend` and against a forged end inside; the agent cannot write the end at all."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import BIND, read_until
from test_session_limits import ended, sandbox, terminal   # the same short-session tools
from launcher.plan.lifetime import END_FILE
from launcher.plan.plan import PROBE_BUSYBOX

pytestmark = pytest.mark.engine


def ceiling(seconds: str) -> str:
    """A user policy layer whose limits.session is `seconds`: the ceiling of the tests' sessions."""
    path = os.path.join(os.environ["XDG_CONFIG_HOME"], "sandbox", "policy.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        out.write(f"version: 1\nlimits:\n  session: {seconds}\n")
    return path


def listed(name: str) -> dict:
    return next(i for i in json.loads(sandbox("ls", "--json").stdout) if i["name"] == name and i["kind"] == "up")


def test_an_extended_session_outlives_its_first_end_and_ends_after_the_new_one(engine, workspace):
    name = "sandbox-test-extend"
    layer = ceiling("70s")
    try:
        started = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--timeout", "20s")
        assert started.returncode == 0, started.stderr
        created = listed(name)["ends"] - 20
        shell, primary = terminal(name, "sleep 120")
        try:
            first = read_until(primary, b"(limits.session)", 30)   # 10 s before the first end
            assert b"this sandbox stops in" in first, first
            done = sandbox("extend", name, "30s", "--json")
            assert done.returncode == 0, done.stderr
            said = json.loads(done.stdout)
            assert said["ok"] and said["sandbox"] == name and said["was"] == created + 20
            assert said["ends"] == created + 50 and said["latest"] == created + 70
            assert said["ceiling"] == 70 and said["ceiling_source"] == f"user {layer}"
            assert listed(name)["ends"] == created + 50   # ls follows the new end
            refused = sandbox("extend", name, "30s")   # 80 s after its start: past the 70 s ceiling
            assert refused.returncode == 120, refused.stderr
            assert f"user {layer}: limits.session" in refused.stderr and "ceiling, 70s after" in refused.stderr, refused.stderr
            assert "--timeout only shortens" in refused.stderr and "Traceback" not in refused.stderr
            while time.time() < created + 26:
                time.sleep(0.5)
            assert engine.inspect(name).running, "the session ended at its first end despite extend"
            again = read_until(primary, b"(limits.session)", 40)   # warned again before the new end
            assert b"this sandbox stops in" in again, again
            assert ended(engine, name, 40), "the extended session outlived its new end"
            assert time.time() >= created + 47, "the session ended before its new end"
        finally:
            shell.kill()
            os.close(primary)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stdout
        assert "the session ended: limits.session (" in logs, logs
    finally:
        sandbox("down", name)
    assert not engine.list(f"dev.sandbox.workspace={os.path.realpath(workspace)}")


def test_a_forged_end_inside_cannot_pass_the_ceiling_and_the_agent_cannot_write_one(engine, workspace):
    name = "sandbox-test-extend-forged"
    ceiling("25s")
    try:
        started = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--timeout", "10s")
        assert started.returncode == 0, started.stderr
        created = listed(name)["ends"] - 10
        agent = subprocess.run(["docker", "exec", name, "sh", "-c", f"echo {int(time.time()) + 3600} >{END_FILE}"],
                               capture_output=True, text=True)
        assert agent.returncode != 0, "the agent's user wrote the session's end"
        forged = subprocess.run(["docker", "exec", "-u", "0", name, PROBE_BUSYBOX, "sh", "-c",
                                 f"echo {int(time.time()) + 3600} >{END_FILE}"], capture_output=True, text=True)
        assert forged.returncode == 0, forged.stderr   # what only root inside (or the host) can do
        while time.time() < created + 14:
            time.sleep(0.5)
        assert engine.inspect(name).running, "the loop did not read the end written by root"
        # ends at its ceiling (start + 25 s; start is after the probe, later than created under
        # load): a generous bound, still far below the forged end's hour
        if not ended(engine, name, 60):   # seen twice in loaded rehearsals, never alone: say what it ran
            seen = [subprocess.run(argv, capture_output=True, text=True).stdout[-3000:] for argv in (
                ["docker", "inspect", "-f", "{{json .Args}} {{json .Config.Labels}} {{.State.StartedAt}}", name],
                ["docker", "logs", name],
                ["docker", "exec", "-u", "0", name, PROBE_BUSYBOX, "sh", "-c", f"date +%s; cat {END_FILE}; ps -o pid,args"])]
            pytest.fail(f"a forged end took the session past its ceiling (created {created:.0f}, now "
                        f"{time.time():.0f}):\n" + "\n".join(seen))
        assert time.time() < created + 25 + 60
    finally:
        sandbox("down", name)
    assert not engine.list(f"dev.sandbox.workspace={os.path.realpath(workspace)}")
