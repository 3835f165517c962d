"""`sandbox selftest`: the case matrix as data, the script it renders, a real run of a preset, and
proof that the matrix catches escapes: run against deliberately weakened containers, the cases fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import docker_sdk
from launcher.engine import images
from launcher.host import scan
from launcher.selftest import scratch, testnet
from launcher.selftest import runner as st
from launcher.selftest import cases as sc

SANDBOX = [sys.executable, "-m", "launcher"]


def test_the_fork_bomb_kills_only_its_own_sleeps_not_the_hosts(tmp_path):
    """Run on the host (as a weakened sandbox with the host's PIDs sees it): the bomb's sleeps go,
    a bystander `sleep` of another process group lives on (a kill by name ended it)."""
    busybox = "/bin/busybox"
    if not os.access(busybox, os.X_OK):
        pytest.skip("needs busybox-static") if not os.environ.get("CI") else pytest.fail("no /bin/busybox")
    (tmp_path / "pids.max").write_text("4\n")
    bomb = next(c for c in sc.LIMITS if c.id == "limits.fork_bomb")
    case = sc.Case(id=bomb.id, expected=bomb.expected, timeout=bomb.timeout,
                   body=f'cg_file() {{ echo {tmp_path}/pids.max; }}\n{bomb.body}')
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        out = subprocess.run(["bash", "-c", st.script((case,), {"BB": busybox})], capture_output=True, text=True,
                             timeout=60, start_new_session=True).stdout
        assert "SELFTEST\tlimits.fork_bomb\t" in out and "started 68 of 68" in out, out
        assert bystander.poll() is None, "the host's sleep was killed"
    finally:
        bystander.kill()
        bystander.wait()


def test_at_least_forty_cases_per_mode_with_unique_ids():
    ids = [c.id for c in sc.IN_SANDBOX] + list(sc.OUTSIDE)
    assert len(ids) == len(set(ids))
    for mode in ("none", "proxy"):
        assert len(sc.for_mode(mode)) + sum(mode in m for _, m in sc.OUTSIDE.values()) >= 40


def test_the_issue_floor_is_covered():
    ids = {c.id for c in sc.IN_SANDBOX} | set(sc.OUTSIDE)
    for needed in ("fs.write_root", "fs.write_etc", "fs.write_usr", "fs.write_home", "protect.git", "protect.git_config",
                   "symlink.host_path", "creds.env", "creds.proc_environ", "creds.files", "sock.runtime_paths",
                   "sock.parent_dirs", "priv.setuid_files", "priv.su", "priv.unshare_user", "priv.mount", "priv.mknod",
                   "priv.keyctl", "priv.raw_socket", "proc.sys_write", "sys.write", "cgroup.mkdir", "dev.block",
                   "proc.host_processes", "limits.fork_bomb", "limits.memory_bomb", "limits.tmpfs_fill",
                   "outside.time_limit", "net.direct_public", "net.dns", "net.ipv6", "host.gateway", "net.metadata",
                   "host.listener", "proxy.disallowed_host", "proxy.ip_literal", "proxy.localhost", "proxy.other_port",
                   "proxy.lookalike_suffix", "proxy.wildcard_apex", "proxy.host_mismatch"):
        assert needed in ids, needed


def test_public_and_metadata_addresses_are_only_tried_without_a_network():
    for case in sc.IN_SANDBOX:
        if any(addr in case.body for addr in ("1.1.1.1", "169.254.169.254", "10.0.0.1")) and "expect_denied" not in case.body:
            assert case.modes == ("none",) and "connect_unrouted" in case.body, case.id


def test_a_case_that_does_not_report_is_an_error():
    cases = sc.for_mode("none")[:3]
    out = f"SELFTEST\t{cases[0].id}\t12\tpass\tRead-only file system\nSELFTEST\t{cases[1].id}\t3\tFAIL\tcreated\n"
    results = st.parse(out, cases)
    assert [r.verdict for r in results] == [st.PASS, st.FAIL, st.ERROR]
    assert results[0].ms == 12 and "did not report" in results[2].observed


def _run_locally(cases, plants=()):
    """The case script run by this host's bash (only lib.sh's shell helpers are needed)."""
    proc = subprocess.run(["bash", "-c", st.script(cases, {"WS": "/nonexistent"}, plants)], capture_output=True,
                          text=True, timeout=60)
    return {r.id: r for r in st.parse(proc.stdout, cases)}, proc.stdout


def test_a_case_cut_off_by_its_time_limit_fails_whatever_it_said_before():
    cases = (sc.Case(id="t.slow", expected="-", body='ok "looked at half"; sleep 5', timeout=1),
             sc.Case(id="t.silent", expected="-", body="sleep 5", timeout=1),
             sc.Case(id="t.quick", expected="-", body='ok "done"', timeout=5))
    results, _ = _run_locally(cases)
    assert results["t.slow"].verdict == st.FAIL and "timed out after 1 s" in results["t.slow"].observed
    assert results["t.silent"].verdict == st.FAIL and results["t.quick"].verdict == st.PASS


def test_plants_are_no_cases_and_report_no_verdict():
    assert not {c.id for c in sc.PLANTS} & {c.id for c in sc.IN_SANDBOX}
    assert "net.udp_canary" not in {c.id for c in sc.IN_SANDBOX}
    plant = sc.Case(id="report.x", expected="-", body='ok "planted"')
    results, out = _run_locally((), (plant,))
    assert results == {} and "SELFTEST-PLANT\treport.x" in out


def test_the_script_defines_and_runs_every_case_once():
    cases = sc.for_mode("proxy")
    text = st.script(cases, {"MODE": "proxy", "HOST_IPS": "a b'c"})
    assert text.count("\nrun_case ") == len(cases) and "export HOST_IPS='a b'\\''c'" in text
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_report_and_table():
    result = st.PresetResult(policy="p", mode="none", cases=(
        st.CaseResult(id="a", expected="x", observed="y", verdict=st.PASS),
        st.CaseResult(id="b", expected="x", observed="z", verdict=st.ERROR)))
    data = st.to_json((result,))
    assert data["ok"] is False and data["presets"][0]["counts"] == {"pass": 1, "FAIL": 0, "ERROR": 1}
    assert "1/2 blocked" in st.table(result) and "ERROR" in st.table(result)


# --- real engine ---------------------------------------------------------------------------------

@pytest.mark.engine
def test_selftest_of_a_preset_passes_and_writes_the_report(engine, tmp_path):
    report = tmp_path / "selftest.json"
    result = subprocess.run(SANDBOX + ["selftest", "--policy", "read-only", "--output", str(report)],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    preset = data["presets"][0]
    assert data["ok"] and preset["policy"] == "read-only" and len(preset["cases"]) >= 40
    assert preset["counts"] == {"pass": len(preset["cases"]), "FAIL": 0, "ERROR": 0}
    assert "CASE" in result.stdout and "selftest passed (read-only: " in result.stdout


@pytest.mark.engine
def test_an_unknown_policy_is_refused_before_anything_runs(engine):
    result = subprocess.run(SANDBOX + ["selftest", "--policy", "no-such-preset"], capture_output=True, text=True)
    assert result.returncode == 120 and "Traceback" not in result.stderr


# What --privileged would add. This engine refuses --privileged for root ("unable to apply caps":
# its own bounding set lacks CAP_SYS_RESOURCE), so the weak container gets every other capability
# and this root prelude opens up the rest itself before the cases run.
_WEAKEN = r"""
mount -o remount,rw /sys
for d in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$d" 2>/dev/null; done
mkdir -p /sys/fs/cgroup/hierarchy-root && mount -t cgroup -o net_cls cgroup /sys/fs/cgroup/hierarchy-root
cp /bin/true /usr/local/bin/setuid-true && chmod 4755 /usr/local/bin/setuid-true
"""


def _weak_run(engine, tmp_path, workspace, mode, network, extra_env=None, cases=None, prelude=_WEAKEN, plants=sc.PLANTS):
    """The case script in a deliberately weakened container: root, every capability, seccomp off,
    /proc unmasked, /sys and cgroups writable, a block device, the engine's socket, a token in the
    environment, a setuid binary, a /tmp larger than declared, host PIDs."""
    home = tmp_path / "root-home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text("not a key\n")
    listener, name = st.HostListener(), f"sandbox-test-weak-{os.getpid()}-{mode}"
    try:
        cases = cases or sc.for_mode(mode)
        params = {"MODE": mode, "WS": "/workspace", "BB": "/.sandbox/probe/busybox", "LISTEN_PORT": str(listener.port),
                  "HOST_IPS": "127.0.0.1", "CANARY_IP": "", "HOST_CANARY_DIR": "/hostdir", "TMPFS": "/tmp:1048576",
                  "HOST_CANARY": str(tmp_path / "git-canary"), "TRACKED": scratch.TRACKED,
                  **(extra_env or {})}
        api = docker_sdk().api
        host_config = api.create_host_config(
            network_mode=network, pid_mode="host", cap_add=["ALL"], cap_drop=["SYS_RESOURCE"], shm_size="600m",
            security_opt=["seccomp=unconfined", "apparmor=unconfined"], tmpfs={"/tmp": "size=8m"},
            ulimits=testnet.tool_ulimits(engine),
            devices=["/dev/null:/dev/mem:r", "/dev/loop0:/dev/loop0:r"],
            binds={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "ro"},
                   images.probe_volume_name(): {"bind": "/.sandbox/probe", "mode": "rw"},
                   str(workspace): {"bind": "/workspace", "mode": "rw"}, str(home): {"bind": "/root", "mode": "rw"},
                   str(tmp_path): {"bind": "/hostdir", "mode": "rw"}})
        host_config.update(MaskedPaths=[], ReadonlyPaths=[])   # `--security-opt systempaths=unconfined`
        if engine.dialect.name == "podman":   # podman's words: it ignores MaskedPaths, and its default pids limit is 2048
            host_config.update(PidsLimit=-1, SecurityOpt=host_config["SecurityOpt"] + ["unmask=ALL"])
        api.create_container(images.AGENT_IMAGE, ["bash", "-c", prelude + st.script(cases, params, plants)], name=name,
                             user="0", host_config=host_config, labels={"dev.sandbox.managed": "1"},
                             environment={"GITHUB_TOKEN": "ghp_" + "x" * 36, "HTTP_PROXY": "http://allowed.test:80"})
        api.start(name)
        api.wait(name, timeout=900)
        out = api.logs(name, stdout=True, stderr=False)
        return {r.id: r for r in st.parse(out.decode(errors="replace"), cases)}, listener.peers
    finally:
        listener.close()
        engine.remove(name)   # left "created" when the engine refuses to start it


# This kernel has neither /proc/kcore nor /proc/sysrq-trigger (nothing to unmask), so where they
# are missing a stand-in /proc holds a readable kcore and a writable trigger: it shows that the two
# cases fail when the files are there and open.
_STAND_IN_PROC = r"""
if [ ! -e /proc/kcore ] || [ ! -e /proc/sysrq-trigger ]; then
  mount -t tmpfs stand-in-proc /proc && head -c 64 /dev/zero >/proc/kcore && : >/proc/sysrq-trigger
