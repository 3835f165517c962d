"""The pure compiler: golden plans for every preset, host-side refusals, and plan invariants."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import fake_facts, untrusted_bind, preset
from launcher import resources
from launcher.errors import PolicyError
from launcher.host.gitdirs import GitFacts
from launcher.host.hostpaths import PathFact
from launcher.plan import runtimes
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import PROBE_BUSYBOX, MountKind
from launcher.policy.model import BUILTIN_PROTECTED, Access
from launcher.policy.policy import parse_policy
from launcher.policy.surfaces import GIT_BY_EXISTENCE, GIT_CONTROL
from launcher.targets import argv as render

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_compiles_to_its_golden_plan(name):
    policy = preset(name)
    policy = replace(policy, source=f"policies/{name}.yaml")
    plan = compile_policy(policy, fake_facts(env=(("TERM", "xterm"), ("LANG", "C.UTF-8"))))
    got = {"plan": render.plan_to_dict(plan), "argv": render.to_argv(plan)}
    # The gVisor profile is named by where the package is installed: the golden holds a placeholder.
    got = json.loads(json.dumps(got).replace(runtimes.GVISOR_SECCOMP_FILE, "<launcher>/gvisor-seccomp.json"))
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") and (not path.exists() or json.loads(path.read_text()) != got):
        path.write_text(json.dumps(got, indent=2) + "\n")
        pytest.fail(f"rewrote {path.name}: review the diff, then run again without UPDATE_GOLDEN")
    assert got == json.loads(path.read_text()), "plan changed: review, then UPDATE_GOLDEN=1 pytest"


def untrusted(**facts):
    return compile_policy(untrusted_bind(), fake_facts(**facts))


def test_plan_is_locked_down():
    c = untrusted().container
    assert c.read_only_root and c.cap_drop == ("ALL",) and c.cap_add == ()
    assert c.security_opt == ("no-new-privileges",)
    assert c.network_mode == "none" and not c.devices and not c.pid_mode
    assert c.user == "1000:1000" and c.entrypoint[0] == "/.sandbox/probe/busybox"
    assert ("dev.sandbox.managed", "1") in c.labels


def test_missing_protected_paths_get_read_only_placeholders():
    plan = untrusted()
    tmpfs = {m.target for m in plan.container.mounts if m.kind is MountKind.TMPFS and m.read_only}
    assert "/workspace/.git" in tmpfs and "/workspace/.github" in tmpfs
    assert "/home/dev/repo/.git" in plan.placeholders
    assert "/workspace/.git/hooks" in plan.probe.protected


def test_existing_protected_paths_are_read_only_binds():
    plan = untrusted(protected_kind="dir")
    binds = {m.target: m for m in plan.container.mounts if m.kind is MountKind.BIND}
    assert binds["/workspace/.git"].read_only and binds["/workspace/.git"].source == "/home/dev/repo/.git"
    assert "/workspace/.git/hooks" not in binds   # covered by the read-only .git
    assert not binds["/workspace"].read_only and plan.placeholders == ()
    # The probe proves every part of .git that host git reads, not only the mount point.
    assert {"/workspace/.git/commondir", "/workspace/.git/index", "/workspace/.git/config"} <= set(plan.probe.protected)


def test_a_gitfile_is_protected_with_the_git_directories_it_leads_to():
    extra = ("wt-meta", "vendor/lib/.git")
    facts = fake_facts(protected_kind="dir", protect=(".git",) + BUILTIN_PROTECTED + extra,
                       git=GitFacts(protect=extra))
    facts = replace(facts, protected=tuple(replace(a, kind="file") if a.given == ".git" else a for a in facts.protected))
    plan = compile_policy(untrusted_bind(), facts)
    binds = {m.target: m for m in plan.container.mounts if m.kind is MountKind.BIND}
    assert all(binds[f"/workspace/{p}"].read_only for p in (".git",) + extra)
    assert not binds["/workspace/vendor"].read_only and not binds["/workspace/vendor/lib"].read_only   # cannot be renamed
    assert "/workspace/vendor/lib/.git" in plan.probe.protected
    assert "/workspace/.git/config" not in plan.probe.protected   # .git is a file here


def test_a_git_directory_outside_the_workspace_may_not_be_mounted_writable():
    policy = parse_policy(b"version: 1\nname: t\ndescription: d\nworkspace: {access: read-write}\n"
                          b"mounts: [{source: /home/dev/main, target: /main, access: read-write}]\n", "p.yaml")
    mount = PathFact(given="/home/dev/main", real="/home/dev/main", kind="dir")
    facts = fake_facts(mounts=(mount,), git=GitFacts(outside=("/home/dev/main/.git/worktrees/repo",)))
    with pytest.raises(PolicyError, match=r"mounts\[0\].*which git on the host reads for this workspace"):
        compile_policy(policy, facts)
    read_only = replace(policy, mounts=(replace(policy.mounts[0], access=Access.READ_ONLY),))
    assert compile_policy(read_only, facts).container.mounts


def test_git_read_write_keeps_only_the_code_running_parts_read_only_and_warns():
    policy = parse_policy(b"version: 1\nname: t\ndescription: d\nworkspace: {access: read-write, git: read-write}\n",
                          "p.yaml")
    plan = compile_policy(policy, fake_facts(protected_kind="dir", protect=GIT_CONTROL + BUILTIN_PROTECTED))
    binds = {m.target: m for m in plan.container.mounts if m.kind is MountKind.BIND}
    assert not binds["/workspace/.git"].read_only     # a mount point: `mv .git x` cannot swap in a fresh one
    assert all(binds[f"/workspace/{p}"].read_only for p in GIT_CONTROL)
    assert "/workspace/.git/index" not in plan.probe.protected
    assert any("workspace.git is read-write" in w for w in plan.warnings)


def test_a_symlink_at_a_protected_path_is_refused():
    with pytest.raises(PolicyError, match="is a symlink"):
        untrusted(protected_kind="symlink")


def test_read_only_workspace_needs_no_protection_mounts():
    plan = compile_policy(preset("read-only"), fake_facts())
    assert [m.target for m in plan.container.mounts if m.target.startswith("/workspace")] == ["/workspace"]
    assert plan.probe.writable == ("/tmp", "/home/agent")   # and the home: every preset has one


def test_auto_user_is_the_workspace_owner_unless_root():
    assert untrusted(owner=(1234, 555)).container.user == "1234:555"
    assert untrusted(owner=(0, 0)).container.user == "1000:1000"


def test_probe_expectations_follow_the_plan():
    p = untrusted().probe
    assert (p.uid, p.gid, p.capbnd, p.nnp, p.seccomp, p.net) == (1000, 1000, "0" * 16, 1, 2, "none")
    assert p.writable == ("/workspace", "/tmp", "/home/agent") and "/tmp" not in p.rofs and "/" in p.rofs
    assert "/home" in p.rofs and (p.home, p.homesrc) == ("/home/agent", "tmpfs")
    assert p.pids == "256" and p.mem == str(2 * 1024 ** 3)


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_gives_the_agent_a_private_tmpfs_home(name):
    plan = compile_policy(preset(name), fake_facts(owner=(1234, 555)))
    home = next(m for m in plan.container.mounts if m.target == "/home/agent")
    assert home.owned_tmpfs and home.tmpfs_options == "rw,size=536870912,uid=1234,gid=555,mode=0700"
    assert dict(plan.container.env)["HOME"] == "/home/agent" and plan.home is None
    assert all(m.owner == (1234, 555) and m.mode == 0o700 for m in plan.container.mounts
               if m.kind.value == "tmpfs" and not m.read_only)
    assert "/home" in plan.probe.rofs and plan.probe.homesrc == "tmpfs"


def _home_policy(extra: str):
    return parse_policy(f"version: 1\nname: t\ndescription: d\n{extra}".encode(), "p.yaml")


def test_a_home_volume_is_one_per_workspace_and_profile_and_labelled():
    policy = _home_policy("home: {mode: volume}\nenv: {set: {HOME: /tmp/h}}\n")
    a, b = (compile_policy(policy, fake_facts(workspace=w)) for w in ("/home/dev/a", "/home/dev/b"))
    other = compile_policy(policy, fake_facts(workspace="/home/dev/a"), profile="codex")
    assert a.home.volume.startswith("sandbox-home-") and a.home.volume.endswith("-default")
    assert len({a.home.volume, b.home.volume, other.home.volume}) == 3
    mount = next(m for m in a.container.mounts if m.target == "/home/agent")
    assert (mount.kind.value, mount.source, mount.no_copy, mount.read_only) == ("volume", a.home.volume, True, False)
    assert a.probe.homesrc == f"/{a.home.volume}/_data"
    assert dict(a.home.labels) == {"dev.sandbox.managed": "1", "dev.sandbox.kind": "home",
                                   "dev.sandbox.workspace": "/home/dev/a", "dev.sandbox.profile": "default",
                                   "dev.sandbox.trust": a.home.trust}
    assert dict(a.container.labels)["dev.sandbox.trust"] == a.home.trust and a.home.trust in a.home.volume
    assert dict(a.container.labels)["dev.sandbox.home"] == a.home.volume
    assert dict(a.container.env)["HOME"] == "/tmp/h"    # env.set wins


def test_a_home_volume_is_refused_for_a_sandbox_another_tool_launches():
    with pytest.raises(PolicyError, match="home.mode"):
        compile_policy(_home_policy("home: {mode: volume}\n"), fake_facts(), kind="external")


@pytest.mark.parametrize("extra, where", [
    ("home: {target: /workspace/h}\n", "home.target"), ("home: {target: /etc/h}\n", "home.target"),
    ("home: {target: '/h:x'}\n", "home.target"), ("home: {size: '0'}\n", "home.size"),
    ("tmpfs: [{target: /tmp, mode: '0500'}]\n", "tmpfs[0].mode"), ("tmpfs: [{target: /home/agent}]\n", "home.target"),
])
def test_bad_home_and_tmpfs_values_are_refused(extra, where):
    with pytest.raises(PolicyError) as info:
        _home_policy(extra)
    assert where in {p.path for p in info.value.problems}


def test_declared_capability_is_the_only_one_in_the_bounding_set():
    policy = parse_policy(b"version: 1\nname: t\ndescription: d\ncapabilities: [NET_BIND_SERVICE]\n", "p.yaml")
    plan = compile_policy(policy, fake_facts())
    assert plan.container.cap_add == ("NET_BIND_SERVICE",) and plan.probe.capbnd == f"{1 << 10:016x}"


def policy_with_mount(source: str) -> tuple:
    policy = parse_policy(f"version: 1\nname: t\ndescription: d\nmounts: [{{source: '{source}', target: /data}}]\n".encode(),
                          "p.yaml")
    return policy


@pytest.mark.parametrize("real, kind, fragment", [
    ("/run/docker.sock", "socket", "is a socket"),
    ("/srv/app.sock", "socket", "is a socket"),
    ("/run", "dir", "container runtime path"),
    ("/var/lib", "dir", "container runtime path"),
    ("/", "dir", "the whole host"),
    ("/home/dev", "dir", "your home directory"),
    ("/home/dev/.ssh", "dir", "credential location"),
    ("/home/dev/.docker/config.json", "file", "credential location"),
    ("/home", "dir", "credential location"),
    ("/dev/sda", "other", "device"),
    ("/nope", "missing", "does not exist"),
])
def test_sensitive_mount_sources_are_refused_with_the_resolved_path(real, kind, fragment):
    facts = fake_facts(mounts=[PathFact(given="~/link", real=real, kind=kind)])
    with pytest.raises(PolicyError) as info:
        compile_policy(policy_with_mount("~/link"), facts)
    assert fragment in str(info.value) and real in str(info.value) and "mounts[0].source" in str(info.value)



@pytest.mark.parametrize("real", ["/home/dev/.local", "/home/dev/.local/state/sandbox/probe/abc/sub"])
def test_a_source_that_is_or_holds_the_launchers_probe_files_is_refused(real):
    # the probe files are checked on the host, then bound: a sandbox that could write them between
    # the two (or for the next launch) would decide what that sandbox's probe runs
    probe_dir = "/home/dev/.local/state/sandbox/probe/abc"
    for policy, facts, where in (
            (policy_with_mount("x"), fake_facts(mounts=[PathFact(given="x", real=real, kind="dir")], probe_dir=probe_dir),
             "mounts[0].source"),
            (untrusted_bind(), fake_facts(workspace=real, probe_dir=probe_dir), "--workspace")):
        with pytest.raises(PolicyError) as info:
            compile_policy(policy, facts)
        assert "the launcher's probe files" in str(info.value) and where in str(info.value), str(info.value)
    assert compile_policy(policy_with_mount("x"), fake_facts(
        mounts=[PathFact(given="x", real="/home/dev/lib", kind="dir")], probe_dir=probe_dir))

def test_a_project_directory_can_be_mounted_read_only():
    facts = fake_facts(mounts=[PathFact(given="../lib", real="/home/dev/lib", kind="dir")])
    plan = compile_policy(policy_with_mount("../lib"), facts)
    assert any(m.target == "/data" and m.read_only and m.source == "/home/dev/lib" for m in plan.container.mounts)


@pytest.mark.parametrize("workspace", ["/", "/home/dev", "/home", "/run", "/var/lib/docker/volumes", "/home/dev/.ssh"])
def test_workspace_of_root_home_or_sensitive_dirs_is_refused(workspace):
    with pytest.raises(PolicyError, match="--workspace"):
        untrusted(workspace=workspace)


def test_secret_shaped_value_of_a_passed_variable_is_refused_without_showing_it():
    with pytest.raises(PolicyError) as info:
        untrusted(env=[("LANG", "ghp_0123456789abcdef")])
    assert "LANG" in str(info.value) and "ghp_" not in str(info.value)


def test_command_line_command_replaces_the_policy_default():
    plan = compile_policy(preset("untrusted"), fake_facts(), command=("make", "test"))
    assert plan.container.command[-3:] == ("--", "make", "test") and plan.agent_command == ("make", "test")


def test_up_keeps_the_container_alive_after_the_probe_until_its_time_limit():
    plan = compile_policy(preset("untrusted"), fake_facts(), kind="up")
    assert plan.container.name == "sandbox-repo"
    main = plan.container.command[plan.container.command.index("--") + 1:]
    assert main[:3] == (PROBE_BUSYBOX, "sh", "-c") and main[-3:] == (str(10 * 3600), str(3600), str(10 * 3600))   # 10h, 1h idle, its ceiling
    assert plan.timeout_seconds == 10 * 3600 and plan.idle_seconds == 3600
    assert compile_policy(preset("untrusted"), fake_facts()).timeout_seconds == 30 * 60   # a run: limits.timeout


def test_paths_with_odd_characters_are_escaped_for_the_probe_and_quoted_for_docker():
    plan = untrusted(workspace="/home/dev/my repo,v2")
    assert "wsroot=/home/dev/my\\040repo\\054v2" in plan.container.command
    argv = render.to_argv(plan)
    assert '"src=/home/dev/my repo,v2"' in argv[argv.index("--mount") + 1]


def test_directories_above_protected_paths_are_mount_points_so_they_cannot_be_renamed():
    # `mv docs x && mkdir -p docs/private` would otherwise swap in a writable directory.
    policy = parse_policy(b"version: 1\nname: t\ndescription: d\nworkspace: {access: read-write, protect: [docs/private]}\n",
                          "p.yaml")
    plan = compile_policy(policy, fake_facts(protected_kind="dir", protect=(".git",) + BUILTIN_PROTECTED + ("docs/private",)))
    binds = {m.target: m for m in plan.container.mounts if m.kind is MountKind.BIND}
    assert not binds["/workspace/docs"].read_only and binds["/workspace/docs"].source == "/home/dev/repo/docs"
    assert "/workspace/docs" in plan.probe.writable and binds["/workspace/docs/private"].read_only


def test_git_read_write_leaves_a_missing_commondir_to_the_surface_report():
    # A mount point there would be a directory, on which git fails ("failed to read .git/commondir").
    policy = parse_policy(b"version: 1\nname: t\ndescription: d\nworkspace: {access: read-write, git: read-write}\n",
                          "p.yaml")
    facts = fake_facts(protected_kind="dir", protect=GIT_CONTROL + BUILTIN_PROTECTED)
    facts = replace(facts, protected=tuple(replace(a, kind="missing") if a.given in GIT_BY_EXISTENCE else a
                                           for a in facts.protected))
    plan = compile_policy(policy, facts)
    targets = {m.target for m in plan.container.mounts}
    for path in GIT_BY_EXISTENCE:
        assert f"/workspace/{path}" not in targets and f"/workspace/{path}" not in plan.probe.protected
    assert "/workspace/.git/hooks" in targets


def test_a_missing_config_file_its_tool_opens_is_protected_by_a_read_only_file():
    """aider opens .aider.conf.yml and opencode opencode.json even when missing: a directory there
    breaks them, so those are bound read-only from a file holding {} (other names keep the tmpfs)."""
    facts = fake_facts(config_placeholder="/state/empty-config.json")
    mounts = {m.target: m for m in compile_policy(untrusted_bind(), facts).container.mounts}
    for name in (".aider.conf.yml", "opencode.json", ".mcp.json"):
        m = mounts[f"/workspace/{name}"]
        assert (m.kind, m.source, m.read_only) == (MountKind.BIND, "/state/empty-config.json", True), name
    assert mounts["/workspace/.envrc"].kind is MountKind.TMPFS


CERT = ("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUK0rk\n-----END CERTIFICATE-----\n")


def test_ca_certificates_are_read_only_files_named_by_the_tools_variables():
    from launcher.host.hostpaths import PathFact

    policy = replace(preset("ci"), ca_certificates=("/etc/company-ca.pem",))
    fact = PathFact(given="/etc/company-ca.pem", real="/etc/company-ca.pem", kind="file")
    facts = fake_facts(ca_certs=((fact, b"x"),), ca_store=("/state/cas/a-extra.pem", "/state/cas/b-bundle.pem"))
    with pytest.raises(PolicyError) as info:   # b"x" is no certificate: refused, with the entry named
        compile_policy(policy, facts)
    assert "ca_certificates[0]" in str(info.value) and "no -----BEGIN CERTIFICATE-----" in str(info.value)
    key = replace(fact, given="/etc/k.pem")
    with pytest.raises(PolicyError, match="a private key"):
        compile_policy(replace(policy, ca_certificates=("/etc/k.pem",)), fake_facts(
            ca_certs=((key, b"-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n"),), ca_store=facts.ca_store))
    with pytest.raises(PolicyError, match="none were prepared"):   # fail closed, never a sandbox without them
        compile_policy(policy, fake_facts())


def test_usable_ca_certificates_become_two_read_only_mounts_and_five_variables(monkeypatch):
    from launcher.host.hostpaths import PathFact
    from launcher.plan import compiler as compiler_mod

    monkeypatch.setattr(compiler_mod.inject, "ca_bundle", lambda data: CERT)   # a real one: test_engine
    policy = replace(preset("ci"), ca_certificates=("/etc/company-ca.pem",))
    fact = PathFact(given="/etc/company-ca.pem", real="/etc/company-ca.pem", kind="file")
    plan = compile_policy(policy, fake_facts(ca_certs=((fact, b"x"),),
                                             ca_store=("/state/cas/a-extra.pem", "/state/cas/b-bundle.pem")))
    mounts = {m.target: m for m in plan.container.mounts}
    assert mounts["/etc/sandbox-ca/extra.pem"].source == "/state/cas/a-extra.pem"
    assert mounts["/etc/sandbox-ca/bundle.pem"].read_only and "/etc/sandbox-ca/bundle.pem" not in plan.probe.writable
    env = dict(plan.container.env)
    assert env["SSL_CERT_FILE"] == env["GIT_SSL_CAINFO"] == env["REQUESTS_CA_BUNDLE"] == "/etc/sandbox-ca/bundle.pem"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/sandbox-ca/extra.pem"


def test_ca_files_are_checked_once_with_the_host_facts_never_by_the_compiler(monkeypatch):
    from launcher.host.hostpaths import PathFact
    from launcher.policy import inject

    monkeypatch.setattr(inject, "ca_bundle", lambda data: CERT)
    policy = replace(preset("ci"), ca_certificates=("/etc/company-ca.pem",))
    fact = PathFact(given="/etc/company-ca.pem", real="/etc/company-ca.pem", kind="file")
    facts = fake_facts(ca_certs=((fact, b"x"),), ca_store=("/state/cas/a-extra.pem", "/state/cas/b-bundle.pem"))
    assert facts.ca_certs[0].pem == CERT and not facts.ca_certs[0].problem

    def again(data):
        raise AssertionError("the compiler checked a CA file again")

    monkeypatch.setattr(inject, "ca_bundle", again)
    assert compile_policy(policy, facts).container.mounts
