"""Every engine on this host (issue 30): where `sandbox doctor` looks (launcher/host/host.py), a row per
engine with its identity and verdict (pure, over recorded /version and /info answers), runtimes
that count only when installed, and gVisor said and refused under podman (no daemon.json written)."""

from __future__ import annotations

import hashlib
import json
import os
import socket

import pytest
from click.testing import CliRunner

from launcher.doctor import doctor, registration
from launcher.doctor.doctor import Status
from launcher.engine.enginefake import FakeEngine
from launcher.errors import EngineError
from launcher.host import engineid, host, hostpaths
from launcher.launch import launch
from launcher.plan import runtimes
from launcher.policy.model import NetworkMode, Runtime
from test_doctor import PODMAN_INFO, PODMAN_VERSION, version

# podman 4.3.1's /info Runtimes here (Debian 12, containers.conf untouched): every runtime
# containers-common knows, by its first candidate path; only runc and runsc are installed.
PODMAN_RUNTIMES = {"crun": {"path": "/usr/bin/crun"}, "kata": {"path": "/usr/bin/kata-runtime"},
                   "krun": {"path": "/usr/bin/krun"}, "runc": {"path": "/usr/bin/runc"},
                   "runj": {"path": "/usr/local/bin/runj"}, "runsc": {"path": "/usr/bin/runsc"}}
PODMAN = {**PODMAN_INFO, "Runtimes": PODMAN_RUNTIMES, "Rootless": False}
TESTS_DOCKER_HOST = os.environ.get("DOCKER_HOST", "")


def INSTALLED(path: str) -> bool:     # hostpaths.runtime_installed on this host: a bare name is the engine's to find
    return not path.startswith("/") or path in {"/usr/bin/runc", "/usr/bin/runsc"}
# Docker 20.10.24's /info here, trimmed: runc by a bare name, gVisor as `doctor --fix` registers it.
DOCKER = {"SecurityOptions": ["name=seccomp,profile=default"], "CgroupVersion": "1", "CgroupDriver": "cgroupfs",
          "MemoryLimit": True, "PidsLimit": True, "KernelVersion": "6.1.0", "DefaultRuntime": "runc",
          "RuncCommit": {"ID": "1.1.5+ds1-1+deb12u1"},
          "Runtimes": {"runc": {"path": "runc"}, **runtimes.registration("/usr/bin/runsc")}}


def sighting(address, source, used=False, ver=None, info=None, error=""):
    return engineid.Sighting(address=address, source=source, used=used, local=address.startswith("unix://"),
                             version=ver or {}, info=info or {}, error=error)


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def test_a_runtime_podman_lists_counts_only_when_its_binary_is_there():
    assert sorted(runtimes.registered(PODMAN, INSTALLED)) == ["runc", "runsc"]
    assert runtimes.not_installed(PODMAN, INSTALLED) == ("crun", "kata", "krun", "runj")
    assert runtimes.registered(PODMAN) == PODMAN_RUNTIMES       # nothing to check with (a remote engine)
    row = by_check(doctor.engine_findings(PODMAN, PODMAN_VERSION, INSTALLED), "runtimes")[0]
    assert row.status is Status.OK and row.detail == "runc (default), runsc; listed but not installed: crun, kata, krun, runj"
    assert "paths not checked" in by_check(doctor.engine_findings(PODMAN, PODMAN_VERSION), "runtimes")[0].detail
    crun = by_check(doctor.engine_findings({**PODMAN, "DefaultRuntime": "crun"}, PODMAN_VERSION, INSTALLED), "runtimes")[0]
    assert crun.status is Status.FAIL and "install crun" in crun.fix          # every sandbox would run under it


def test_a_registered_gvisor_whose_runsc_is_gone_is_missing(trusted_runsc):
    gone = lambda path: path != "/usr/bin/runsc"   # noqa: E731  (runsc removed since it was registered)
    assert runtimes.missing(DOCKER, Runtime.GVISOR, NetworkMode.NONE) == ""
    assert runtimes.missing(DOCKER, Runtime.GVISOR, NetworkMode.NONE, gone) == "sandbox-runsc"
    assert runtimes.missing(DOCKER, Runtime.RUNC, NetworkMode.NONE, gone) == ""
    assert registration.findings(DOCKER, trusted_runsc, "docker", INSTALLED)[0].fix == ""
    row = registration.findings(DOCKER, trusted_runsc, "docker", gone)[0]
    assert row.status is Status.WARN and "not registered" in row.detail and "daemon.json" in row.fix


