"""`sandbox doctor` (version checks against known container-escape fixes, engine facts, exit codes) and `sandbox schema`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.doctor import doctor
from launcher.doctor.doctor import Status

SANDBOX = [sys.executable, "-m", "launcher"]
INFO = {"SecurityOptions": ["name=seccomp,profile=default", "name=apparmor"], "CgroupVersion": "2",
        "CgroupDriver": "systemd", "MemoryLimit": True, "PidsLimit": True, "RuncCommit": {"ID": "v1.2.8-0"},
        "KernelVersion": "6.8.0-45-generic"}


def version(engine="27.3.1", runc="1.2.8", containerd="1.7.22"):
    return {"Version": engine, "ApiVersion": "1.47", "Components": [
        {"Name": "Engine", "Version": engine}, {"Name": "runc", "Version": runc}, {"Name": "containerd", "Version": containerd}]}


def by_check(findings, check):
    return [f for f in findings if f.check == check]


@pytest.mark.parametrize("text, fixed, result", [
    ("1.1.11", ((1, 1, 12),), True), ("1.1.12", ((1, 1, 12),), False), ("1.2.0", ((1, 1, 12),), False),
    ("1.0.3", ((1, 1, 12),), True), ("1.1.14", ((1, 2, 8), (1, 3, 3), (1, 4, 0)), True),
    ("1.2.8", ((1, 2, 8), (1, 3, 3), (1, 4, 0)), False), ("1.3.2", ((1, 2, 8), (1, 3, 3), (1, 4, 0)), True),
    ("1.5.0", ((1, 2, 8), (1, 3, 3), (1, 4, 0)), False), ("24.0.9", ((23, 0, 15), (25, 0, 6), (27, 1, 1)), True),
])
def test_a_branch_is_vulnerable_below_its_fix_or_when_it_never_got_one(text, fixed, result):
    assert doctor.vulnerable(doctor.version_tuple(text), fixed) is result


def test_an_up_to_date_host_has_no_blocking_problem():
    findings = doctor.engine_findings(INFO, version())
    assert all(f.status is Status.OK for f in findings if f.check != "userns-remap"), findings
    assert by_check(findings, "lsm")[0].detail.startswith("apparmor")


def test_an_old_upstream_runc_is_a_blocking_problem_with_a_fix():
    findings = doctor.escape_fixes(version(runc="1.1.11"), {})
    runc = [f for f in by_check(findings, "runc version") if "CVE-2024-21626" in f.detail]
    assert runc[0].status is Status.FAIL and "1.1.12" in runc[0].fix


def test_a_distribution_build_is_a_warning_and_a_known_backport_counts_as_fixed():
    distro = doctor.escape_fixes(version(runc="1.1.5+ds1"), {})
    assert [f.status for f in distro if "CVE-2024-21626" in f.detail] == [Status.WARN]
    debian = doctor.escape_fixes(version(runc="1.1.5+ds1"), {"RuncCommit": {"ID": "1.1.5+ds1-1+deb12u1"}})
    assert not [f for f in debian if "CVE-2024-21626" in f.detail]


def test_missing_seccomp_or_cgroup_controllers_block():
    findings = doctor.engine_findings({**INFO, "SecurityOptions": [], "PidsLimit": False}, version())
    assert by_check(findings, "seccomp")[0].status is Status.FAIL
    assert by_check(findings, "cgroups")[0].status is Status.FAIL and "limits.pids" in by_check(findings, "cgroups")[0].detail
    assert by_check(findings, "lsm")[0].status is Status.WARN


def test_missing_images_are_a_warning_naming_the_command():
    findings = doctor.image_findings(lambda tag: tag == "debian:bookworm-slim", "debian:bookworm-slim", ("a:1", "b:2"))
    assert findings[0].status is Status.WARN and findings[0].fix == "sandbox images build"


def test_an_unreachable_engine_fails_with_exit_code_121(monkeypatch):
    """In-process, on a host without runsc or any other engine: this host's own engines and tools
    are not a unit test's input."""
    from click.testing import CliRunner

    from launcher.cli import main
    from launcher.engine import hostengines

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(hostengines, "sightings", lambda: ())
    monkeypatch.setattr("shutil.which", lambda name: None)
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 121 and result.stdout.startswith("fail  engine"), result.output
    assert "fix: unset DOCKER_HOST to use the default socket" in result.stdout   # the error's own hint


