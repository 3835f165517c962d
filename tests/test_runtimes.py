"""runtime: runc | gvisor without an engine: the policy field, its layer rule, the compiled plan,
the engine names, `sandbox doctor`'s findings and `--fix`'s daemon.json merge."""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import fake_facts
from fakes import Recorder
from test_gvisor import NONE_NAME, gvisor_plan

from launcher.doctor import registration
from launcher.doctor.doctor import Status
from launcher.errors import EngineError, PolicyError
from launcher.launch import launch
from launcher.pipeline import stack
from launcher.plan import runtimes
from launcher.plan.compiler import compile_policy
from launcher.policy import layers
from launcher.policy.layers import LayerKind, full_layer
from launcher.policy.model import NetworkMode, Runtime
from launcher.policy.policy import parse_policy
from launcher.targets import argv, compose

BASE = b"version: 1\nname: b\ndescription: d\ntmpfs: [{target: /tmp, size: 64m}]\n"
REGISTERED = {"Runtimes": {"runc": {"path": "runc"}, **runtimes.registration("/usr/bin/runsc")}}


def test_the_default_is_runc_and_a_bad_value_names_the_key():
    assert parse_policy(BASE, "p.yaml").runtime is Runtime.RUNC
    assert parse_policy(BASE + b"runtime: gvisor\n", "p.yaml").runtime is Runtime.GVISOR
    with pytest.raises(PolicyError) as info:
        parse_policy(BASE + b"runtime: kata\n", "p.yaml")
    assert info.value.problems[0].path == "runtime"


def test_a_later_layer_may_ask_for_gvisor_never_back_to_runc():
    base = parse_policy(BASE, "b.yaml")
    prior = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    org = stack.parse_layer(b"version: 1\nruntime: gvisor\n", "org.yaml", LayerKind.ORG)
    repo = stack.parse_layer(b"version: 1\nruntime: runc\n", ".sandbox.yaml", LayerKind.REPO)
    assert layers.effective(base, [org, repo], prior=prior).policy.runtime is Runtime.GVISOR
    gvisor = parse_policy(BASE + b"runtime: gvisor\n", "b.yaml")
    prior = layers.effective(gvisor, [full_layer(LayerKind.BASE, gvisor)])
    assert layers.effective(gvisor, [repo], prior=prior).policy.runtime is Runtime.GVISOR


@pytest.mark.parametrize("mode, name", [(NetworkMode.NONE, "sandbox-runsc"), (NetworkMode.PROXY, "sandbox-runsc-hostinet")])
def test_the_compiled_plan_names_the_engine_runtime_and_the_kernel(mode, name):
    text = BASE + b"runtime: gvisor\n" + (b"network: {mode: proxy, allow: [a.test]}\n" if mode is NetworkMode.PROXY else b"")
    plan = compile_policy(parse_policy(text, "p.yaml"), fake_facts())
    assert plan.container.runtime == name and "kernel=gvisor" in plan.container.command
    assert f"--runtime={name}" in argv.to_argv(plan)
    assert compose.to_compose(plan)["services"]["sandbox"]["runtime"] == name
    runc = compile_policy(parse_policy(BASE, "p.yaml"), fake_facts())
    assert runc.container.runtime == "runc" and "kernel=host" in runc.container.command
    assert not any(a.startswith("--runtime") for a in argv.to_argv(runc))


def test_gvisor_without_a_tmp_mount_gets_an_empty_read_only_one():
    plan = compile_policy(parse_policy(b"version: 1\nname: b\ndescription: d\nruntime: gvisor\n", "p.yaml"), fake_facts())
    tmp = [m for m in plan.container.mounts if m.target == "/tmp"]
    assert len(tmp) == 1 and tmp[0].read_only and "/tmp" not in plan.probe.writable


def test_missing_says_which_name_the_engine_lacks():
    assert runtimes.missing({"Runtimes": {"runc": {}}}, Runtime.RUNC, NetworkMode.NONE) == ""
    assert runtimes.missing({"Runtimes": {"runc": {}}}, Runtime.GVISOR, NetworkMode.NONE) == "sandbox-runsc"
    assert runtimes.missing(REGISTERED, Runtime.GVISOR, NetworkMode.PROXY) == ""
    other_args = {"Runtimes": {"sandbox-runsc": {"path": "/usr/bin/runsc"}}}
    assert runtimes.missing(other_args, Runtime.GVISOR, NetworkMode.NONE) == "sandbox-runsc"


def test_fact_gives_the_engine_name_path_and_version_for_the_attestation():
    version = {"Components": [{"Name": "runc", "Version": "1.1.5+ds1"}]}
    runc = runtimes.fact(REGISTERED, version, Runtime.RUNC)
    assert (runc.name, runc.version, runc.registered) == ("runc", "1.1.5+ds1", True)
    gv = runtimes.fact(REGISTERED, version, Runtime.GVISOR, NetworkMode.NONE, lambda path: f"v-of-{path}")
    assert (gv.name, gv.path, gv.version, gv.args) == ("sandbox-runsc", "/usr/bin/runsc", "v-of-/usr/bin/runsc",
                                                      ("--network=none", "--oci-seccomp"))
    assert not runtimes.fact({"Runtimes": {}}, version, Runtime.GVISOR, run_version=lambda p: "x").registered