def test_runtime_installed_checks_an_absolute_path_and_trusts_a_bare_name(tmp_path):
    binary = tmp_path / "runsc"
    binary.write_text("#!/bin/sh\n")
    assert not hostpaths.runtime_installed(str(binary))            # not executable
    binary.chmod(0o755)
    assert hostpaths.runtime_installed(str(binary)) and hostpaths.runtime_installed("runc")
    assert not hostpaths.runtime_installed(str(tmp_path / "kata-runtime"))


def test_under_podman_the_gvisor_row_is_podmans_own_and_never_daemon_json():
    row = registration.findings(PODMAN, "/usr/bin/runsc", "podman", INSTALLED)[0]
    assert row.status is Status.WARN and "refused under podman" in row.detail
    assert "[engine.runtimes]" in row.detail and "--oci-seccomp" in row.detail
    assert "daemon.json" not in row.detail + row.fix and "doctor --fix" not in row.fix
    assert "doctor --fix" not in registration.findings(PODMAN, None, "podman")[0].fix


def test_a_gvisor_plan_is_refused_under_podman_before_anything_is_made():
    from test_runtimes import BASE

    from launcher.plan.compiler import compile_policy
    from launcher.policy.policy import parse_policy
    from conftest import fake_facts

    plan = compile_policy(parse_policy(BASE + b"runtime: gvisor\n", "p.yaml"), fake_facts())
    podman = FakeEngine(engine_version=PODMAN_VERSION, engine_info={**PODMAN, "Runtimes": {
        **PODMAN_RUNTIMES, "sandbox-runsc": {"path": "/usr/bin/runsc"}}})   # registered by hand in containers.conf
    with pytest.raises(EngineError, match="the engine is podman") as info:
        launch.require_runtime(podman, plan)
    assert "daemon.json" not in str(info.value) and not podman.calls
    launch.require_runtime(FakeEngine(engine_info=DOCKER), plan)          # Docker with gVisor registered: fine


def test_doctor_fix_under_podman_writes_nothing_and_says_why(monkeypatch, tmp_path):
    from launcher.cli import main
    from launcher.engine import engine

    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine(engine_version=PODMAN_VERSION, engine_info=PODMAN))
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/runsc" if name == "runsc" else None)
    monkeypatch.setattr(registration, "fix", lambda *a, **k: pytest.fail("doctor --fix wrote daemon.json under podman"))
    result = CliRunner().invoke(main, ["doctor", "--fix"])
    assert result.exit_code != 0 and "the engine is podman" in result.stderr and "changed nothing" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_a_row_per_engine_with_its_identity_verdict_and_how_to_use_it():
    seen = (sighting("unix:///var/run/docker.sock", "the default socket, DOCKER_HOST unset", True, version("20.10.24"), DOCKER),
            sighting("unix:///run/podman/podman.sock", "podman's system socket", ver=PODMAN_VERSION, info=PODMAN),
            sighting("unix:///run/user/1000/podman/podman.sock", "podman's user socket", error="permission denied"))
    rows = doctor.engine_rows(seen, INSTALLED)
    assert rows[0].detail == "2 answering; `sandbox` uses unix:///var/run/docker.sock (the default socket, DOCKER_HOST unset)"
    docker, podman, rootless = by_check(rows, "engine found")
    assert docker.status is Status.OK and "in use" in docker.detail and docker.fix == ""
    assert docker.detail.split(": ", 1)[1].startswith("Docker 20.10.24, runc 1.2.8 (default runtime), rootful, seccomp")
    assert podman.status is Status.OK and "Podman 4.3.1, runc 1.1.5+ds1 (default runtime), rootful" in podman.detail
    assert "userns: not reported" in podman.detail and "verdict: 0 blocking" in podman.detail
    assert "to use it: DOCKER_HOST=unix:///run/podman/podman.sock sandbox" in podman.detail
    assert rootless.status is Status.WARN and "does not answer: permission denied" in rootless.detail
    assert not [r for r in rows if r.status is Status.FAIL]          # only the engine in use can block


def test_another_engine_with_a_blocking_problem_is_a_warning_naming_it():
    seen = (sighting("unix:///var/run/docker.sock", "Docker's socket", True, version("20.10.24"), DOCKER),
            sighting("unix:///run/podman/podman.sock", "podman's system socket", ver=PODMAN_VERSION,
                     info={**PODMAN, "SecurityOptions": []}))
    podman = by_check(doctor.engine_rows(seen, INSTALLED), "engine found")[1]
    assert podman.status is Status.WARN and "1 blocking (seccomp: not available" in podman.detail
    assert podman.fix == "to use it: DOCKER_HOST=unix:///run/podman/podman.sock sandbox …"


