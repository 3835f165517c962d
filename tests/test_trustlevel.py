"""Trust keys of persisted state (issue 40 item 2): a home volume or copy written by a sandbox of
one reach is never mounted into a sandbox of another, on the same workspace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from launcher import labels as label
from launcher.copies import store
from launcher.engine.enginefake import FakeEngine
from launcher.errors import PolicyError
from launcher.launch import home, sandboxes
from launcher.plan import trustlevel
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import CopySpec, HomeSpec
from launcher.policy.allowlist import parse_rule
from launcher.policy.model import Access, HomeMode, MountPolicy, NetworkMode, Runtime, SecretPolicy, WorkspaceMode
from conftest import fake_facts, preset

SANDBOX = [sys.executable, "-m", "launcher"]


def _ws(policy, **kw):
    return replace(policy, workspace=replace(policy.workspace, **kw))


def _net(policy, **kw):
    return replace(policy, network=replace(policy.network, **kw))


WIDER = {   # each a sandbox that reaches more than `untrusted` does, in one respect
    "bind mode": lambda p: _ws(p, mode=WorkspaceMode.BIND),
    "read-only workspace": lambda p: _ws(p, access=Access.READ_ONLY),
    "git read-write": lambda p: _ws(p, git=Access.READ_WRITE),
    "one protected path fewer": lambda p: _ws(p, protect=p.workspace.protect[1:]),
    "proxy network": lambda p: _net(p, mode=NetworkMode.PROXY, allow=(parse_rule("pypi.org"),)),
    "another allowed host": lambda p: _net(p, mode=NetworkMode.PROXY, allow=(parse_rule("files.pythonhosted.org"),)),
    "another port": lambda p: _net(p, mode=NetworkMode.PROXY, allow=(parse_rule("pypi.org:8443"),)),
    "a mount": lambda p: replace(p, mounts=(MountPolicy(source="/srv/data", target="/data", access=Access.READ_ONLY),)),
    "the mount writable": lambda p: replace(p, mounts=(MountPolicy(source="/srv/data", target="/data",
                                                                   access=Access.READ_WRITE),)),
    "a capability": lambda p: replace(p, capabilities=("NET_BIND_SERVICE",)),
    "gVisor": lambda p: replace(p, runtime=Runtime.GVISOR),
    "an env name passed": lambda p: replace(p, env=replace(p.env, pass_names=p.env.pass_names + ("EDITOR",))),
    "a secret": lambda p: replace(p, secrets=(SecretPolicy(name="api", env="API_KEY", file="",
                                                           upstream="https://api.example.com", header="X-Key: {value}"),)),
    "another image": lambda p: replace(p, image="sandbox/agent-other:1"),
    "another user": lambda p: replace(p, user=(1001, 1001)),
}


@pytest.mark.parametrize("change", sorted(WIDER))
def test_every_difference_of_reach_gives_another_trust_key_and_home_volume(change):
    low = preset("untrusted")   # copy mode, no network
    low = replace(low, home=replace(low.home, mode=HomeMode.VOLUME))
    high = WIDER[change](low)
    assert trustlevel.key(high) != trustlevel.key(low)
    a, b = (compile_policy(p, fake_facts(workspace="/home/dev/repo")) for p in (low, high))
    assert a.home.volume != b.home.volume and a.home.profile == b.home.profile == "default"
    assert a.probe.homesrc == f"/{a.home.volume}/_data" and b.probe.homesrc == f"/{b.home.volume}/_data"


@pytest.mark.parametrize("change", ["timeout", "memory", "command", "name"])
def test_what_grants_nothing_keeps_the_key(change):
    low = preset("untrusted")
    other = {"timeout": lambda p: replace(p, limits=replace(p.limits, timeout_seconds=7)),
             "memory": lambda p: replace(p, limits=replace(p.limits, memory_bytes=1 << 30)),
             "command": lambda p: replace(p, command=("zsh",)),
             "name": lambda p: replace(p, name="renamed", description="other")}[change](low)
    assert trustlevel.key(other) == trustlevel.key(low)


def test_a_home_volume_of_this_name_written_under_another_trust_key_is_refused():
    engine = FakeEngine()
    spec = HomeSpec(volume="sandbox-home-x", workspace="/w/a", profile="default", trust="aaaa", uid=1000, gid=1000,
                    labels=())
    for found in ({}, {label.TRUST: "bbbb"}):   # made before trust keys; made under another key
        engine.create_volume(spec.volume, {label.MANAGED: "1", label.KIND: "home", label.WORKSPACE: "/w/a", **found})
        with pytest.raises(PolicyError, match="written under trust key " + (found.get(label.TRUST) or "none")):
            home.prepare(engine, spec, lambda line: None)
        engine.remove_volume(spec.volume)


def test_a_kept_copy_is_reused_only_under_its_own_trust_key():
    """`sandbox up` names its copy by the workspace: a later `up` with a wider policy would work on
    what the narrower agent left, unreviewed."""
    engine = FakeEngine()
    spec = CopySpec(name="sandbox-repo", source="/w/a", uid=1000, gid=1000, exclude=(), protected=(), labels=(),
                    trust="aaaa")
    for part in ("base", "upper", "tree"):
        engine.create_volume(f"sandbox-repo-{part}", {label.MANAGED: "1", label.KIND: "copy", label.COPY: "sandbox-repo",
                                                     label.WORKSPACE: "/w/a", label.TRUST: "bbbb"})
    with pytest.raises(PolicyError, match="made under trust key bbbb"):
        store.begin(engine, spec, lambda line: None)
    assert store.begin(engine, replace(spec, trust="bbbb"), lambda line: None) is None   # the same key: reused


def test_ls_shows_each_ones_trust_key_and_what_it_keeps():
    engine = FakeEngine()
    engine.create_volume("h-new", {label.MANAGED: "1", label.KIND: "home", label.WORKSPACE: "/w/a",
                                   label.PROFILE: "default", label.TRUST: "aaaa"})
    engine.create_volume("h-old", {label.MANAGED: "1", label.KIND: "home", label.WORKSPACE: "/w/a",
                                   label.PROFILE: "default"})
    engine.http.add_container("s1", {label.MANAGED: "1", label.KIND: "up", label.HOME: "h-new", label.TRUST: "aaaa",
                                     label.WORKSPACE: "/w/a"})
    rows = {i.name: i for i in sandboxes.ls(engine)}
    assert (rows["s1"].trust, rows["s1"].keeps) == ("aaaa", ("home h-new",))
    assert (rows["h-new"].trust, rows["h-new"].state) == ("aaaa", "in use")
    assert (rows["h-old"].trust, rows["h-old"].state) == ("unkeyed", "kept")
    gone, _ = home.remove_unused(engine)   # gc --volumes takes an old one
    assert gone == ["h-old"]


def sandbox(*args) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300)


NARROW = "version: 1\nname: narrow\ndescription: d\nextends: [untrusted]\nhome: {mode: volume}\n"
WIDE = {   # the second sandbox, on the same workspace: each reaches more than the first
    "bind": "workspace: {mode: bind}\n",
    "bind, git read-write": "workspace: {mode: bind, git: read-write}\n",
    "copy, a mount": "mounts: [{source: MOUNT, target: /data}]\n",
}


@pytest.mark.engine
@pytest.mark.parametrize("wide", sorted(WIDE))
def test_what_a_narrower_sandbox_planted_in_its_home_never_reaches_a_wider_one(engine, workspace, tmp_path, wide):
    narrow, wider = tmp_path / "narrow.yaml", tmp_path / "wide.yaml"
    narrow.write_text(NARROW)
    (tmp_path / "data").mkdir()
    wider.write_text(NARROW.replace("name: narrow", "name: wide") + WIDE[wide].replace("MOUNT", str(tmp_path / "data")))
    plant = "echo 'touch /workspace/PWNED' >>~/.bashrc; mkdir -p ~/.config/git; echo planted >~/.gitconfig"
    look = "cat ~/.gitconfig ~/.bashrc 2>&1; ls -A ~"
    try:   # (the session's engine fixture drops the copies these runs keep)
        first = sandbox("run", "--policy", str(narrow), "-w", str(workspace), "--", "sh", "-c", plant)
        assert first.returncode == 0, first.stderr
        made = re.search(r"created the home volume (\S+):", first.stderr).group(1)
        second = sandbox("run", "--policy", str(wider), "-w", str(workspace), "--", "sh", "-c", look)
        assert second.returncode == 0, second.stderr
        other = re.search(r"created the home volume (\S+):", second.stderr).group(1)   # created, not reused
        assert other != made and "planted" not in second.stdout and "PWNED" not in second.stdout, second.stdout
        again = sandbox("run", "--policy", str(narrow), "-w", str(workspace), "--", "sh", "-c", look)
        assert f"using the home volume {made}" in again.stderr and "planted" in again.stdout   # its own, kept
        rows = {r["name"]: r for r in json.loads(sandbox("ls", "--json").stdout)}
        assert rows[made]["trust"] != rows[other]["trust"] and rows[made]["keeps"] == [f"home {made}"]
    finally:
        home.remove_unused(engine, os.path.realpath(workspace))


@pytest.mark.parametrize("ref", ["untrusted", "read-only", "ci"])
def test_the_selftest_judges_the_presets_home_keying_and_fails_without_it(ref, monkeypatch):
    from launcher.selftest import runner

    facts = fake_facts(workspace="/home/dev/repo")
    good = runner.judge_home_trust(preset(ref), facts)
    assert good.verdict == runner.PASS and "none of the 3 wider policies" in good.observed, good
    monkeypatch.setattr(trustlevel, "key", lambda policy: "samesamesame")   # the keying undone
    bad = runner.judge_home_trust(preset(ref), facts)
    assert bad.verdict == runner.FAIL and "shares" in bad.observed, bad


COPY_WIDER = {   # a second `up` on the same workspace and name, each reaching more than the first
    "a mount": "mounts: [{source: MOUNT, target: /data}]\n",
    "a variable passed": "env: {pass: [TERM, LANG, EDITOR]}\n",
    "git read-write": "workspace: {git: read-write}\n",
}


@pytest.mark.engine
@pytest.mark.parametrize("wider", sorted(COPY_WIDER))
def test_a_kept_copy_is_never_worked_on_by_a_wider_policy(engine, workspace, tmp_path, wider):
    narrow, wide = tmp_path / "narrow.yaml", tmp_path / "wide.yaml"
    narrow.write_text("version: 1\nname: narrowcopy\ndescription: d\nextends: [untrusted]\n")
    (tmp_path / "data").mkdir()
    wide.write_text("version: 1\nname: widecopy\ndescription: d\nextends: [untrusted]\n"
                    + COPY_WIDER[wider].replace("MOUNT", str(tmp_path / "data")))
    name = f"sandbox-test-trustcopy-{os.getpid()}-{sorted(COPY_WIDER).index(wider)}"
    try:
        assert sandbox("up", str(workspace), "--policy", str(narrow), "--name", name, "--no-shell").returncode == 0
        assert sandbox("exec", name, "--", "sh", "-c", "echo planted >>Makefile").returncode == 0
        assert "stays in the copy" in sandbox("down", name).stderr   # the narrow agent's work is kept
        refused = sandbox("up", str(workspace), "--policy", str(wide), "--name", name, "--no-shell")
        assert refused.returncode == 120 and "made under trust key" in refused.stderr, refused.stderr
        assert f"sandbox discard {name}" in refused.stderr and "Traceback" not in refused.stderr
        again = sandbox("up", str(workspace), "--policy", str(narrow), "--name", name, "--no-shell")
        assert again.returncode == 0, again.stderr   # its own policy: the same key, the copy reused
        assert "planted" in sandbox("exec", name, "--", "cat", "Makefile").stdout
    finally:
        sandbox("down", name)
        for _ in range(10):   # right after `down` the engine may still count a use of the volume for a moment
            if "volume is in use" not in sandbox("discard", name).stderr:
                break
            time.sleep(1)