def test_doctor_findings(trusted_runsc):
    assert registration.findings({}, None)[0].status is Status.OK          # not installed: only gvisor needs it
    assert registration.findings(REGISTERED, trusted_runsc)[0].fix == ""
    lacking = registration.findings({"Runtimes": {"runc": {}}}, trusted_runsc)[0]
    assert lacking.status is Status.WARN and "doctor --fix" in lacking.fix


def test_the_merge_keeps_every_other_key_and_runtime_and_is_idempotent():
    text = json.dumps({"debug": True, "runtimes": {"kata": {"path": "/opt/kata"}}})
    new, changed = registration.merged(text, "/usr/bin/runsc")
    doc = json.loads(new)
    assert changed and doc["debug"] is True and doc["runtimes"]["kata"] == {"path": "/opt/kata"}
    assert doc["runtimes"]["sandbox-runsc"]["runtimeArgs"] == ["--network=none", "--oci-seccomp"]
    assert registration.merged(new, "/usr/bin/runsc") == (new, False)
    assert json.loads(registration.merged("", "/usr/bin/runsc")[0])["runtimes"].keys() == {"sandbox-runsc",
                                                                                            "sandbox-runsc-hostinet"}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"runtimes": []}'])
def test_the_merge_refuses_a_file_it_cannot_read_and_changes_nothing(text):
    with pytest.raises(EngineError, match="nothing was changed"):
        registration.merged(text, "/usr/bin/runsc")