def test_a_docker_context_sandbox_does_not_follow_is_said():
    seen = (sighting("unix:///var/run/docker.sock", "the default socket, DOCKER_HOST unset", True, version(), DOCKER),
            sighting("unix:///run/podman/podman.sock", "docker context podman", ver=PODMAN_VERSION, info=PODMAN))
    context = by_check(doctor.engine_rows(seen, INSTALLED), "docker context")[0]
    assert context.status is Status.WARN and context.fix.startswith("DOCKER_HOST=unix:///run/podman/podman.sock")
    named = (sighting("unix:///run/podman/podman.sock", "DOCKER_HOST", True, PODMAN_VERSION, PODMAN), seen[0])
    assert not by_check(doctor.engine_rows(named, INSTALLED), "docker context")   # DOCKER_HOST wins for both


def test_an_unreachable_engine_in_use_names_the_others_that_answer():
    seen = lambda: (sighting("unix:///nonexistent.sock", "DOCKER_HOST", True, error="cannot reach"),   # noqa: E731
                    sighting("unix:///run/podman/podman.sock", "podman's system socket", ver=PODMAN_VERSION, info=PODMAN))
    down = FakeEngine(fail={"GET /info": "cannot reach"})
    found = doctor.run(lambda: down, seen=seen, present=INSTALLED)
    assert found[0].status is Status.FAIL and "DOCKER_HOST" in found[0].fix
    rows = by_check(found, "engine found")
    assert len(rows) == 1 and "DOCKER_HOST=unix:///run/podman/podman.sock" in rows[0].detail
    assert sum(f.status is Status.FAIL for f in found) == 1


@pytest.fixture
def bare_host(tmp_path, monkeypatch):
    """No DOCKER_HOST, no context, the usual sockets looked for below tmp_path."""
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    return tmp_path


def listen(path) -> socket.socket:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


def test_the_addresses_are_the_one_in_use_then_the_usual_sockets_that_exist(bare_host, monkeypatch):
    default = str(bare_host / "docker.sock")
    assert host.engine_addresses(default) == (host.EngineAddress(
        address=f"unix://{default}", source="the default socket, DOCKER_HOST unset", used=True),)
    rootless = listen(bare_host / "xdg" / "podman" / "podman.sock")
    docker = listen(default)
    try:
        found = host.engine_addresses(default)
        assert [(a.address, a.used) for a in found] == [(f"unix://{default}", True),
                                                        (f"unix://{bare_host}/xdg/podman/podman.sock", False)]
        assert found[1].source == "podman's user socket"
        monkeypatch.setenv("DOCKER_HOST", f"unix://{bare_host}/xdg/podman/podman.sock")
        found = host.engine_addresses(default)
        assert [(a.address, a.used, a.source) for a in found] == [
            (f"unix://{bare_host}/xdg/podman/podman.sock", True, "DOCKER_HOST"), (f"unix://{default}", False, "Docker's socket")]
    finally:
        rootless.close()
        docker.close()


def test_the_docker_clis_current_context_is_listed(bare_host, monkeypatch):
    config = bare_host / "docker-config"
    meta = config / "contexts" / "meta" / hashlib.sha256(b"podman").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": "podman", "Endpoints": {"docker": {"Host": "unix:///run/podman/podman.sock"}}}))
    (config / "config.json").write_text(json.dumps({"currentContext": "podman"}))
    found = host.engine_addresses(str(bare_host / "docker.sock"))
    assert (found[1].address, found[1].source, found[1].used) == ("unix:///run/podman/podman.sock", "docker context podman", False)
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert len(host.engine_addresses(str(bare_host / "docker.sock"))) == 1
    (config / "config.json").write_text("{not json")
    monkeypatch.delenv("DOCKER_CONTEXT")
    assert len(host.engine_addresses(str(bare_host / "docker.sock"))) == 1      # a broken config: no context, no traceback


def test_the_attestation_names_podman_and_its_runc(tmp_path):
    from conftest import fake_facts

    from launcher.launch import attest
    from launcher.pipeline import pipeline
    from launcher.plan.compiler import compile_policy
    from launcher.targets import report

    layered = pipeline.layered("untrusted", str(tmp_path))
    plan = compile_policy(layered.effective.policy, fake_facts(str(tmp_path)))
    data = report.build(status="ok", exit_code=0, started=0.0, plan=plan, probe=None, error="")
    for ver, info, kind, runc in ((PODMAN_VERSION, PODMAN, "podman", "1.1.5+ds1"), (version("20.10.24"), DOCKER, "docker", "1.2.8")):
        doc = attest.build(recorder=attest.Recorder(None), plan=plan, policy=layered.effective.policy,
                           layers=layered.effective.layers, engine=FakeEngine(engine_version=ver, engine_info=info), report=data)
        pred = doc["predicate"]
        assert (pred["engine"]["engine"], pred["engine"]["rootless"]) == (kind, False)
        assert pred["engine"]["version"] == ver["Version"] and pred["runtime"]["version"] == runc
    rootless = attest.build(recorder=attest.Recorder(None), plan=plan, policy=layered.effective.policy, layers=layered.effective.layers,
                            engine=FakeEngine(engine_version=PODMAN_VERSION, engine_info={**PODMAN, "Rootless": True}), report=data)
    assert rootless["predicate"]["engine"]["rootless"] is True


