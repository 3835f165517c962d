"""`sandbox selftest`: the case matrix as data, the script it renders, a real run of a preset, and
proof that the matrix catches escapes: run against deliberately weakened containers, the cases fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher import images, selftest as st, selftest_cases as sc

SANDBOX = [sys.executable, "-m", "launcher"]


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
    result = subprocess.run(SANDBOX + ["selftest", "--policy", "read-only", "--json", str(report)],
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


def _weak_run(engine, tmp_path, workspace, mode, network, extra_env=None):
    """The case script in a deliberately weakened container: root, seccomp off, extra capabilities,
    the engine's socket, a token in the environment, a /tmp larger than declared, host PIDs."""
    home = tmp_path / "root-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("not a key\n")
    listener, name = st.HostListener(), f"sandbox-test-weak-{os.getpid()}-{mode}"
    try:
        cases = sc.for_mode(mode)
        params = {"MODE": mode, "WS": "/workspace", "BB": "/.sandbox/probe/busybox", "LISTEN_PORT": str(listener.port),
                  "HOST_IPS": "127.0.0.1", "CANARY_IP": "", "HOST_CANARY_DIR": "/hostdir", "TMPFS": "/tmp:1048576",
                  **(extra_env or {})}
        out = engine.client.containers.run(
            images.AGENT_IMAGE, ["bash", "-c", st.script(cases, params)], name=name, remove=True, stdout=True, stderr=False,
            user="0", network_mode=network, pid_mode="host", security_opt=["seccomp=unconfined"],
            cap_add=["NET_RAW", "SYS_CHROOT", "MKNOD"], shm_size="600m",
            environment={"GITHUB_TOKEN": "ghp_" + "x" * 36, "HTTP_PROXY": "http://allowed.test:80"},
            tmpfs={"/tmp": "size=8m"}, devices=["/dev/null:/dev/mem:r"], labels={"dev.sandbox.managed": "1"},
            volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "ro"},
                     images.probe_volume_name(): {"bind": "/.sandbox/probe", "mode": "rw"},
                     str(workspace): {"bind": "/workspace", "mode": "rw"}, str(home): {"bind": "/root", "mode": "rw"},
                     str(tmp_path): {"bind": "/hostdir", "mode": "rw"}})
        return {r.id: r for r in st.parse(out.decode(errors="replace"), cases)}, listener.peers
    finally:
        listener.close()
        engine.remove(name)   # left "created" when the engine refuses to start it


# Cases that fail against the weakened container. The rest need privileges this engine refuses to
# grant (writable /proc/sys, /sys, cgroups; CAP_SYS_ADMIN for mount and unshare -n) or are shown by
# other tests (tests/test_tamper.py removes each protection the probe checks).
WEAK_NONE = {
    "fs.write_root", "fs.write_etc", "fs.write_usr", "fs.write_var", "fs.write_home", "fs.write_probe", "fs.append_passwd",
    "protect.git", "protect.sandbox_yaml", "protect.github", "protect.envrc", "protect.vscode", "protect.claude",
    "protect.git_config", "protect.rename_git", "symlink.host_path", "symlink.root_escape", "creds.env",
    "creds.proc_environ", "creds.files", "creds.shadow", "sock.runtime_paths", "sock.parent_dirs",
    "priv.uid", "priv.caps", "priv.su", "priv.unshare_user", "priv.mknod", "priv.chroot", "priv.keyctl", "priv.raw_socket",
    "dev.mem", "proc.host_processes", "limits.fork_bomb", "limits.memory_bomb", "limits.tmpfs_fill", "limits.shm_fill",
    "net.interfaces", "host.listener", "host.loopback", "net.direct_public", "net.metadata", "net.private", "net.dns",
}


@pytest.mark.engine
def test_the_matrix_catches_a_weakened_container(engine, tmp_path, workspace):
    # Host network: every host address is reachable; public ones are never tried (a route exists).
    results, peers = _weak_run(engine, tmp_path, workspace, "none", "host")
    caught = {case_id for case_id, r in results.items() if r.verdict == st.FAIL}
    assert WEAK_NONE <= caught, sorted(WEAK_NONE - caught)
    assert peers, "the host's listener should have been reached"
    assert not (tmp_path / "planted").exists() and not [p for p in os.listdir(workspace) if p.startswith(".selftest")]


# The CONNECT cases need a real tunnel to fail; tests/test_proxy.py covers CONNECT against Squid.
WEAK_PROXY = {
    "net.dns_outside", "net.direct_canary", "host.gateway", "proxy.disallowed_host", "proxy.ip_literal", "proxy.metadata",
    "proxy.localhost", "proxy.loopback_port", "proxy.host_address", "proxy.other_port", "proxy.lookalike_suffix", "proxy.lookalike_prefix", "proxy.wildcard_apex", "proxy.host_mismatch",
}


@pytest.mark.engine
def test_the_proxy_cases_catch_a_sandbox_on_the_open_test_network(engine, tmp_path, workspace):
    # No proxy at all: the sandbox sits on the (internal) test network and "the proxy" is the
    # upstream itself, which answers everything; its gateway is the host's bridge address.
    from launcher.testnet import Internet

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    internet = Internet(engine, f"sandbox-test-weak-{os.getpid()}")
    try:
        results, _ = _weak_run(engine, tmp_path, workspace, "proxy", internet.network, {"CANARY_IP": internet.canary_ip})
    finally:
        internet.close()
    caught = {case_id for case_id, r in results.items() if r.verdict == st.FAIL}
    assert WEAK_PROXY <= caught, sorted(WEAK_PROXY - caught)
    assert results["proxy.control_allowed"].verdict == st.PASS
