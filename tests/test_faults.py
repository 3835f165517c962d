"""Faults against the real engine: the container killed mid-run, Ctrl-C at every phase of a launch,
twenty sandboxes at once, and the agent's work surviving a stop. Nothing of ours may be left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BIND, docker_sdk, preset

from fakes import Recorder
from launcher.engine import images
from launcher.errors import ExitCode
from launcher.host import hostfacts
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import with_allowed
from launcher.selftest.testnet import Internet

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def leftovers(engine, workspace) -> list[str]:
    label = f"dev.sandbox.workspace={os.path.realpath(workspace)}"
    return sorted(["/" + c.name for c in engine.list(label)] + [n.name for n in engine.list_networks(label)])


def volumes(engine) -> set[str]:
    return {v.name for v in engine.list_volumes()}


def start(workspace, *args) -> subprocess.Popen:
    return subprocess.Popen(SANDBOX + ["run", *BIND, "-w", str(workspace), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(proc, text: str) -> None:
    for line in proc.stderr:
        if text in line:
            return
    raise AssertionError(f"never saw {text!r}")


@pytest.fixture(scope="module")
def internet(engine):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    net = Internet(engine, f"sandbox-test-faults-{os.getpid()}")
    yield net
    net.close()


def test_the_container_killed_mid_run_reports_its_exit_code_and_leaves_nothing(engine, workspace):
    proc = start(workspace, "--", "sleep", "120")
    wait_for(proc, "probe passed")
    running = [c for c in engine.list(f"dev.sandbox.workspace={workspace}") if c.state == "running"]
    docker_sdk().api.kill(running[0].id)
    assert proc.wait(timeout=60) == 137
    assert leftovers(engine, workspace) == []


class Interrupting:
    """The real engine, but Ctrl-C arrives right after the n-th call of one method returned."""

    def __init__(self, engine, method: str, nth: int = 1):
        self.engine, self.method, self.nth, self.calls = engine, method, nth, 0

    def __getattr__(self, name):
        attr = getattr(self.engine, name)
        if name != self.method:
            return attr

        def wrapped(*args, **kwargs):
            result = attr(*args, **kwargs)
            self.calls += 1
            if self.calls == self.nth:
                raise KeyboardInterrupt
            return result
        return wrapped


PHASES = {
    "networks created": ("create_network", 1),
    "proxy created": ("create_proxy", 1),
    "proxy started": ("start", 1),
    "sandbox created": ("create", 1),
    "probing": ("start", 2),
    "agent finished": ("wait", 1),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_at_every_phase_leaves_nothing(engine, internet, workspace, phase):
    before, listing = volumes(engine), sorted(os.listdir(workspace))
    policy = with_allowed(preset("ci"), ({"host": "allowed.test", "private": True},))
    facts = hostfacts.gather(policy, str(workspace), images.probe_volume_name(), images.proxy_image().tag)
    plan = compile_policy(policy, facts, egress_network=internet.network, command=("sleep", "1"))
    method, nth = PHASES[phase]
    with pytest.raises(KeyboardInterrupt):
        launch.run(Interrupting(engine, method, nth), plan, Recorder())
    assert leftovers(engine, workspace) == [] and volumes(engine) <= before
    assert sorted(os.listdir(workspace)) == listing   # placeholders removed too


def test_sigint_while_the_agent_runs_in_proxy_mode_leaves_nothing(engine, internet, workspace):
    proc = start(workspace, "-p", "ci", "--egress-network", internet.network, "--", "sleep", "120")
    wait_for(proc, "probe passed")
    assert len(leftovers(engine, workspace)) == 3
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert leftovers(engine, workspace) == []


def _save_on_term(name: str) -> str:
    # A well-behaved agent: on SIGTERM it saves its work, then leaves.
    return f"trap 'echo saved > /workspace/{name}; exit 0' TERM; echo started > /workspace/{name}; sleep 100 & wait"


@pytest.mark.parametrize("how", ["sigterm", "timeout"])
def test_the_agents_work_survives_a_stop(engine, workspace, how):
    extra = ["--timeout", "3s"] if how == "timeout" else []
    proc = start(workspace, *extra, "--", "bash", "-c", _save_on_term("work.txt"))
    wait_for(proc, "probe passed")
    if how == "sigterm":
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (143 if how == "sigterm" else ExitCode.AGENT_TIMEOUT), err
    assert (workspace / "work.txt").read_text() == "saved\n"
    assert leftovers(engine, workspace) == []


def test_twenty_sandboxes_at_once_all_pass_the_probe_with_unique_names(engine, tmp_path):
    spaces = []
    for i in range(20):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        os.chown(ws, 1000, 1000)
        spaces.append(ws)

    def one(ws):
        report = ws.parent / f"{ws.name}.json"
        result = subprocess.run(SANDBOX + ["run", *BIND, "-w", str(ws), "--report", str(report), "--", "sh", "-c", "echo ok > out"],
                                capture_output=True, text=True, timeout=300)
        return result, json.loads(report.read_text())

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(one, spaces))
    for (result, report), ws in zip(outcomes, spaces):
        assert result.returncode == 0, result.stderr
        assert report["probe"]["ok"] and (ws / "out").read_text() == "ok\n"
    names = [report["plan"]["container"]["name"] for _, report in outcomes]
    assert len(set(names)) == 20
    for ws in spaces:
        assert leftovers(engine, ws) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_missing_image_that_cannot_be_pulled_is_a_clear_error(engine, workspace, tmp_path):
    policy = tmp_path / "missing-image.yaml"
    policy.write_text("version: 1\nname: missing-image\ndescription: an image nobody has\n"
                      "image: sandbox-test/no-such-image:1\n")
    result = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--", "true"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == ExitCode.ENGINE and "sandbox-test/no-such-image:1" in result.stderr
    assert "Traceback" not in result.stderr and leftovers(engine, workspace) == []


def test_ctrl_c_while_an_image_builds_leaves_nothing(engine, tmp_path, workspace):
    # A copy of the launcher whose probe image has one slow step more: its content-hashed tag is
    # new, so `sandbox run` has to build it, and Ctrl-C lands in the middle of that build.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for part in ("launcher", "images", "policies"):
        shutil.copytree(os.path.join(root, part), tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "images" / "probe" / "Dockerfile", "a") as dockerfile:
        dockerfile.write(f"RUN sleep 60 # {os.getpid()}\n")
    slow_tag = subprocess.run([sys.executable, "-c", "from launcher.engine import images; print(images.probe_image().tag)"],
                              cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    api, images_before = docker_sdk().api, {i["Id"] for i in docker_sdk().api.images(all=True)}

    def building() -> list[dict]:
        return [c for c in api.containers(all=True) if f"sleep 60 # {os.getpid()}" in c["Command"]]

    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", "-p", "untrusted", "-w", str(workspace), "--", "true"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not building():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "slow"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    # The engine cancels the build when its client goes; its step container goes with it.
    deadline = time.monotonic() + 30
    while building() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert building() == [] and not engine.image_exists(slow_tag)
    assert leftovers(engine, workspace) == [] and engine.volume_labels("sandbox-probe-" + slow_tag.split(":")[1]) is None
    # Layers of the finished steps stay in the build cache as untagged images; nothing else appeared.
    new = [i for i in api.images(all=True) if i["Id"] not in images_before]
    assert all(tag == "<none>:<none>" for i in new for tag in (i.get("RepoTags") or ["<none>:<none>"]))