def test_fix_writes_a_backup_then_the_merge_then_reloads(tmp_path, monkeypatch, trusted_runsc):
    config, pidfile = tmp_path / "daemon.json", tmp_path / "docker.pid"
    config.write_text('{"log-level": "warn"}')
    pidfile.write_text("4242\n")
    sent, seen = [], iter([False, False, True])
    monkeypatch.setattr(registration.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    done = registration.fix(trusted_runsc, path=str(config), pidfile=str(pidfile), registered=lambda: next(seen))
    assert done.changed and done.reloaded and sent == [(4242, signal.SIGHUP)]
    assert json.loads((tmp_path / done.backup.rsplit("/", 1)[1]).read_text()) == {"log-level": "warn"}
    assert json.loads(config.read_text())["log-level"] == "warn"
    again = registration.fix(trusted_runsc, path=str(config), pidfile=str(pidfile), registered=lambda: True)
    assert not again.changed and not again.reloaded and again.backup == "" and len(sent) == 1


def test_fix_says_when_dockerd_did_not_pick_it_up(tmp_path, monkeypatch, trusted_runsc):
    (tmp_path / "docker.pid").write_text("4242")
    monkeypatch.setattr(registration.os, "kill", lambda pid, sig: None)
    with pytest.raises(EngineError, match="did not pick up"):
        registration.fix(trusted_runsc, path=str(tmp_path / "daemon.json"), pidfile=str(tmp_path / "docker.pid"),
                         registered=lambda: False, wait=0.3)


def test_lint_warns_that_proxy_mode_under_gvisor_uses_the_host_network_stack(tmp_path):
    from launcher.check import lintstack

    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: p\ndescription: d\nruntime: gvisor\nnetwork: {mode: proxy, allow: [a.test]}\n")
    found = [f for f in lintstack.check((str(path),), str(tmp_path))[0] if f.code == "gvisor-hostinet"]
    assert len(found) == 1 and found[0].path == "runtime"


def test_explain_names_gvisor_where_it_enforces():
    from launcher.check import explain

    gv = stack.load_base("untrusted-gvisor")
    row = {r.field: r for r in explain.rows(gv)}["runtime"]
    assert row.enforcement.component is explain.Component.GVISOR and row.enforcement.checks == ("kernel.runtime",)
    under = dict(explain.always("run", gv.policy.runtime))
    assert under["system call filter"].component is explain.Component.GVISOR
    runc = dict(explain.always("run", stack.load_base("untrusted").policy.runtime))
    assert runc["system call filter"].component is explain.Component.SECCOMP


def test_net_raw_under_gvisor_is_refused_at_compile():
    policy = parse_policy(BASE + b"runtime: gvisor\ncapabilities: [CHOWN, NET_RAW]\n", "p.yaml")
    with pytest.raises(PolicyError) as info:
        compile_policy(policy, fake_facts())
    assert info.value.problems[0].path == "capabilities[1]" and "net-raw" in info.value.problems[0].hint
    compile_policy(parse_policy(BASE + b"capabilities: [NET_RAW]\n", "p.yaml"), fake_facts())   # runc: fine


def test_the_gvisor_seccomp_profile_file_is_the_inline_one_and_targets_use_the_file():
    from pathlib import Path

    assert Path(runtimes.GVISOR_SECCOMP_FILE).read_text() == runtimes.GVISOR_SECCOMP + "\n"
    plan = compile_policy(parse_policy(BASE + b"runtime: gvisor\n", "p.yaml"), fake_facts())
    assert f"seccomp={runtimes.GVISOR_SECCOMP}" in plan.container.security_opt
    assert f"--security-opt=seccomp={runtimes.GVISOR_SECCOMP_FILE}" in argv.to_argv(plan)
    assert compose.to_compose(plan)["services"]["sandbox"]["security_opt"] == [
        "no-new-privileges", f"seccomp={runtimes.GVISOR_SECCOMP_FILE}"]
    profile = json.loads(runtimes.GVISOR_SECCOMP)
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW" and {"unshare", "setns", "mount", "keyctl", "bpf", "ptrace"} <= \
        set(profile["syscalls"][0]["names"])
    runc = compile_policy(parse_policy(BASE, "p.yaml"), fake_facts())
    assert runc.container.security_opt == ("no-new-privileges",)   # Docker's own default profile


@pytest.mark.parametrize("ci, podman", [(False, False), (True, False), (True, True)])
def test_the_default_selftest_skips_a_gvisor_preset_without_gvisor_except_in_ci(monkeypatch, ci, podman):
    """…and under podman always (`runtime: gvisor` is refused there, CI or not), as are the
    proxy-mode presets there."""
    from launcher.engine.enginefake import FakeEngine
    from launcher.selftest import runner, testnet
    from test_doctor import PODMAN_VERSION

    engine = FakeEngine(engine_info={"Runtimes": {"runc": {"path": "runc"}}}, **({"engine_version": PODMAN_VERSION} if podman else {}))

    class Net:
        network, canary_ip = "n", ""

        def __init__(self, *args):
            pass

        def close(self):
            pass

    ran, said = [], []
    monkeypatch.setattr(runner.images, "ensure_for", lambda *a, **k: None)
    monkeypatch.setattr(runner.host, "in_ci", lambda: ci)
    monkeypatch.setattr(testnet, "Internet", Net)
    monkeypatch.setattr(runner, "run_preset", lambda engine, ref, **kw: ran.append(ref))
    runner.run(engine, (), said.append)
    assert ("untrusted-gvisor" in ran) is (ci and not podman) and "untrusted" in ran
    assert any("skipping untrusted-gvisor" in m for m in said) is not (ci and not podman)
    assert any("refused under podman" in m for m in said) is podman
    # proxy mode runs on both engines (on podman without its DNS server: ProxySpec.hosts_entry)
    assert "ci" in ran and "devcontainer" in ran and not any("proxy mode" in m for m in said)


def test_doctor_fix_registers_only_a_runsc_that_only_root_can_replace(tmp_path):
    """Issue 24 case 11: root's dockerd runs what is registered, so a runsc that someone else owns or
    can write, or that lies in a directory others can write, is refused, judged by its resolved path."""
    import shutil

    config, planted, link = tmp_path / "daemon.json", tmp_path / "runsc", tmp_path / "runsc-link"
    shutil.copy("/bin/true", planted)
    link.symlink_to(planted)
    if os.geteuid() == 0:
        os.chown(planted, 1000, 1000)
    for path in (str(planted), str(link)):    # not root's (or, run as a user, in a user's directory)
        assert registration.untrusted(path)
        with pytest.raises(EngineError, match="not registering"):
            registration.fix(path, path=str(config), pidfile=str(tmp_path / "pid"), registered=lambda: True)
        assert "is not registered by us" in registration.findings({"Runtimes": {}}, path)[0].detail
    assert not config.exists()
    if os.geteuid() == 0:
        os.chown(planted, 0, 0)
        planted.chmod(0o757)
        assert "writable by everyone" in registration.untrusted(str(link))
        planted.chmod(0o755)
        tmp_path.chmod(0o775)
        assert "writable by its group" in registration.untrusted(str(link))
    assert registration.untrusted(os.path.realpath(shutil.which("true"))) == ""


# The gVisor preset without an engine (moved from tests/test_gvisor.py, whose other tests need one).
def test_the_preset_asks_for_gvisor_and_compiles_to_runsc(workspace):
    plan = gvisor_plan(workspace)
    assert plan.container.runtime == NONE_NAME and plan.probe.kernel == "gvisor"
    assert "kernel=gvisor" in plan.container.command and plan.probe.seccomp == 2 and plan.probe.nnp == 1


def test_an_engine_without_the_runtime_is_refused_with_the_fix(workspace):
    from launcher.engine.enginefake import FakeEngine

    no_gvisor = FakeEngine(engine_info={"Runtimes": {"runc": {"path": "runc"}}})
    with pytest.raises(EngineError, match="doctor --fix") as info:
        launch.run(no_gvisor, gvisor_plan(workspace), Recorder())
    assert not no_gvisor.calls                   # refused before anything was made
    assert info.value.exit_code == 121
