"""runtime: gvisor against the real engine: the probe passes under runsc (none and proxy mode, bind
and copy), proves which kernel it is on, and a plan run under the other runtime fails the probe and
the inspect comparison. In CI (CI=true) these fail when runsc is not registered: .ci/run does it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from fakes import Recorder

from conftest import preset
from launcher.engine import images
from launcher.engine.verify import compare_inspect
from launcher.errors import ProbeFailed
from launcher.host import hostfacts
from launcher.launch import launch
from launcher.pipeline import stack
from launcher.plan import runtimes
from launcher.plan.compiler import compile_policy
from launcher.policy.model import NetworkMode, Runtime, WorkspaceMode

pytestmark = pytest.mark.engine
MARKER = "AGENT-RAN"
NONE_NAME = runtimes.GVISOR[NetworkMode.NONE][0]


@pytest.fixture(scope="module")
def gvisor(engine):
    """The engine, with gVisor registered as `sandbox doctor --fix` registers it."""
    missing = runtimes.missing(engine.info(), Runtime.GVISOR, NetworkMode.NONE) or \
        runtimes.missing(engine.info(), Runtime.GVISOR, NetworkMode.PROXY)
    if missing:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI=true and the engine has no {missing}: .ci/run installs runsc and runs `sandbox doctor --fix`")
        pytest.skip(f"the engine has no {missing}: `sandbox doctor --fix` registers it")
    return engine


def gvisor_plan(workspace, mode=WorkspaceMode.BIND, runtime=Runtime.GVISOR, command=None, memory_bytes=0):
    policy = stack.load_base("untrusted-gvisor").policy   # it extends untrusted
    assert policy.workspace.access.value == "read-write"
    policy = replace(policy, runtime=runtime, workspace=replace(policy.workspace, mode=mode))
    if memory_bytes:
        policy = replace(policy, limits=replace(policy.limits, memory_bytes=memory_bytes))
    return compile_policy(policy, hostfacts.gather(policy, str(workspace), images.probe_volume_name()),
                          command=command or ("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))


@pytest.fixture
def probe_only(monkeypatch):
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setattr(launch.hostpaths, "bind_source_intact", lambda path: True)


@pytest.mark.parametrize("mode", [WorkspaceMode.BIND, WorkspaceMode.COPY])
def test_the_probe_passes_under_gvisor_and_sees_gvisors_kernel(gvisor, workspace, mode):
    outcome = launch.run(gvisor, gvisor_plan(workspace, mode), Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0
    checks = {c.id: c for c in outcome.probe.checks}
    assert checks["kernel.runtime"].observed.startswith("gvisor: Linux version")
    assert checks["seccomp.mode"].observed == "2"   # runsc --oci-seccomp applies the gVisor profile inside
    if mode is WorkspaceMode.BIND:
        assert (workspace / MARKER).exists()


def test_what_gvisor_hides_is_reported_not_applicable_never_passed(gvisor, workspace):
    plan = gvisor_plan(workspace)
    assert plan.probe.na == ("nnp", "mounts.workspace", "limits.pids")
    outcome = launch.run(gvisor, plan, Recorder())
    verdicts = {c.id: c.verdict for c in outcome.probe.checks}
    assert {c for c, v in verdicts.items() if v == "n/a"} == set(plan.probe.na)
    assert all(v == "pass" for c, v in verdicts.items() if c not in plan.probe.na)


def test_without_the_plans_na_the_checks_gvisor_hides_fail(gvisor, workspace, probe_only):
    """The probe's n/a is no pass: a plan that does not mark them (or a launcher that does not
    accept them) refuses the sandbox; they used to pass with nothing observed."""
    plan = gvisor_plan(workspace)
    probe = replace(plan.probe, na=())
    agent = plan.container.command[plan.container.command.index("--"):]
    plan = replace(plan, probe=probe, container=replace(plan.container, command=probe.to_args() + agent))
    with pytest.raises(ProbeFailed) as info:
        launch.run(gvisor, plan, Recorder())
    assert {c.id for c in info.value.report.failed} == {"nnp", "mounts.workspace", "limits.pids"}
    assert not (workspace / MARKER).exists()


def test_a_gvisor_plan_run_under_runc_fails_the_probe_and_the_agent_never_runs(gvisor, workspace, probe_only):
    plan = gvisor_plan(workspace)
    plan = replace(plan, container=replace(plan.container, runtime="runc"))
    with pytest.raises(ProbeFailed) as info:
        launch.run(gvisor, plan, Recorder())
    failed = {c.id: c for c in info.value.report.failed}
    assert "kernel.runtime" in failed and failed["kernel.runtime"].observed.startswith("host: Linux version")
    assert not (workspace / MARKER).exists()


def test_a_runc_plan_run_under_runsc_fails_the_probe(gvisor, workspace, probe_only):
    plan = gvisor_plan(workspace, runtime=Runtime.RUNC)
    assert plan.probe.kernel == "host"
    plan = replace(plan, container=replace(plan.container, runtime=NONE_NAME))
    with pytest.raises(ProbeFailed) as info:
        launch.run(gvisor, plan, Recorder())
    failed = {c.id for c in info.value.report.failed}
    # kernel.runtime, and none of gVisor's differences are accepted for a runc plan either
    assert {"kernel.runtime", "nnp", "mounts.workspace", "limits.pids"} <= failed, failed
    assert not (workspace / MARKER).exists()


class RuntimeSwapped:
    """The engine, but every container is created under `runtime` whatever the spec says."""

    def __init__(self, engine, runtime):
        self.engine, self.runtime = engine, runtime

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def create(self, spec):
        return self.engine.create(replace(spec, runtime=self.runtime))


@pytest.mark.parametrize("planned, actual", [(Runtime.GVISOR, "runc"), (Runtime.RUNC, NONE_NAME)])
def test_the_inspect_comparison_catches_a_runtime_mismatch(gvisor, workspace, planned, actual):
    plan = gvisor_plan(workspace, runtime=planned)
    spec = replace(plan.container, runtime=actual, name=plan.container.name + "-cmp")
    ref = gvisor.create(spec)
    try:
        diffs = compare_inspect(plan.container, gvisor.inspect(ref), gvisor.image_env(spec.image))
    finally:
        gvisor.remove(ref)
    assert diffs == [f"Runtime: the plan says {plan.container.runtime!r}, the container has {actual!r}"]
    listener = Recorder()
    with pytest.raises(ProbeFailed, match="Runtime"):   # and launch refuses it before the start
        launch.run(RuntimeSwapped(gvisor, actual), plan, listener)
    assert not (workspace / MARKER).exists() and listener.out == b""
    assert gvisor.list(f"dev.sandbox.workspace={workspace}") == []


def test_gvisor_sets_no_new_privs_without_the_option_so_the_nnp_tamper_cannot_apply(gvisor):
    """Why nnp has no tamper under gVisor: runsc gives every process no_new_privs, with or without
    --security-opt no-new-privileges (prctl PR_GET_NO_NEW_PRIVS = 1). Under runc it is 0 without."""
    code = "import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"
    seen = {}
    for name in (NONE_NAME, "runc"):
        out = subprocess.run(["docker", "run", "--rm", "--runtime", name, "--network", "none", "--user", "1000:1000",
                              "--entrypoint", "python3", images.AGENT_IMAGE, "-c", code],
                             capture_output=True, text=True, timeout=60)
        seen[name] = out.stdout.strip()
    assert seen == {NONE_NAME: "1", "runc": "0"}


def test_proxy_mode_works_under_gvisor(gvisor, workspace, tmp_path):
    """The internal network and the Squid container as under runc; gVisor's sockets use the host
    network stack inside the sandbox's namespace (sandbox-runsc-hostinet), and every egress check passes."""
    policy = replace(preset("ci"), runtime=Runtime.GVISOR)
    from launcher.policy.policy import with_allowed
    policy = with_allowed(policy, ("allowed.test",))
    plan = compile_policy(policy, hostfacts.gather(policy, str(workspace), images.probe_volume_name(),
                                              images.proxy_image().tag),
                          command=("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))
    assert plan.container.runtime == runtimes.GVISOR[NetworkMode.PROXY][0]
    outcome = launch.run(gvisor, plan, Recorder())
    assert outcome.probe.ok, [c for c in outcome.probe.failed]
    assert {c.id for c in outcome.probe.checks} >= {"egress.proxy", "egress.denied", "egress.direct", "egress.dns"}
    assert (workspace / MARKER).exists()


def test_sandbox_run_with_the_gvisor_preset(gvisor, workspace):
    out = subprocess.run([sys.executable, "-m", "launcher", "run", "--policy", "untrusted-gvisor", "--workspace-mode",
                          "bind", "--workspace", str(workspace), "--", "cat", "/proc/version"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "probe passed" in out.stderr and out.stdout.startswith("Linux version")


@pytest.mark.parametrize("bomb", ["fork", "memory"])
def test_the_bombs_the_selftest_does_not_run_inside_gvisor_are_bounded(gvisor, workspace, bomb):
    """limits.fork_bomb and limits.memory_bomb (launcher/selftest/cases.py NOT_UNDER_GVISOR): the
    limits hold the whole sandbox on the host's side; past them the sandbox ends, it never runs on."""
    bb = "/.sandbox/probe/busybox"
    body = {"fork": f"i=0; while [ $i -lt 8000 ]; do {bb} sleep 60 & i=$((i+1)); done; echo BOMB-DONE $i",
            "memory": f"{bb} head -c 3221225472 /dev/zero | {bb} tail >/dev/null; echo BOMB-DONE $?"}[bomb]
    listener = Recorder()
    # the preset's memory limit, smaller: the same cgroup bound, and filling the preset's 2 GiB took
    # about 90 s under gVisor
    plan = gvisor_plan(workspace, command=(bb, "sh", "-c", body), memory_bytes=512 << 20 if bomb == "memory" else 0)
    outcome = launch.run(gvisor, plan, listener)
    assert outcome.probe.ok and not outcome.timed_out
    done = [line for line in listener.out.decode().splitlines() if line.startswith("BOMB-DONE")]
    assert outcome.exit_code != 0 or done in ([], ["BOMB-DONE 137"]), (outcome.exit_code, listener.out[-300:])
    assert gvisor.list(f"dev.sandbox.workspace={workspace}") == []


def test_sandbox_doctor_reports_gvisor_and_fix_is_a_no_op_once_registered(gvisor):
    before = gvisor.info()["Runtimes"]
    out = subprocess.run([sys.executable, "-m", "launcher", "doctor", "--fix", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert "the engine has sandbox-runsc, sandbox-runsc-hostinet" in out.stderr and "registered " not in out.stderr
    found = {f["check"]: f for f in json.loads(out.stdout)}
    assert found["gvisor"]["status"] == "ok" and "sandbox-runsc" in found["gvisor"]["detail"]
    assert gvisor.info()["Runtimes"] == before


def test_describe_gives_the_attestation_the_engine_name_and_version(gvisor):
    gv = runtimes.describe(gvisor, Runtime.GVISOR, NetworkMode.NONE)
    assert gv.registered and gv.name == NONE_NAME and gv.path and gv.version and gv.args == runtimes.GVISOR[NetworkMode.NONE][1]
    proxy = runtimes.describe(gvisor, Runtime.GVISOR, NetworkMode.PROXY)
    assert proxy.name == "sandbox-runsc-hostinet" and proxy.version == gv.version
    runc = runtimes.describe(gvisor, Runtime.RUNC)
    assert runc.name == "runc" and runc.version and runc.registered


def test_threads_start_under_gvisor_and_the_filter_still_refuses_namespaces(gvisor, workspace):
    """Docker's default profile under this runsc made clone3 answer EPERM (its errnoRet ignored), so
    no thread could start: the gVisor profile (runtimes.GVISOR_SECCOMP) lets gVisor answer ENOSYS."""
    code = ("import threading, ctypes, os; t = threading.Thread(target=print, args=('THREAD-OK',)); t.start(); t.join(); "
            "print('UNSHARE', ctypes.CDLL(None, use_errno=True).unshare(0x10000000), ctypes.get_errno())")
    listener = Recorder()
    outcome = launch.run(gvisor, gvisor_plan(workspace, command=("python3", "-c", code)), listener)
    assert outcome.probe.ok and outcome.exit_code == 0, listener.out
    assert b"THREAD-OK" in listener.out and b"UNSHARE -1 1" in listener.out   # EPERM


def test_the_attestation_names_gvisor_and_its_version(gvisor, workspace, tmp_path):
    record = tmp_path / "run.json"
    out = subprocess.run([sys.executable, "-m", "launcher", "run", "--policy", "untrusted-gvisor", "--workspace-mode",
                          "bind", "--workspace", str(workspace), "--attest", str(record), "--", "true"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    predicate = json.loads(record.read_text())["predicate"]
    assert predicate["runtime"]["name"] == "gvisor" and predicate["runtime"]["engine_runtime"] == NONE_NAME
    assert predicate["runtime"]["version"].startswith("runsc version")
    assert predicate["inspect"]["runtime"] == NONE_NAME