@pytest.mark.engine
def test_doctor_against_this_engine(engine):
    result = subprocess.run(SANDBOX + ["doctor", "--json"], capture_output=True, text=True)
    findings = json.loads(result.stdout)
    assert findings[0]["check"] == "engine" and findings[0]["status"] == "ok"
    assert {"seccomp", "cgroups", "rootless", "userns-remap", "lsm", "images", "runtimes", "engines"} <= {f["check"] for f in findings}
    in_use = [f for f in findings if f["check"] == "engine found" and "in use)" in f["detail"]]
    assert len(in_use) == 1 and engine.version()["Version"] in in_use[0]["detail"]     # the engine under test, as itself
    assert result.returncode == (121 if any(f["status"] == "fail" for f in findings) else 0)


def test_sandbox_schema_prints_the_bundled_json_schema():
    from launcher.policy.schema import policy_schema

    result = subprocess.run(SANDBOX + ["schema"], capture_output=True, text=True)
    assert result.returncode == 0 and json.loads(result.stdout) == policy_schema()


def test_copy_mode_needs_a_kernel_with_overlay_userxattr():
    old = {f.check: f for f in doctor.engine_findings({**INFO, "KernelVersion": "5.10.0-28-amd64"}, version())}
    new = {f.check: f for f in doctor.engine_findings(INFO, version())}
    assert old["copy mode"].status is doctor.Status.WARN and "--workspace-mode bind" in old["copy mode"].fix
    assert new["copy mode"].status is doctor.Status.OK


# What podman 4.3.1 (Debian 12) answers on its Docker-compatible API, trimmed to what is read.
PODMAN_VERSION = {"Version": "4.3.1", "ApiVersion": "1.41", "Components": [
    {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}},
    {"Name": "Conmon", "Version": "conmon version 2.1.6, commit: unknown"},
    {"Name": "OCI Runtime (runc)", "Version": "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev"}]}
PODMAN_INFO = {"SecurityOptions": ["name=seccomp,profile=default"], "DefaultRuntime": "runc", "CgroupVersion": "2",
               "MemoryLimit": True, "PidsLimit": True, "RuncCommit": {"ID": ""}, "KernelVersion": "6.1.0"}


def test_podman_is_recognised_by_its_components_and_judged_by_its_own_advisories():
    from launcher.host import engineid

    engine = engineid.identify(PODMAN_VERSION, PODMAN_INFO)
    assert (engine.kind, engine.label, engine.runtime) == ("podman", "Podman 4.3.1", "runc")
    assert engine.components["runc"] == "1.1.5+ds1" and engine.components["conmon"] == "2.1.6"
    assert engine.runtime_package == "1.1.5+ds1-1+deb12u1"
    findings = doctor.engine_findings(PODMAN_INFO, PODMAN_VERSION)
    assert findings[0].detail.startswith("reachable: Podman 4.3.1")
    text = " ".join(f.detail + f.fix for f in findings)
    assert "CVE-2019-14271" not in text and "Docker" not in text      # Docker's advisories are not podman's
    assert "CVE-2024-1753" in text and not by_check(findings, "containerd version")
    assert all(f.status is not Status.FAIL for f in findings if f.check.endswith(" version")), findings
    # runc behind podman: the Debian package with the backport (read from the component's commit line)
    assert not [f for f in findings if "CVE-2024-21626" in f.detail]


def test_docker_stays_docker_and_a_podman_runtime_is_judged_when_listed():
    from launcher.host import engineid

    assert engineid.identify(version(), INFO).label == "Docker 27.3.1"
    crun = {**PODMAN_VERSION, "Components": PODMAN_VERSION["Components"][:2] + [
        {"Name": "OCI Runtime (crun)", "Version": "crun version 1.2\ncommit: abc"}]}
    found = doctor.escape_fixes(crun, {**PODMAN_INFO, "DefaultRuntime": "crun"})
    assert [f.status for f in by_check(found, "crun version")] == [Status.WARN]    # CVE-2022-27650, below 1.4.4
    assert not by_check(found, "runc version")
