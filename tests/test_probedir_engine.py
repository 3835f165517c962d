"""The probe's files from the launcher's own directory on this host, on the real engine: an engine
daemon on this host binds it (not the shared volume), the launcher's own copy passes, and a copy
changed on the host is refused before the container starts: neither the probe nor the agent runs
(the shared volume's tamper tests: test_gate.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import launch_facts, preset

from fakes import Recorder

from launcher import labels as label
from launcher.engine import images
from launcher.errors import ProbeFailed
from launcher.launch import launch
from launcher.pipeline import pipeline
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import PROBE_DIR, MountKind
from launcher.policy.model import HomeMode, WorkspaceMode

pytestmark = pytest.mark.engine
MARKER, PROBE_RAN = "AGENT-RAN", "PROBE-RAN"
SCRIPT = (images.probe_image().context / "probe.sh").read_bytes()


@pytest.fixture
def bound(engine, monkeypatch):
    """The launcher's own probe directory on this host (this test's state directory), filled as a
    launch fills it; the plan's facts bind it, as a launch's do on an engine on this host."""
    monkeypatch.delenv("SANDBOX_PROBE_VOLUME")
    where = pipeline._probe_dir()
    assert where, "the engine here is a daemon on this host: a launch binds the launcher's own directory"
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, probe_dir=where)
    return where


def _plan(engine, workspace, where: str):
    policy = preset("untrusted")
    policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND),
                     home=replace(policy.home, mode=HomeMode.TMPFS))
    facts = replace(launch_facts(engine, policy, workspace), probe_dir=where)
    return compile_policy(policy, facts, command=("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))


def _change(where: str, name: str, data: bytes | None, mode: int) -> None:
    """What someone who can write the user's files could do to the directory."""
    os.chmod(where, 0o755)
    path = os.path.join(where, name)
    if os.path.lexists(path):
        os.unlink(path)
    if data is not None:
        with open(path, "wb") as out:
            out.write(data)
        os.chmod(path, mode)
    os.chmod(where, 0o555)


def test_the_launcher_s_own_directory_is_bound_and_passes(engine, workspace, bound):
    plan = _plan(engine, workspace, bound)
    mount = next(m for m in plan.container.mounts if m.target == PROBE_DIR)
    assert (mount.kind, mount.source, mount.read_only) == (MountKind.BIND, bound, True)
    outcome = launch.run(engine, plan, Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0 and (workspace / MARKER).exists()


# a busybox that would leave a mark in the workspace if it ever ran as the probe
RAN = f"#!/bin/sh\ntouch /workspace/{PROBE_RAN}\nexec /bin/sh \"$@\"\n".encode()


@pytest.mark.parametrize("change", [
    ("probe.sh", SCRIPT + b"\n# one more line\n", 0o444),
    ("probe.sh", SCRIPT, 0o666),
    ("busybox", RAN, 0o555),
    ("extra.sh", b"echo\n", 0o444),
    ("probe.sh", None, 0),
], ids=["probe.sh changed", "probe.sh writable", "busybox replaced", "a file added", "probe.sh removed"])
def test_a_directory_changed_on_the_host_is_refused_before_the_container_starts(engine, workspace, bound, change):
    _change(bound, *change)
    plan = _plan(engine, workspace, bound)
    with pytest.raises(ProbeFailed, match="the probe's files are not the launcher's; the agent was not started"):
        launch.run(engine, plan, Recorder())
    assert not (workspace / MARKER).exists() and not (workspace / PROBE_RAN).exists()
    assert engine.list(label.selector(label.SANDBOX, plan.container.name)) == []


def test_the_control_that_busybox_would_have_run_as_the_probe(engine, workspace, bound, monkeypatch):
    """Without the launcher's check, the changed busybox runs as the probe (so the test above shows
    the check, not a busybox that could not run)."""
    from launcher.launch import proof

    _change(bound, "busybox", RAN, 0o555)
    monkeypatch.setattr(proof, "verify_files", lambda *args: None)
    try:
        launch.run(engine, _plan(engine, workspace, bound), Recorder())
    except ProbeFailed:
        pass   # /bin/sh is no busybox: the probe's report is not whole
    assert (workspace / PROBE_RAN).exists() and not (workspace / MARKER).exists()


def test_the_cli_refuses_a_changed_directory_and_says_how_to_fill_it_again(engine, workspace, bound):
    _change(bound, "busybox", RAN, 0o555)
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_PROBE_VOLUME"}
    said = subprocess.run([sys.executable, "-m", "launcher", "run", "--policy", "untrusted", "--workspace-mode", "bind",
                           "-w", str(workspace), "--", "touch", f"/workspace/{MARKER}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert said.returncode == 122, said.stderr
    assert f"probe directory {bound}: probe file busybox has sha256" in said.stderr
    assert f"hint: `chmod -R u+w {bound} && rm -r {bound}`" in said.stderr
    assert not (workspace / MARKER).exists() and not (workspace / PROBE_RAN).exists()
