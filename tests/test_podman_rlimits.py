"""podman's rootful default rlimits (nofile 1048576, nproc 32768) exceed a host's hard limits when
its engine lacks CAP_SYS_RESOURCE, and every start fails ("error setting rlimit … operation not
permitted"). On podman the plan sets both, each within the host's hard limit (a host fact), and the
inspect comparison holds the container to them; Docker's are left to dockerd, as before."""

from __future__ import annotations

import dataclasses
import resource

import pytest

from conftest import fake_facts, preset, untrusted_bind
from launcher.plan.dialects.podman import RLIMITS as PODMAN_RLIMITS, ulimits as podman_ulimits
from launcher.engine.dialects.podman import host_ulimits, specgen_body
from launcher.engine.dialects import DOCKER_API, PODMAN_API
from launcher.engine.enginebodies import create_body
from launcher.engine.engineproto import HostSettings
from launcher.host import engineid, hostfacts
from launcher.plan.compiler import compile_policy
from test_podman_specgen import created

PODMAN = engineid.EngineFacts(kind=engineid.PODMAN, cgroup_version="2")
HOST = (("nofile", 20000), ("nproc", 96367))   # this CI host's: nofile below podman's, nproc above


def compiled(policy=None, engine=PODMAN, rlimits=HOST):
    facts = dataclasses.replace(fake_facts(), engine=engine, seccomp_profile="/state/p.json", rlimits=rlimits)
    return compile_policy(policy or untrusted_bind(), facts)


@pytest.mark.parametrize("hard, fitted", [
    (HOST, (("nofile", 20000, 20000), ("nproc", 32768, 32768))),
    ((("nofile", 1024), ("nproc", 512)), (("nofile", 1024, 1024), ("nproc", 512, 512))),
    ((("nofile", -1), ("nproc", -1)), tuple((n, v, v) for n, v in PODMAN_RLIMITS)),   # unlimited: podman's own
    ((), tuple((n, v, v) for n, v in PODMAN_RLIMITS)),                                  # not read: podman's own
])
def test_podman_s_defaults_are_fitted_within_the_host_s_hard_limits(hard, fitted):
    assert podman_ulimits(hard) == fitted


def test_a_podman_plan_sets_the_rlimits_of_the_sandbox_and_its_proxy():
    plan = compiled(preset("ci"))
    assert plan.container.ulimits == (("nofile", 20000, 20000), ("nproc", 32768, 32768))
    assert plan.proxy.ulimits == plan.container.ulimits
    assert specgen_body(plan.container)["r_limits"] == [{"type": "nofile", "soft": 20000, "hard": 20000},
                                                        {"type": "nproc", "soft": 32768, "hard": 32768}]
    host = PODMAN_API.proxy_body(plan.proxy, {}, "10.0.0.2")["HostConfig"]
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 20000, "Hard": 20000},
                               {"Name": "nproc", "Soft": 32768, "Hard": 32768}]


def test_docker_keeps_its_own_rlimits():
    """dockerd's defaults are its own process's limits, which its runtime never has to raise: the
    plan leaves them alone (Docker starts fine on this host without CAP_SYS_RESOURCE)."""
    plan = compiled(preset("ci"), engine=engineid.EngineFacts())
    assert plan.container.ulimits == () and plan.proxy.ulimits == ()
    assert "Ulimits" not in create_body(plan.container)["HostConfig"]
    assert "Ulimits" not in DOCKER_API.proxy_body(plan.proxy, {}, "")["HostConfig"]


def test_the_host_s_hard_limits_are_read_once_with_the_host_facts(tmp_path):
    assert hostfacts.hard_rlimits() == (("nofile", resource.getrlimit(resource.RLIMIT_NOFILE)[1]),
                                        ("nproc", resource.getrlimit(resource.RLIMIT_NPROC)[1]))
    facts = hostfacts.gather(untrusted_bind(), str(tmp_path), "sandbox-probe-test", launched=False)
    assert facts.rlimits == hostfacts.hard_rlimits()


def test_a_container_no_plan_describes_gets_the_host_s_fit_on_podman():
    spec = compiled(engine=engineid.EngineFacts()).container   # a spec without rlimits, as a tool's
    assert "r_limits" not in specgen_body(spec)
    body = specgen_body(spec, host_ulimits())
    assert body["r_limits"] == [{"type": n, "soft": s, "hard": h} for n, s, h in podman_ulimits(hostfacts.hard_rlimits())]


def test_podman_s_names_for_rlimits_read_as_docker_s():
    host = HostSettings.of({"Ulimits": [{"Name": "RLIMIT_NOFILE", "Soft": 10, "Hard": 20}, {"Name": "nproc", "Soft": 1, "Hard": 2}]})
    assert host.ulimits == {"nofile": (10, 20), "nproc": (1, 2)}


def test_the_container_podman_made_agrees_and_a_raised_rlimit_is_refused():
    spec = compiled().container
    assert created(spec)[1] == []

    def raise_nofile(doc):
        doc["HostConfig"]["Ulimits"][0].update(Soft=1048576, Hard=1048576)

    diffs = created(spec, tamper=raise_nofile)[1]
    assert [d for d in diffs if d.startswith("Ulimits")] == [
        "Ulimits: nofile differ (the plan says nofile=(20000, 20000), nproc=(32768, 32768), "
        "the container has nofile=(1048576, 1048576), nproc=(32768, 32768))"], diffs
    missing = created(spec, tamper=lambda doc: doc["HostConfig"].update(Ulimits=[]))[1]
    assert any(d.startswith("Ulimits: nofile, nproc missing") for d in missing), missing
