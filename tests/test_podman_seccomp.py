"""podman's seccomp and marker file: its default profile lets a process without CAP_SYS_ADMIN make
namespaces (`unshare -U` succeeds; Docker's refuses), and its API takes a profile only as a file on
the server, so a podman plan carries a state file of podman's default with Docker's namespace rules
(seccompfiles) and the gVisor profile as its file; podman binds an empty /run/.containerenv into
every container, which the probe is told of (never writable)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import fake_facts, preset, untrusted_bind
from launcher.plan.dialects.podman import MARKER as PODMAN_MARKER
from launcher.engine.dialects.podman import specgen_body
from launcher.errors import EngineError, PolicyError
from launcher.host import engineid
from launcher.pipeline import pipeline
from launcher.plan import runtimes, seccompfiles
from launcher.plan.dialects import podman as podman_dialect
from launcher.plan.compiler import compile_policy
from launcher.policy.model import Runtime
from test_podman_specgen import created

PODMAN = engineid.EngineFacts(kind=engineid.PODMAN, cgroup_version="1")
PROFILE = "/state/seccomp/0123456789abcdef-podman.json"
# The shape of podman's /usr/share/containers/seccomp.json: the namespace calls allowed to all.
PODMAN_DEFAULT = {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
    {"names": ["read", "write", "clone", "clone3", "unshare", "setns"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}


def on_podman(policy=None, profile=PROFILE):
    return compile_policy(policy or untrusted_bind(), dataclasses.replace(fake_facts(), engine=PODMAN, seccomp_profile=profile))


def test_the_profile_allows_namespaces_only_as_docker_s_default_does():
    profile = seccompfiles.docker_semantics(PODMAN_DEFAULT)
    unconditional = [n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" and not r.get("includes")
                     and not r.get("excludes") and not r.get("args") for n in r["names"]]
    assert "read" in unconditional and not set(seccompfiles.NAMESPACE_CALLS) & set(unconditional)
    admin = [r for r in profile["syscalls"] if r.get("includes") == {"caps": ["CAP_SYS_ADMIN"]}]
    assert any(set(seccompfiles.NAMESPACE_CALLS) <= set(r["names"]) for r in admin)
    clone = next(r for r in profile["syscalls"] if r["names"] == ["clone"] and r.get("args"))
    assert clone["args"][0]["value"] & 0x10000000 and clone["args"][0]["valueTwo"] == 0   # CLONE_NEWUSER masked out
    assert PODMAN_DEFAULT["syscalls"][0]["names"][2] == "clone"   # podman's own left as it was


def test_the_state_file_is_named_by_its_content_and_refused_when_podman_s_default_is_not_a_profile():
    first, again = (seccompfiles.engine_profile(json.dumps(PODMAN_DEFAULT), "podman") for _ in range(2))
    assert first == again and first.path.endswith("-podman.json") and "/seccomp/" in first.path
    assert json.loads(first.text) == seccompfiles.docker_semantics(PODMAN_DEFAULT)
    assert seccompfiles.engine_profile("", "podman") is None and seccompfiles.engine_profile("[1]", "podman") is None


def test_a_podman_plan_carries_the_profile_file_and_the_probe_knows_podman_s_marker():
    plan = on_podman()
    assert plan.container.security_opt == ("no-new-privileges", f"seccomp={PROFILE}")
    assert specgen_body(plan.container)["seccomp_profile_path"] == PROFILE
    assert PODMAN_MARKER in plan.probe.mounts and PODMAN_MARKER not in plan.probe.writable
    docker = compile_policy(untrusted_bind(), fake_facts())
    assert docker.container.security_opt == ("no-new-privileges",) and PODMAN_MARKER not in docker.probe.mounts


def test_gvisor_on_podman_takes_its_profile_as_a_file():
    assert runtimes.security_opt(Runtime.GVISOR, PROFILE) == ("no-new-privileges", f"seccomp={runtimes.GVISOR_SECCOMP_FILE}")


def test_a_podman_plan_without_a_profile_is_refused():
    with pytest.raises(PolicyError) as info:
        on_podman(profile="")
    problem = info.value.problems[0]
    assert problem.path == "runtime" and podman_dialect.PODMAN_DEFAULT in problem.found and "containers-common" in problem.hint


def test_an_inline_profile_never_goes_to_podman():
    spec = dataclasses.replace(on_podman().container, security_opt=("no-new-privileges", f"seccomp={runtimes.GVISOR_SECCOMP}"))
    with pytest.raises(EngineError, match="cannot take the security option"):
        specgen_body(spec)


def test_pipeline_makes_the_file_only_for_podman(monkeypatch):
    monkeypatch.setattr(pipeline.host, "seccomp_profile_text", lambda path: json.dumps(PODMAN_DEFAULT))
    policy = preset("untrusted")
    facts, files = pipeline.facts_and_files(policy, ".", engine=PODMAN)
    assert facts.seccomp_profile and facts.seccomp_profile in [f.path for f in files]
    facts, files = pipeline.facts_and_files(policy, ".")
    assert facts.seccomp_profile == "" and not [f for f in files if "/seccomp/" in f.path]


def test_on_podman_the_inspect_still_holds_no_new_privileges_and_refuses_unconfined():
    spec = on_podman().container
    _, diffs = created(spec, tamper=lambda d: d["HostConfig"].update(SecurityOpt=[]))
    assert any(d.startswith("SecurityOpt") and "no-new-privileges missing" in d for d in diffs), diffs
    _, diffs = created(spec, tamper=lambda d: d["HostConfig"]["SecurityOpt"].append("seccomp=unconfined"))
    assert any("seccomp=unconfined is set" in d for d in diffs), diffs
    assert created(spec)[1] == []
