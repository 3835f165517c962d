"""The tamper matrix: for every probe check, remove that one protection from the container while
the probe keeps the plan's expectations. The check must fail and the agent must never run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import BIND, launch_facts, preset

from fakes import Recorder

from launcher.errors import EngineError, ProbeFailed
from launcher.launch import launch
from launcher.plan import checks, runtimes
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import Mount, MountKind
from launcher.policy.model import HomeMode, NetworkMode, Runtime, WorkspaceMode
from launcher.policy.surfaces import GIT_READS

pytestmark = pytest.mark.engine
MARKER = "AGENT-RAN"
# A seccomp filter that allows everything: mode 2 is set, yet unshare is no longer refused.
ALLOW_ALL_SECCOMP = "seccomp=" + json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})
# On podman a tamper that changes the user is refused at create: its `U` tmpfs (the home, /tmp)
# follows the container's user, so it cannot make the agent's home for another user and the
# launcher refuses it (launcher/engine/dialects/podman.py: specgen_body). The expectation there is "refused before the agent
# ran", said explicitly: the test still fails if the container started or the agent ran.
PODMAN_REFUSED_AT_CREATE = {
    "identity.uid": "podman can make a tmpfs owned only by the container's user",
    "identity.gid": "podman can make a tmpfs owned only by the container's user",
    "caps.process": "podman can make a tmpfs owned only by the container's user",
    "home.private": "podman can make a tmpfs owned only by the container's user",
}


def allow_all_seccomp(tmp: Path) -> str:
    """ALLOW_ALL_SECCOMP as the engine takes it: inline for Docker, a file on podman (its API takes
    only a path on the server)."""
    if os.environ.get("SANDBOX_TEST_ENGINE") != "podman":
        return ALLOW_ALL_SECCOMP
    (tmp / "allow-all.json").write_text(ALLOW_ALL_SECCOMP.removeprefix("seccomp="))
    return f"seccomp={tmp / 'allow-all.json'}"


def plain_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def add_mount(c, mount):
    return replace(c, mounts=c.mounts + (mount,))


def add_env(c, name, value):
    return replace(c, env=c.env + ((name, value),))


def home_as(c, **change):
    """The home mount changed after compile (the plan still expects the agent's private home)."""
    return replace(c, mounts=tuple(replace(m, **change) if m.target == "/home/agent" else m for m in c.mounts))


def root_owned(c, ws, mode):
    """The workspace handed to root after compile: the plan still runs the agent as 1000:1000."""
    os.chown(ws, 0, 0)
    os.chmod(ws, mode)
    return c


# check id -> how to take its protection away: f(container spec, workspace, scratch dir)
TAMPERS = {
    "kernel.runtime": lambda c, ws, tmp: replace(c, runtime=runtimes.GVISOR[NetworkMode.NONE][0]),
    "identity.uid": lambda c, ws, tmp: replace(c, user="1001:1000"),
    "identity.gid": lambda c, ws, tmp: replace(c, user="1000:1001"),
    "identity.groups": lambda c, ws, tmp: replace(c, group_add=("0",)),
    "caps.process": lambda c, ws, tmp: replace(c, user="0:0", cap_drop=()),
    "caps.bnd": lambda c, ws, tmp: replace(c, cap_add=("NET_RAW",)),
    "nnp": lambda c, ws, tmp: replace(c, security_opt=()),
    "seccomp.mode": lambda c, ws, tmp: replace(c, security_opt=("no-new-privileges", "seccomp=unconfined")),
    "seccomp.unshare": lambda c, ws, tmp: replace(c, security_opt=("no-new-privileges", allow_all_seccomp(tmp))),
    "fs.root_ro": lambda c, ws, tmp: replace(c, read_only_root=False),
    "fs.rofs": lambda c, ws, tmp: replace(c, read_only_root=False),
    "fs.sysfs_ro": lambda c, ws, tmp: add_mount(c, Mount(kind=MountKind.BIND, source="/sys", target="/sys",
                                                         read_only=False)),
    "mounts.inventory": lambda c, ws, tmp: add_mount(c, Mount(kind=MountKind.BIND, source="/usr/share/doc",
                                                              target="/extra", read_only=True)),
    "mounts.writable": lambda c, ws, tmp: add_mount(c, Mount(kind=MountKind.TMPFS, target="/extra",
                                                             read_only=False, size_bytes=1 << 20)),
    "mounts.workspace": lambda c, ws, tmp: replace(c, mounts=tuple(
        replace(m, source=str(tmp)) if m.target == "/workspace" else m for m in c.mounts)),
    "ws.access": lambda c, ws, tmp: root_owned(c, ws, 0o700),
    "home.private": lambda c, ws, tmp: home_as(c, owner=(0, 0)),
    "fs.protected": lambda c, ws, tmp: replace(c, mounts=tuple(
        m for m in c.mounts if not m.target.startswith("/workspace/"))),
    "sockets.mounts": lambda c, ws, tmp: c,   # the socket is planted in the workspace, see below
    "sockets.runtime": lambda c, ws, tmp: add_mount(c, Mount(kind=MountKind.BIND, source=str(tmp / "docker.sock"),
                                                             target="/run/docker.sock", read_only=True)),
    "env.secrets": lambda c, ws, tmp: add_env(c, "GITHUB_TOKEN", "ghp_" + "x" * 36),
    "env.runtime": lambda c, ws, tmp: add_env(c, "DOCKER_HOST", "tcp://127.0.0.1:2375"),
    "creds.files": lambda c, ws, tmp: add_env(c, "HOME", "/workspace"),   # and ws/.ssh exists, see below
    "net.interfaces": lambda c, ws, tmp: replace(c, network_mode="bridge"),
    "net.routes": lambda c, ws, tmp: replace(c, network_mode="bridge"),
    "limits.pids": lambda c, ws, tmp: replace(c, pids_limit=None),
    "limits.memory": lambda c, ws, tmp: replace(c, memory_bytes=None),
    "proc.pid1": lambda c, ws, tmp: replace(c, pid_mode="host"),
    "dev.nodes": lambda c, ws, tmp: replace(c, devices=("/dev/zero:/dev/extra0:rwm",)),
}



@pytest.fixture
def probe_only(monkeypatch):
    """Switch off the host-side inspect comparison (it would refuse most tampers before start),
    so that what is tested here is the probe alone."""
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setattr(launch.hostpaths, "bind_source_intact", lambda path: True)


def plan_for(engine, workspace, mode=WorkspaceMode.BIND, home=HomeMode.TMPFS):
    policy = preset("untrusted")
    policy = replace(policy, workspace=replace(policy.workspace, mode=mode), home=replace(policy.home, mode=home))
    return compile_policy(policy, launch_facts(engine, policy, workspace),
                          command=("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))


def test_the_untampered_plan_passes_and_every_check_has_a_tamper(engine, workspace):
    outcome = launch.run(engine, plan_for(engine, workspace), Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0 and (workspace / MARKER).exists()
    assert [c.id for c in outcome.probe.checks] == list(checks.for_mode("none")) == list(TAMPERS)


@pytest.mark.parametrize("check", list(TAMPERS))
def test_tampered_protection_fails_its_check_and_the_agent_never_runs(engine, workspace, tmp_path, check, probe_only):
    gvisor_missing = check == "kernel.runtime" and runtimes.missing(engine.info(), Runtime.GVISOR, NetworkMode.NONE)
    if gvisor_missing and (engine.dialect.name == "podman"):
        # podman 4.3 cannot register runsc with the arguments the plan needs (its [engine.runtimes]
        # takes a path only): the launch refuses the runtime podman lacks before it creates anything
        # (podman's libpod create would run the unknown name as runc, silently: libpod's OCIRuntime
        # in the inspect comparison catches that too, tests/test_podman_specgen.py).
        plan, listener = plan_for(engine, workspace), Recorder()
        with pytest.raises(EngineError, match=r"the engine is podman: containers.conf's \[engine.runtimes\] names runsc "
                                              r"by its path only"):
            launch.run(engine, replace(plan, container=TAMPERS[check](plan.container, workspace, tmp_path)), listener)
        assert not (workspace / MARKER).exists() and listener.out == b""
        assert engine.list(f"dev.sandbox.workspace={workspace}") == []
        return
    if gvisor_missing:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail("CI=true and gVisor is not registered: .ci/run runs `sandbox doctor --fix`")
        pytest.skip("the tamper runs a runc plan under gVisor: `sandbox doctor --fix` registers it")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plan = plan_for(engine, workspace)
    keep = [plain_socket(scratch / "docker.sock")]
    if check == "sockets.mounts":  # appears after compile, which would have refused it
        keep.append(plain_socket(workspace / "planted.sock"))
    if check == "creds.files":
        (workspace / ".ssh").mkdir()
    plan = replace(plan, container=TAMPERS[check](plan.container, workspace, scratch))
    listener = Recorder()
    refused_at_create = PODMAN_REFUSED_AT_CREATE.get(check) if (engine.dialect.name == "podman") else None
    try:
        with pytest.raises(EngineError if refused_at_create else ProbeFailed) as info:
            launch.run(engine, plan, listener)
    finally:
        for sock in keep:
            sock.close()
    if refused_at_create:   # podman: refused before anything ran (see PODMAN_REFUSED_AT_CREATE)
        assert refused_at_create in str(info.value) and not isinstance(info.value, ProbeFailed), str(info.value)
        assert not (workspace / MARKER).exists() and listener.out == b""
        assert engine.list(f"dev.sandbox.workspace={workspace}") == []
        return
    assert info.value.report is not None, str(info.value)
    failed = {c.id for c in info.value.report.failed}
    assert check in failed, f"{check} passed although its protection was removed; failed: {failed}"
    assert not (workspace / MARKER).exists() and listener.out == b""
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []


def test_a_writable_git_directory_fails_fs_protected(engine, workspace, probe_only):
    """Only the read-only .git mount is taken away: every part of .git that host git reads is
    then writable or creatable, and the probe names it."""
    plan = plan_for(engine, workspace)
    mounts = tuple(m for m in plan.container.mounts if m.target != "/workspace/.git")
    assert len(mounts) == len(plan.container.mounts) - 1
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=replace(plan.container, mounts=mounts)), Recorder())
    failed = {c.id: c for c in info.value.report.failed}
    assert set(failed) == {"fs.protected"}, failed
    for path in (".git",) + GIT_READS:
        assert f"/workspace/{path}" in failed["fs.protected"].observed, (path, failed["fs.protected"].observed)
    assert not (workspace / MARKER).exists()


@pytest.mark.parametrize("swap", ["host tree", "copy without overlay"])
def test_copy_mode_mounts_workspace_fails_unless_the_agent_sees_the_overlay(engine, workspace, probe_only, swap):
    """Copy mode's protection is that the host tree is not mounted and the copy's base is never
    written: the workspace bound from the host, or the base volume bound directly, fails."""
    plan = plan_for(engine, workspace, WorkspaceMode.COPY)
    source = {"host tree": Mount(kind=MountKind.BIND, source=str(workspace), target="/workspace", read_only=False),
              "copy without overlay": Mount(kind=MountKind.VOLUME, source=plan.copy.base_volume, target="/workspace",
                                            read_only=False)}[swap]
    mounts = tuple(source if m.target == "/workspace" else m for m in plan.container.mounts)
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=replace(plan.container, mounts=mounts)), listener)
    assert "mounts.workspace" in {c.id for c in info.value.report.failed}
    assert not (workspace / MARKER).exists() and listener.out == b""
    assert engine.volume_info(plan.copy.upper_volume) is None   # the agent never ran: the new copy went too