fi
"""
_NEEDS_STAND_IN_PROC = {"proc.kcore", "proc.sysrq"}


def _caught(results) -> set[str]:
    return {case_id for case_id, r in results.items() if r.verdict == st.FAIL}


@pytest.mark.engine
def test_the_matrix_catches_a_weakened_container(engine, tmp_path):
    # A scratch git repository, as `sandbox selftest` uses; in this container its .git is writable.
    workspace, canary_dir = scratch.scratch_workspace("sandbox-test-weak-"), scratch.scratch_workspace("sandbox-test-weak-")
    git_canary = os.path.join(canary_dir, "git-canary")
    try:
        before = scan.snapshot(workspace)
        # Host network: every host address is reachable; public ones are never tried (a route exists).
        results, peers = _weak_run(engine, tmp_path, workspace, "none", "host", {"HOST_CANARY": git_canary})
        # The report.* cases only plant (that is allowed); outside.surfaces_reported judges them.
        expected = {c.id for c in sc.for_mode("none")} - _NEEDS_STAND_IN_PROC
        assert _caught(results) == expected, sorted(expected - _caught(results))
        assert not set(sc.PLANTED) & set(results)   # plants are no cases: outside.surfaces_reported judges them
        assert peers, "the host's listener should have been reached"
        assert not (tmp_path / "planted").exists() and not [p for p in os.listdir(workspace) if p.startswith(".selftest")]
        # The outside checks judge what the launcher saw; fed what this run left, each fails.
        assert st.judge_listener(peers).verdict == st.FAIL
        # The commondir and skip-worktree escapes were left in place: host git runs the planted
        # fsmonitor and no longer shows the changed file. The report still lists every planted surface.
        judged = {r.id: r for r in st.git_judgments(workspace, before, git_canary)}
        assert judged["outside.surfaces_reported"].verdict == st.PASS, judged["outside.surfaces_reported"].observed
        host_git = judged["outside.host_git"]
        assert host_git.verdict == st.FAIL and "canary" in host_git.observed and scratch.TRACKED in host_git.observed
        assert os.path.exists(git_canary) and not any(os.path.lexists(os.path.join(workspace, p)) for p in sc.PLANTED.values())
    finally:
        scratch.remove_tree(workspace.rsplit("/", 1)[0])
        scratch.remove_tree(canary_dir.rsplit("/", 1)[0])


@pytest.mark.engine
def test_the_proc_cases_catch_a_readable_kcore_and_a_writable_sysrq_trigger(engine, tmp_path, workspace):
    cases = tuple(c for c in sc.for_mode("none") if c.id in _NEEDS_STAND_IN_PROC)
    results, _ = _weak_run(engine, tmp_path, workspace, "none", "none", cases=cases, prelude=_WEAKEN + _STAND_IN_PROC)
    assert _caught(results) == _NEEDS_STAND_IN_PROC


# Controls: they must answer 200, or every denial after them would prove nothing.
_CONTROLS = {"proxy.control_allowed", "proxy.wildcard_control"}


@pytest.mark.engine
def test_the_proxy_cases_catch_a_careless_proxy(engine, tmp_path, workspace):
    # No Squid: the sandbox sits on the (internal) test network and "the proxy" is the upstream as an
    # open proxy that tunnels anything and trusts the Host header; its gateway is the host's bridge.
    from launcher.selftest.testnet import Internet

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    internet = Internet(engine, f"sandbox-test-weak-{os.getpid()}", open_proxy=True)
    try:
        results, _ = _weak_run(engine, tmp_path, workspace, "proxy", internet.network, {"CANARY_IP": internet.canary_ip})
        canary_saw = internet.seen_by_canary()
    finally:
        internet.close()
    # The cases both modes share were caught on the host network above.
    expected = {c.id for c in sc.for_mode("proxy") if c.modes == ("proxy",)} - _CONTROLS
    assert expected <= _caught(results), sorted(expected - _caught(results))
    assert all(results[c].verdict == st.PASS for c in _CONTROLS)
    # net.direct_canary's datagram: nothing inside sees it arrive; the canary's log judges it (outside.canary_silent).
    assert any(line.startswith("DNS ") for line in canary_saw)
    assert st.judge_canary(canary_saw).verdict == st.FAIL


@pytest.mark.engine
def test_the_controls_report_an_error_when_the_proxy_answers_nothing(engine, tmp_path, workspace):
    cases = tuple(c for c in sc.for_mode("proxy") if c.id in _CONTROLS)
    results, _ = _weak_run(engine, tmp_path, workspace, "proxy", "none", {"HTTP_PROXY": "http://127.0.0.1:9"}, cases=cases)
    assert {r.verdict for r in results.values()} == {st.ERROR}


def test_the_outside_checks_fail_on_what_an_escape_leaves():
    assert st.judge_listener(["172.17.0.2"]).verdict == st.FAIL and st.judge_listener([]).verdict == st.PASS
    assert st.judge_host_dir(("README.md", "planted"), ("README.md",)).verdict == st.FAIL
    assert st.judge_host_dir(("README.md",), ("README.md",)).verdict == st.PASS
    assert st.judge_canary(["CONN 80 172.18.0.3"]).verdict == st.FAIL and st.judge_canary([]).verdict == st.PASS
    assert st.judge_leftovers([], ("README.md", "new"), ("README.md",)).verdict == st.FAIL


@pytest.mark.engine
def test_the_time_limit_and_leftover_checks_catch_a_weakened_launch(engine):
    from dataclasses import replace

    from launcher.host import hostpaths
    from launcher.launch import launch, session
    from launcher.selftest import scratch

    ws = scratch.scratch_workspace("sandbox-test-weak-launch-")
    leftover = None
    try:
        # Weakened: the plan's time limit raised to an hour, so a 3 s agent runs to its end.
        quiet = st._Collector(lambda m: None)
        request = st._request("untrusted", ws, ("sleep", "3"), None)
        plan = session.for_engine(request, session.prepare(request, quiet), engine).plan   # as a launch does
        outcome = launch.run(engine, replace(plan, timeout_seconds=3600), quiet)
        assert st.judge_time_limit(outcome.timed_out, outcome.exit_code).verdict == st.FAIL
        outcome = st._launched(engine, st.time_limited("untrusted", ws, None), quiet).outcome
        assert st.judge_time_limit(outcome.timed_out, outcome.exit_code).verdict == st.PASS
        assert st.judge_leftovers(st.leftovers(engine, ws), (), ()).verdict == st.PASS
        # Weakened: a container of this workspace left behind.
        leftover = docker_sdk().api.create_container(
            images.AGENT_IMAGE, ["true"], labels={"dev.sandbox.managed": "1",
                                                   "dev.sandbox.workspace": hostpaths.workspace_real(ws)})["Id"]
        assert st.judge_leftovers(st.leftovers(engine, ws), (), ()).verdict == st.FAIL
    finally:
        if leftover:
            engine.remove(leftover)
        scratch.remove_tree(ws.rsplit("/", 1)[0])
