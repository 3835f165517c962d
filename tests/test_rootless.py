"""Rootless and userns-remapped engines, from their recorded answers: what the launcher reads of
them (engineid.facts), what the compiler then asks of the probe (identity.userns) and refuses (a
limit the engine would ignore, copy mode on rootless podman), and what `explain` says. The real
engines: tests/test_rootless_engine.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import fake_facts, preset

from launcher.check import explain
from launcher.engine.enginefake import FakeEngine
from launcher.errors import PolicyError
from launcher.host import engineid
from launcher.launch import session
from launcher.pipeline import stack
from launcher.plan import checks
from launcher.plan.compiler import compile_policy
from launcher.policy.model import WorkspaceMode

# What podman 4.3.1 (Debian 12) answered here, run by an unprivileged user (uid 1001, subuids
# 100000-165535) on cgroup v1 without delegation, trimmed to what is read. Its compatible /info
# claims the limits it ignores (MemoryLimit, PidsLimit, CpuCfsQuota: true).
PODMAN_VERSION = {"Version": "4.3.1", "ApiVersion": "1.41", "Components": [
    {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}},
    {"Name": "OCI Runtime (runc)", "Version": "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1"}]}
ROOTLESS_INFO = {"SecurityOptions": ["name=seccomp,profile=default"], "CgroupVersion": "1", "CgroupDriver": "cgroupfs",
                 "MemoryLimit": True, "PidsLimit": True, "CpuCfsQuota": True, "Rootless": True, "Driver": "vfs",
                 "DefaultRuntime": "runc"}
ID_MAP = [{"container_id": 0, "host_id": 1001, "size": 1}, {"container_id": 1, "host_id": 100000, "size": 65536}]
ROOTLESS_LIBPOD = {"host": {"cgroupControllers": [], "cgroupManager": "cgroupfs", "cgroupVersion": "v1",
                            "idMappings": {"uidmap": ID_MAP, "gidmap": ID_MAP},
                            "security": {"rootless": True, "seccompEnabled": True},
                            "slirp4netns": {"executable": "/usr/bin/slirp4netns"}}}
# The same podman run by root (rootful): every controller, no id maps.
ROOTFUL_LIBPOD = {"host": {"cgroupControllers": ["cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer",
                                                 "pids"], "cgroupVersion": "v1",
                           "idMappings": {"uidmap": None, "gidmap": None}, "security": {"rootless": False}}}
# Docker 20.10.24 (rootful) as it answered here.
DOCKER_VERSION = {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41", "Components": [
    {"Name": "Engine", "Version": "20.10.24+dfsg1"}, {"Name": "runc", "Version": "1.1.5+ds1"}]}
DOCKER_INFO = {"SecurityOptions": ["name=seccomp,profile=default"], "CgroupVersion": "1", "CgroupDriver": "cgroupfs",
               "MemoryLimit": True, "PidsLimit": True, "CpuCfsQuota": True}
ALL_LIMITS = ("limits.memory", "limits.pids", "limits.cpus")


def rootless_podman(controllers=()) -> engineid.EngineFacts:
    host = dict(ROOTLESS_LIBPOD["host"], cgroupControllers=list(controllers), cgroupVersion="v2" if controllers else "v1")
    return engineid.facts(PODMAN_VERSION, ROOTLESS_INFO, {"host": host})


def test_rootless_podman_is_read_from_libpod_info_not_from_the_limits_its_compatible_info_claims():
    facts = rootless_podman()
    assert (facts.kind, facts.rootless, facts.remapped, facts.cgroup_version) == ("podman", True, True, "1")
    assert facts.uid_map == facts.gid_map == ((0, 1001, 1), (1, 100000, 65536))
    assert facts.unenforced == ALL_LIMITS
    assert facts.label == "podman (rootless, cgroup v1)"


def test_rootless_podman_with_delegated_controllers_is_refused_only_what_it_lacks():
    assert rootless_podman(("memory", "pids")).unenforced == ("limits.cpus",)
    assert rootless_podman(("cpu", "memory", "pids", "io")).unenforced == ()


def test_rootless_podman_that_does_not_say_its_controllers_is_taken_to_enforce_none():
    assert engineid.facts(PODMAN_VERSION, ROOTLESS_INFO, {}).unenforced == ALL_LIMITS


def test_rootful_podman_and_docker_are_neither_remapped_nor_refused_anything():
    for facts in (engineid.facts(PODMAN_VERSION, dict(ROOTLESS_INFO, Rootless=False), ROOTFUL_LIBPOD),
                  engineid.facts(DOCKER_VERSION, DOCKER_INFO)):
        assert not facts.remapped and facts.unenforced == () and facts.uid_map == ()


def test_docker_rootless_and_userns_remap_are_read_from_its_security_options():
    # Docker's rootless mode on cgroup v1 has no cgroup driver ("none"); on v2 its flags follow the
    # controllers delegated to it. userns-remap does not say its map.
    rootless_v1 = dict(DOCKER_INFO, SecurityOptions=["name=seccomp,profile=default", "name=rootless"],
                       CgroupDriver="none", MemoryLimit=False, PidsLimit=False, CpuCfsQuota=False)
    facts = engineid.facts(DOCKER_VERSION, rootless_v1)
    assert facts.rootless and facts.unenforced == ALL_LIMITS
    rootless_v2 = dict(rootless_v1, CgroupDriver="systemd", CgroupVersion="2", MemoryLimit=True, PidsLimit=True)
    assert engineid.facts(DOCKER_VERSION, rootless_v2).unenforced == ("limits.cpus",)
    remap = engineid.facts(DOCKER_VERSION, dict(DOCKER_INFO, SecurityOptions=["name=seccomp,profile=default",
                                                                              "name=userns"]))
    assert remap.userns_remap and remap.remapped and not remap.rootless and remap.unenforced == ()


def with_engine(facts: engineid.EngineFacts, **kwargs):
    # podman's plans carry the seccomp profile file pipeline makes (seccompfiles)
    profile = "/state/seccomp/0123456789abcdef-podman.json" if facts.kind == engineid.PODMAN else ""
    return replace(fake_facts(**kwargs), engine=facts, seccomp_profile=profile)


def test_a_remapping_engine_gets_the_probes_id_map_check_and_a_rootful_one_does_not():
    delegated = rootless_podman(("cpu", "memory", "pids"))
    remapping_docker = engineid.EngineFacts(userns_remap=True)   # proxy mode is refused on podman (aardvark's DNS)
    for name, mode, facts in (("untrusted", "none", delegated), ("ci", "proxy", remapping_docker)):
        policy = replace(preset(name), workspace=replace(preset(name).workspace, mode=WorkspaceMode.BIND))
        probe = compile_policy(policy, with_engine(facts)).probe
        assert probe.userns == "remapped" and probe.checks == checks.for_mode(mode, userns=True)
        assert probe.checks.index("identity.userns") == probe.checks.index("identity.groups") + 1
        assert "userns=remapped" in probe.to_args()
        rootful = compile_policy(policy, fake_facts()).probe
        assert rootful.userns == "-" and "identity.userns" not in rootful.checks and "userns=-" in rootful.to_args()


def test_every_limit_the_engine_would_ignore_is_refused_by_name_with_a_hint():
    with pytest.raises(PolicyError) as info:
        compile_policy(preset("untrusted"), with_engine(rootless_podman()))
    problems = {p.path: p for p in info.value.problems}
    assert set(ALL_LIMITS) <= set(problems)
    memory = problems["limits.memory"]
    assert "2g" in memory.found and "podman (rootless, cgroup v1)" in memory.found and "memory" in memory.found
    assert "Delegate=memory pids cpu" in memory.hint and "rootful" in memory.hint
    with pytest.raises(PolicyError) as info:   # only what is missing
        compile_policy(replace(preset("untrusted"), workspace=replace(preset("untrusted").workspace,
                                                                      mode=WorkspaceMode.BIND)),
                       with_engine(rootless_podman(("memory", "pids"))))
    assert [p.path for p in info.value.problems] == ["limits.cpus"]


def test_copy_mode_is_refused_on_rootless_podman_which_cannot_mount_its_overlay():
    with pytest.raises(PolicyError) as info:
        compile_policy(preset("untrusted"), with_engine(rootless_podman(("cpu", "memory", "pids"))))
    (problem,) = info.value.problems
    assert problem.path == "workspace.mode" and "--workspace-mode bind" in problem.hint


def test_the_auto_user_is_the_workspace_owner_as_the_container_sees_it():
    delegated = rootless_podman(("cpu", "memory", "pids"))
    policy = replace(preset("untrusted"), user=None, workspace=replace(preset("untrusted").workspace,
                                                                       mode=WorkspaceMode.BIND))

    def owned_by(uid, gid):
        facts = with_engine(delegated)
        return replace(facts, workspace=replace(facts.workspace, owner=(uid, gid)))

    assert compile_policy(policy, owned_by(100999, 100999)).container.user == "1000:1000"   # subuid 100999 is 1000
    assert compile_policy(policy, owned_by(101233, 100999)).container.user == "1234:1000"
    assert compile_policy(policy, owned_by(1001, 1001)).container.user == "1000:1000"   # the user itself: 0 inside
    assert compile_policy(policy, owned_by(5, 5)).container.user == "1000:1000"         # not mapped at all


def test_a_launch_on_rootless_podman_is_refused_before_anything_is_created(tmp_path, podman_default_seccomp):
    (tmp_path / "ws").mkdir()
    engine = FakeEngine(engine_version=PODMAN_VERSION, engine_info=ROOTLESS_INFO, libpod_info=ROOTLESS_LIBPOD)
    result = session.run(session.Request(policy="untrusted", workspace=str(tmp_path / "ws"), command=("true",)),
                         _Quiet(), engine=engine)
    assert (result.status, result.exit_code) == ("policy-invalid", 120)
    assert {p.path for p in result.error.problems} == {*ALL_LIMITS, "workspace.mode"}
    assert engine.created == [] and engine.volumes == {}


def test_a_launch_on_rootful_docker_asks_the_engine_and_compiles_as_before(tmp_path):
    (tmp_path / "ws").mkdir()
    engine = FakeEngine(engine_version=DOCKER_VERSION, engine_info=DOCKER_INFO)
    request = session.Request(policy="untrusted", workspace=str(tmp_path / "ws"), command=("true",))
    planned = session.prepare(request, _Quiet())
    assert session.for_engine(request, planned, engine) is planned


class _Quiet:
    def status(self, message: str) -> None:
        pass

    def output(self, stream: str, data: bytes) -> None:
        pass


def test_explain_marks_the_refused_limits_and_adds_the_id_map_row_for_the_engine_asked():
    eff = stack.load_base("untrusted")
    facts = rootless_podman()
    rows = {r.field: r for r in explain.rows(eff, engine=facts)}
    for field in ALL_LIMITS:
        assert rows[field].enforcement.component.value == "nothing" and "REFUSED" in rows[field].enforcement.note
    data = explain.to_json(eff, engine=facts)
    assert [f["flags"] for f in data["fields"] if f["field"] == "limits.memory"] == [
        ["enforced by nothing", "REFUSED on this engine"]]
    assert any(a["probe_checks"] == ["identity.userns"] for a in data["always"])
    assert data["engine"]["unenforced"] == list(ALL_LIMITS)
    text = explain.render(eff, engine=facts)
    assert "engine asked: podman (rootless, cgroup v1); refused there: limits.memory, limits.pids, limits.cpus" in text
    plain = explain.to_json(eff)   # not asked: as before, no id map row
    assert "engine" not in plain and not any(a["probe_checks"] == ["identity.userns"] for a in plain["always"])