@pytest.mark.parametrize("how", ["owned by root", "through the Mount API (root's, 0755)", "not mounted"])
def test_a_home_that_is_not_the_agents_own_tmpfs_fails_home_private(engine, workspace, probe_only, how):
    plan = plan_for(engine, workspace)
    container = {"owned by root": lambda c: home_as(c, owner=(0, 0)),
                 "through the Mount API (root's, 0755)": lambda c: home_as(c, owner=None),
                 "not mounted": lambda c: replace(c, mounts=tuple(m for m in c.mounts if m.target != "/home/agent")),
                 }[how](plan.container)
    listener = Recorder()
    refused_at_create = how == "owned by root" and (engine.dialect.name == "podman")   # see PODMAN_REFUSED_AT_CREATE
    with pytest.raises(EngineError if refused_at_create else ProbeFailed) as info:
        launch.run(engine, replace(plan, container=container), listener)
    if refused_at_create:
        assert PODMAN_REFUSED_AT_CREATE["home.private"] in str(info.value) and not isinstance(info.value, ProbeFailed)
    else:
        assert "home.private" in {c.id for c in info.value.report.failed}
    assert not (workspace / MARKER).exists() and listener.out == b""


def test_a_home_volume_of_another_workspace_fails_home_private(engine, workspace, tmp_path, probe_only):
    """Two workspaces sharing one home: workspace B's home volume (made and handed to the agent as
    the launcher does) mounted in A's sandbox fails, and the agent never runs."""
    from launcher.launch import home

    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 1000, 1000)
    plan, theirs = plan_for(engine, workspace, home=HomeMode.VOLUME), plan_for(engine, other, home=HomeMode.VOLUME)
    assert plan.home.volume != theirs.home.volume
    try:
        home.prepare(engine, theirs.home, lambda line: None)
        mounts = tuple(replace(m, source=theirs.home.volume) if m.target == "/home/agent" else m
                       for m in plan.container.mounts)
        listener = Recorder()
        with pytest.raises(ProbeFailed) as info:
            launch.run(engine, replace(plan, container=replace(plan.container, mounts=mounts)), listener)
        failed = {c.id: c for c in info.value.report.failed}
        assert set(failed) == {"home.private"}, failed
        assert theirs.home.volume in failed["home.private"].observed
        assert not (workspace / MARKER).exists() and listener.out == b""
        assert engine.volume_info(plan.home.volume) is None   # made for this run, which never started
    finally:
        for volume in (plan.home.volume, theirs.home.volume):
            if engine.volume_info(volume) is not None:
                engine.remove_volume(volume)