def test_podmans_limits_are_judged_by_its_libpod_controllers_not_its_info_flags():
    # rootless podman 4.3.1's compatible /info here claims every limit; /libpod/info's host says
    # cgroup v1 with no controller delegated (both recorded here), rootful's lists them all.
    rootless = {**PODMAN, "Rootless": True, "CgroupVersion": "1", "MemoryLimit": True, "PidsLimit": True, "CpuCfsQuota": True}
    none = {"host": {"cgroupVersion": "v1", "cgroupControllers": [], "security": {"rootless": True}}}
    v1 = by_check(doctor.engine_findings(rootless, PODMAN_VERSION, INSTALLED, none), "cgroups")[0]
    assert v1.status is Status.FAIL and "ignore limits.memory, limits.pids, limits.cpus" in v1.detail
    assert "Delegate=" in v1.fix
    unasked = by_check(doctor.engine_findings(rootless, PODMAN_VERSION, INSTALLED), "cgroups")[0]
    assert unasked.status is Status.FAIL                       # not told what it applies: nothing, not what it claims
    delegated = {"host": {"cgroupVersion": "v2", "cgroupControllers": ["cpu", "memory", "pids"], "security": {"rootless": True}}}
    v2 = by_check(doctor.engine_findings({**rootless, "CgroupVersion": "2"}, PODMAN_VERSION, INSTALLED, delegated), "cgroups")[0]
    assert v2.status is Status.OK and "/libpod/info" in v2.detail
    rootful = {"host": {"cgroupVersion": "v1", "cgroupControllers": ["cpuset", "cpu", "cpuacct", "blkio", "memory", "devices",
                                                                    "freezer", "pids"], "security": {"rootless": False}}}
    assert by_check(doctor.engine_findings(PODMAN, PODMAN_VERSION, INSTALLED, rootful), "cgroups")[0].status is Status.OK
    found = {f.check: f for f in doctor.engine_findings(rootless, PODMAN_VERSION, INSTALLED, none)}
    assert found["rootless"].detail.startswith("the engine runs rootless") and found["userns-remap"].status is Status.OK
    assert "rootless" in engineid.identify(PODMAN_VERSION, rootless).summary
    seen = (sighting("unix:///run/user/1001/podman/podman.sock", "DOCKER_HOST", True, PODMAN_VERSION, rootless),)
    row = by_check(doctor.engine_rows((engineid.Sighting(**{**seen[0].__dict__, "libpod": delegated}),), INSTALLED), "engine found")
    assert "verdict: 0 blocking" in row[0].detail           # the row judges with the libpod answer it was given


@pytest.mark.engine
def test_sightings_ask_each_socket_and_say_which_does_not_answer(engine, bare_host, monkeypatch):
    """The engine in use answers as itself; a socket file nobody serves is a row with its error."""
    from launcher.engine import hostengines

    if TESTS_DOCKER_HOST:                 # the engine under test (bare_host took it away)
        monkeypatch.setenv("DOCKER_HOST", TESTS_DOCKER_HOST)

    dead = listen(bare_host / "xdg" / "podman" / "podman.sock")    # bound, never listening: refused
    try:
        seen = hostengines.sightings()
    finally:
        dead.close()
    used = [s for s in seen if s.used]
    assert len(used) == 1 and not used[0].error
    assert engineid.identify(dict(used[0].version), dict(used[0].info)).kind == engineid.identify(
        engine.version(), engine.info()).kind
    stale = [s for s in seen if s.source == "podman's user socket"]
    assert len(stale) == 1 and stale[0].error and not stale[0].version


def test_an_unreachable_engine_alone_points_nowhere_else():
    seen = lambda: (sighting("unix:///nonexistent.sock", "DOCKER_HOST", True, error="cannot reach"),)   # noqa: E731
    found = doctor.run(lambda: FakeEngine(fail={"GET /info": "cannot reach"}), seen=seen, present=INSTALLED)
    assert found[0].status is Status.FAIL and "DOCKER_HOST" not in found[0].fix
    assert [f.check for f in found if f.check.startswith("engine")] == ["engine", "engines"]
