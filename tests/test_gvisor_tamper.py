"""The tamper matrix under gVisor: each protection of tests/test_tamper.py taken away from a gVisor
sandbox while the plan keeps its expectations. The probe must fail that check, or, where gVisor
hides the state from inside (listed below, see images/probe/CONTRACT.md), `docker inspect`'s
comparison must catch it; either way the agent never runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

import test_tamper
from fakes import Recorder
from test_gvisor import MARKER, gvisor, gvisor_plan  # noqa: F401 - the fixture

from launcher.engine.verify import compare_inspect
from launcher.errors import EngineError, ProbeFailed
from launcher.launch import launch

pytestmark = pytest.mark.engine

# check -> why the probe cannot see this tamper under gVisor: gVisor holds the line itself (the
# tamper changes nothing inside), or hides the state; the inspect comparison catches each one
INSPECT_ONLY = {
    "nnp": "runsc sets no_new_privs on every process: without the option nothing changes inside",
    "mounts.workspace": "gVisor's 9p mounts hide the host path (docker inspect Mounts names it)",
    "limits.pids": "no cgroup file inside gVisor (docker inspect PidsLimit)",
    "proc.pid1": "gVisor has its own PID namespace whatever --pid says (docker inspect PidMode)",
    "net.interfaces": "runsc --network=none gives loopback only whatever the network mode (docker inspect NetworkMode)",
    "net.routes": "runsc --network=none gives loopback only whatever the network mode (docker inspect NetworkMode)",
    "dev.nodes": "runsc passes no host device in (docker inspect Devices)",
}
# check -> why another probe check, not this one, fails under gVisor (the agent still never runs)
OTHER_CHECK = {
    "fs.rofs": ("EACCES comes before EROFS under gVisor: a writable root is seen by fs.root_ro and mounts.writable",
                {"fs.root_ro", "mounts.writable"}),
}
TAMPERS = {k: v for k, v in test_tamper.TAMPERS.items() if k != "kernel.runtime"}   # test_gvisor.py has it
# runsc drops NET_RAW (no --net-raw), so the bounding-set tamper adds another capability
TAMPERS["caps.bnd"] = lambda c, ws, tmp: replace(c, cap_add=("CHOWN",))


@pytest.fixture
def probe_only(monkeypatch):
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setattr(launch.hostpaths, "bind_source_intact", lambda path: True)


@pytest.mark.parametrize("check", list(TAMPERS))
def test_a_tampered_gvisor_sandbox_fails_the_probe_or_the_inspect_comparison(gvisor, workspace, tmp_path, check,  # noqa: F811
                                                                            probe_only):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plan = gvisor_plan(workspace)
    keep = [test_tamper.plain_socket(scratch / "docker.sock")]
    if check == "sockets.mounts":   # appears after compile, which would have refused it
        keep.append(test_tamper.plain_socket(workspace / "planted.sock"))
    if check == "creds.files":
        (workspace / ".ssh").mkdir()
    tampered = TAMPERS[check](plan.container, workspace, scratch)
    listener = Recorder()
    try:
        if check in INSPECT_ONLY:
            ref = gvisor.create(replace(tampered, name=tampered.name + "-cmp"))
            try:
                diffs = compare_inspect(plan.container, gvisor.inspect(ref), gvisor.image_env(tampered.image))
            finally:
                gvisor.remove(ref)
            assert diffs, f"{check}: neither the probe ({INSPECT_ONLY[check]}) nor docker inspect sees it"
            return
        try:
            launch.run(gvisor, replace(plan, container=tampered), listener)
        except ProbeFailed as exc:
            assert exc.report is not None, str(exc)
            failed = {c.id for c in exc.report.failed}
            assert check in failed or (check in OTHER_CHECK and OTHER_CHECK[check][1] <= failed), sorted(failed)
        except EngineError as exc:   # runsc refused to start it at all: the agent never ran either
            assert "starting container" in str(exc) or "creating container" in str(exc), str(exc)
        else:
            pytest.fail(f"{check}: the tampered gVisor sandbox passed the probe")
    finally:
        for sock in keep:
            sock.close()
    assert not (workspace / MARKER).exists() and listener.out == b""
    assert gvisor.list(f"dev.sandbox.workspace={workspace}") == []
