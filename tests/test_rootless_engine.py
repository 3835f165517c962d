"""Rootless engines for real: the probe's identity.userns against rootful Docker (its tamper: a plan
that claims a remapping engine meets the identity map) and against rootless podman served by an
unprivileged user, where a launch of a preset is refused for the limits it would ignore and a plan
that claims them anyway fails the probe. The recorded answers: tests/test_rootless.py."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT, launch_facts, preset
from fakes import Recorder

from launcher.engine import images
from launcher.errors import EngineError, ProbeFailed
from launcher.host import engineid, hostfacts
from launcher.launch import launch, session
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import Mount, MountKind
from launcher.policy.model import WorkspaceMode

pytestmark = [pytest.mark.engine, pytest.mark.rootless]
MARKER = "AGENT-RAN"
# The unprivileged user whose podman the tests start (`useradd -m NAME` gives it /etc/subuid and
# /etc/subgid ranges), or an engine already served rootless (SANDBOX_TEST_ROOTLESS_HOST=unix://…).
USER = os.environ.get("SANDBOX_TEST_ROOTLESS_USER", "sbrootless")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true")
TOUCH = ("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}")


def bind_policy():
    """untrusted in bind mode, on the slim agent image (the one the user's store builds: the
    full one's tools change nothing these tests prove)."""
    policy = preset("untrusted")
    return replace(policy, image=images.AGENT_IMAGE, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND))


def delegated(facts: engineid.EngineFacts) -> engineid.EngineFacts:
    """The engine as a compiler that wrongly believed it enforces every limit would see it."""
    return replace(facts, unenforced=())


def test_a_plan_that_claims_a_remapping_engine_fails_identity_userns_on_a_rootful_one(engine, workspace):
    """The tamper of identity.userns: the plan expects remapped ids, the engine (rootful) maps none."""
    facts = engineid.asked(engine)
    if facts.remapped:
        pytest.skip(f"the engine DOCKER_HOST points at is {facts.label}: this tamper needs a rootful one")
    claimed = engineid.EngineFacts(kind=facts.kind, rootless=True, cgroup_version=facts.cgroup_version)
    policy = bind_policy()
    host = replace(hostfacts.gather(policy, str(workspace), images.probe_volume_name()), engine=claimed)
    plan = compile_policy(policy, host, command=TOUCH)
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, listener)
    failed = {c.id: c for c in info.value.report.failed}
    assert set(failed) == {"identity.userns"}, failed
    assert "uid=0:0:4294967295" in failed["identity.userns"].observed
    assert "not the one the plan was made for" in str(info.value)   # its hint
    assert not (workspace / MARKER).exists() and listener.out == b""
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []


def test_a_host_device_bound_under_another_nodes_name_fails_mounts_inventory(engine, workspace, monkeypatch):
    """On a remapping engine the probe allows the host's own /dev/null (and the other standard
    nodes) bound at its own name; /dev/zero bound at /dev/null is not that (the probe alone: the
    inspect comparison would refuse the extra mount first)."""
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setattr(launch.hostpaths, "bind_source_intact", lambda path: True)
    claimed = replace(engineid.asked(engine), rootless=True, unenforced=())
    policy = bind_policy()
    host = replace(hostfacts.gather(policy, str(workspace), images.probe_volume_name()), engine=claimed)
    plan = compile_policy(policy, host, command=TOUCH)
    container = replace(plan.container, mounts=plan.container.mounts + (
        Mount(kind=MountKind.BIND, source="/dev/zero", target="/dev/null", read_only=False),))
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=container), Recorder())
    assert info.value.report is not None, str(info.value)
    assert "mounts.inventory" in {c.id for c in info.value.report.failed}
    assert not (workspace / MARKER).exists()


def test_the_hosts_own_dev_null_bound_in_fails_mounts_inventory_on_a_plan_for_a_rootful_engine(engine, workspace,
                                                                                                  monkeypatch):
    """The allowance for a rootless engine's device binds holds only where the plan says remapped."""
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setattr(launch.hostpaths, "bind_source_intact", lambda path: True)
    policy = bind_policy()
    plan = compile_policy(policy, hostfacts.gather(policy, str(workspace), images.probe_volume_name()), command=TOUCH)
    assert plan.probe.userns == "-"
    container = replace(plan.container, mounts=plan.container.mounts + (
        Mount(kind=MountKind.BIND, source="/dev/null", target="/dev/null", read_only=False),))
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=container), Recorder())
    assert info.value.report is not None, str(info.value)
    failed = {c.id: c for c in info.value.report.failed}
    assert "mounts.inventory" in failed and "/dev/null" in failed["mounts.inventory"].observed
    assert not (workspace / MARKER).exists()


# ---------------------------------------------------------------------------------------------
# rootless podman, served by an unprivileged user