def test_an_extra_writable_mount_beside_the_home_fails_mounts_writable(engine, workspace, probe_only):
    plan = plan_for(engine, workspace)
    extra = Mount(kind=MountKind.TMPFS, target="/home/other", read_only=False, size_bytes=1 << 20, owner=(1000, 1000))
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=add_mount(plan.container, extra)), listener)
    failed = {c.id for c in info.value.report.failed}
    assert "mounts.writable" in failed and "home.private" not in failed, failed
    assert not (workspace / MARKER).exists() and listener.out == b""


def test_inspect_comparison_refuses_a_container_that_differs_from_the_plan(engine, workspace):
    """The host-side half: the real engine's `docker inspect` of a tampered container is caught."""
    from launcher.engine.verify import compare_inspect

    plan = plan_for(engine, workspace)
    tampered = replace(plan.container, cap_add=("NET_RAW",), security_opt=("no-new-privileges", "seccomp=unconfined"),
                       devices=("/dev/zero:/dev/extra0:rwm",), pid_mode="host", read_only_root=False)
    ref = engine.create(tampered)
    try:
        diffs = compare_inspect(plan.container, engine.inspect(ref), engine.image_env(plan.container.image), engine.dialect.plan)
    finally:
        engine.remove(ref)
    # podman reports no CapAdd: an added capability is one of its defaults it did not drop
    added = "CapDrop: NET_RAW not dropped" if (engine.dialect.name == "podman") else "CapAdd"
    # podman's inspect of a container its libpod create made says nothing of seccomp (not even
    # unconfined): there the probe's seccomp.mode is the proof (the matrix's seccomp.mode tamper)
    seccomp = () if (engine.dialect.name == "podman") else ("SecurityOpt",)
    for field in (added, *seccomp, "Devices", "PidMode", "ReadonlyRootfs"):
        assert any(d.startswith(field) for d in diffs), (field, diffs)