def _could() -> str:
    """Why this machine cannot serve rootless podman for the tests ("" if it can)."""
    if os.environ.get("SANDBOX_TEST_ROOTLESS_HOST"):
        return ""
    missing = [tool for tool in ("podman", "newuidmap", "newgidmap", "runuser") if not shutil.which(tool)]
    if missing or os.geteuid() != 0:
        return (f"serving rootless podman as {USER} needs root and {', '.join(missing) or 'the tools'} "
                "(Debian: podman, uidmap, util-linux)")
    return ""


@pytest.fixture(scope="session")
def rootless_host():
    """DOCKER_HOST of a rootless podman: SANDBOX_TEST_ROOTLESS_HOST, or one started here as USER
    (stopped at the end). Skips where the machine cannot; fails when it could and did not."""
    why = _could()
    if why:
        pytest.skip(why)
    if os.environ.get("SANDBOX_TEST_ROOTLESS_HOST"):
        yield os.environ["SANDBOX_TEST_ROOTLESS_HOST"]
        return
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        message = f"no user {USER}: `useradd -m {USER}` (it gets /etc/subuid and /etc/subgid ranges)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    if not any(line.split(":")[0] in (USER, str(user.pw_uid)) for line in Path("/etc/subuid").read_text().splitlines()):
        pytest.fail(f"{USER} has no range in /etc/subuid: `usermod --add-subuids 100000-165535 {USER}` (and subgids)")
    runtime = Path(f"/run/user/{user.pw_uid}")   # what logind would make; this machine may have none
    (runtime / "podman").mkdir(parents=True, exist_ok=True)
    for path in (runtime, runtime / "podman"):
        os.chown(path, user.pw_uid, user.pw_gid)
        path.chmod(0o700)
    socket = runtime / "podman" / f"sandbox-test-{os.getpid()}.sock"
    log = tempfile.TemporaryFile()   # not a pipe: a full one would block the service
    service = subprocess.Popen(["runuser", "-u", USER, "--", "env", f"HOME={user.pw_dir}", f"XDG_RUNTIME_DIR={runtime}",
                                "podman", "system", "service", "--time=0", f"unix://{socket}"],
                               stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not socket.exists():
            log.seek(0)
            pytest.fail(f"rootless podman did not start as {USER}: {log.read()[-2000:].decode(errors='replace')}")
        yield f"unix://{socket}"
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
        socket.unlink(missing_ok=True)
        log.close()


@pytest.fixture
def rootless(rootless_host, monkeypatch):
    """A connected rootless engine with the bundled images in the user's own store; DOCKER_HOST
    points at it for the test (the SDK reads it on first use)."""
    from launcher.engine import engine as engine_mod

    monkeypatch.setenv("DOCKER_HOST", rootless_host)
    try:
        eng = engine_mod.connect()
    except EngineError as exc:
        pytest.fail(f"rootless podman at {rootless_host} does not answer: {exc}")
    facts = engineid.asked(eng)
    assert facts.kind == engineid.PODMAN and facts.rootless, facts
    images.ensure_for(eng, images.AGENT_IMAGE, lambda line: None)   # builds in the user's store once
    return eng, facts


@pytest.fixture
def rootless_workspace(rootless):
    """The example repository where the user's podman can reach it (pytest's own directories are
    root's, 0700), owned by the subordinate id that is uid 1000 inside (the agent's)."""
    _, facts = rootless
    outside = next(start + 1000 - first for first, start, count in facts.uid_map if first <= 1000 < first + count)
    top = Path(tempfile.mkdtemp(prefix="sandbox-rootless-"))
    top.chmod(0o755)
    ws = top / "repo"
    shutil.copytree(ROOT / "examples" / "untrusted-repo", ws, symlinks=True)
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    for path in [ws, *ws.rglob("*")]:
        os.lchown(path, outside, outside)
    yield ws
    shutil.rmtree(top)


def test_a_preset_is_refused_on_rootless_podman_for_every_limit_it_would_ignore(rootless, rootless_workspace):
    eng, facts = rootless
    if not facts.unenforced:
        pytest.skip(f"{facts.label} has the cgroup controllers delegated: it enforces every limit")
    result = session.run(session.Request(policy="untrusted", workspace=str(rootless_workspace), command=TOUCH[1:]),
                         Recorder(), engine=eng)
    assert (result.status, result.exit_code) == ("policy-invalid", 120), result.error
    refused = {p.path for p in result.error.problems}
    assert set(facts.unenforced) <= refused and "workspace.mode" in refused   # copy mode: its overlay volume
    assert eng.list(f"dev.sandbox.workspace={rootless_workspace}") == []
    assert not (rootless_workspace / MARKER).exists()


def readable_seccomp(host, workspace: Path):
    """The plan's podman seccomp file where the user's podman can open it: the tests run as root,
    whose state directory is 0700 (a user running sandbox has it in their own)."""
    if host.seccomp_profile is None:
        return host
    shared = workspace.parent / "seccomp.json"
    shutil.copyfile(host.seccomp_profile, shared)
    shared.chmod(0o444)
    return replace(host, seccomp_profile=str(shared))


def without_tmpfs_owner(plan):
    """podman 4.3 refuses a tmpfs `uid=` option (rootful too: issue 30 part 2); the home is then
    root's inside, which home.private reports."""
    c = plan.container
    return replace(plan, container=replace(c, mounts=tuple(replace(m, owner=None) if m.kind is MountKind.TMPFS else m
                                                             for m in c.mounts)))


def test_on_rootless_podman_the_probe_proves_the_id_map_and_fails_the_limits_it_ignores(rootless, rootless_workspace,
                                                                                       monkeypatch):
    """A plan compiled as if every limit were enforced: `docker inspect` already shows them 0,
    and with that comparison off the probe itself fails limits.memory and limits.pids, while
    identity.userns passes on the user's map; the agent never runs."""
    eng, facts = rootless
    policy = bind_policy()
    host = readable_seccomp(launch_facts(eng, policy, rootless_workspace, delegated(facts)), rootless_workspace)
    plan = without_tmpfs_owner(compile_policy(policy, host, command=TOUCH))
    with pytest.raises(ProbeFailed) as info:
        launch.run(eng, plan, Recorder())
    said = str(info.value)
    assert "PidsLimit: the plan says 256, the container has 0" in said and "Memory: the plan says" in said
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(eng, plan, listener)
    report = info.value.report
    passed, failed = {c.id: c for c in report.checks if c.ok}, {c.id for c in report.failed}
    uid = pwd.getpwnam(USER).pw_uid if not os.environ.get("SANDBOX_TEST_ROOTLESS_HOST") else None
    assert "identity.userns" in passed and (uid is None or f"uid=0:{uid}:1" in passed["identity.userns"].observed)
    assert {"limits.memory", "limits.pids"} <= failed
    # the host's device nodes podman binds in (it cannot mknod) are the standard ones, allowed
    assert {"identity.uid", "ws.access", "dev.nodes", "net.interfaces"} <= set(passed)
    inventory = next(c for c in report.checks if c.id == "mounts.inventory")
    assert not any(p.startswith(("/dev/", "/proc/")) for p in inventory.observed.split(",")), inventory.observed
    assert not (rootless_workspace / MARKER).exists() and listener.out == b""
    assert eng.list(f"dev.sandbox.workspace={rootless_workspace}") == []


def test_the_users_own_workspace_is_root_inside_and_the_agent_cannot_write_it(rootless, rootless_workspace, monkeypatch):
    """What docs/security.md#rootless-engines says of `user:` auto: the rootless user's own files
    are uid 0 inside, the agent falls back to 1000:1000 and ws.access refuses the start."""
    eng, facts = rootless
    if os.environ.get("SANDBOX_TEST_ROOTLESS_HOST"):
        pytest.skip("needs root to hand the workspace to the rootless user")
    user = pwd.getpwnam(USER)
    for path in [rootless_workspace, *rootless_workspace.rglob("*")]:
        os.lchown(path, user.pw_uid, user.pw_gid)
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    policy = bind_policy()
    host = readable_seccomp(launch_facts(eng, policy, rootless_workspace, delegated(facts)), rootless_workspace)
    plan = without_tmpfs_owner(compile_policy(policy, host, command=TOUCH))
    assert plan.container.user == "1000:1000"
    with pytest.raises(ProbeFailed) as info:
        launch.run(eng, plan, Recorder())
    access = next(c for c in info.value.report.checks if c.id == "ws.access")
    assert not access.ok and "owner=0" in access.observed and "w=no" in access.observed
    assert "podman unshare chown -R 1000:1000" in str(info.value)   # not copy mode: refused on rootless podman
    assert not (rootless_workspace / MARKER).exists()


def test_explain_engine_marks_what_rootless_podman_would_ignore_and_exits_as_run_would(rootless, rootless_workspace):
    import json
    import sys

    _, facts = rootless
    done = subprocess.run([sys.executable, "-m", "launcher", "explain", "untrusted", "--engine", "--json", "-w",
                           str(rootless_workspace)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": os.environ["DOCKER_HOST"]})
    assert done.returncode == (120 if facts.unenforced else 0), done.stderr
    data = json.loads(done.stdout)
    assert data["engine"]["rootless"] and data["engine"]["unenforced"] == list(facts.unenforced)
    refused = [f["field"] for f in data["fields"] if "REFUSED on this engine" in f["flags"]]
    assert refused == [f for f in ("limits.pids", "limits.memory", "limits.cpus") if f in facts.unenforced]
    assert any(a["probe_checks"] == ["identity.userns"] for a in data["always"])
    for field in facts.unenforced:
        assert f"{field}: expected a limit the engine enforces" in done.stderr