# ws.access on real workspaces, compiled as they are (`user: auto` never picks root's uid).
AGENT_SAYS = ("/.sandbox/probe/busybox", "sh", "-c", f"echo {MARKER}; touch /workspace/{MARKER}")


@pytest.mark.parametrize("mode, cannot", [(0o700, "read/write"), (0o755, "write")], ids=["0700", "0755"])
def test_a_root_owned_workspace_fails_ws_access_with_a_hint_and_the_agent_never_runs(engine, workspace, mode, cannot):
    os.chown(workspace, 0, 0)
    os.chmod(workspace, mode)
    result = subprocess.run([sys.executable, "-m", "launcher", "run", *BIND, "-w", str(workspace), "--", *AGENT_SAYS],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 122, result.stderr
    assert MARKER not in result.stdout and not (workspace / MARKER).exists()
    assert "ws.access: expected uid 1000 can read,search,write /workspace" in result.stderr, result.stderr
    assert (f"hint: the agent (uid 1000) cannot {cannot} {workspace}, which belongs to uid 0 mode 0{mode:o}: "
            "set `user:`") in result.stderr
    assert "copy mode" in result.stderr and "never runs as root" in result.stderr


def test_ws_access_fails_alone_and_says_what_was_refused(engine, workspace):
    os.chown(workspace, 0, 0)
    os.chmod(workspace, 0o755)
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan_for(engine, workspace), listener)
    assert info.value.exit_code == 122 and listener.out == b""
    failed = {c.id: c.observed for c in info.value.report.failed}
    assert set(failed) == {"ws.access"}, failed
    assert failed["ws.access"] == "r=yes,x=yes,w=no,list=ok,owner=0,group=0,mode=755"


@pytest.mark.parametrize("name, owner, mode", [("untrusted", 1000, 0o700), ("read-only", 0, 0o755)])
def test_a_workspace_the_agent_can_use_passes_ws_access(engine, workspace, name, owner, mode):
    """Owned by the agent's uid (even 0700), or read-only and readable by all: the agent runs."""
    os.chown(workspace, owner, owner)
    os.chmod(workspace, mode)
    policy = preset(name)
    plan = compile_policy(policy, launch_facts(engine, policy, workspace), command=AGENT_SAYS)
    listener = Recorder()
    outcome = launch.run(engine, plan, listener)
    assert outcome.probe.ok and MARKER.encode() in listener.out
    access = next(c for c in outcome.probe.checks if c.id == "ws.access")
    assert access.ok and access.observed.startswith("r=yes,x=yes" + (",w=yes" if name == "untrusted" else ",list"))
