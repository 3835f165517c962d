"""The agent's writable home on the real engine: in every kind of preset an agent can write its
settings there as its own uid and nothing else became writable; a home volume persists per
workspace, is listed, purged, and never mounted for another workspace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from launcher import labels as label
from launcher.engine.enginefake import FakeEngine
from launcher.errors import PolicyError
from launcher.launch import home
from launcher.plan.plan import HomeSpec

SANDBOX = [sys.executable, "-m", "launcher"]
# What Claude Code does first (mkdir ~/.claude, write ~/.claude.json), then what must still fail.
AGENT = ("sh", "-c", 'mkdir -p ~/.claude && touch ~/.claude.json && echo "made $(stat -c %u:%a ~/.claude) $HOME"; '
                     'for p in /home/x /x /etc/x /usr/x /var/x /home/other/x; do touch "$p" 2>/dev/null && echo "WROTE $p"; done; '
                     "awk '$6 ~ /(^|,)rw(,|$)/ { print \"rw \" $5 }' /proc/self/mountinfo")
ENGINE_RW = {"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/etc/resolv.conf", "/etc/hostname", "/etc/hosts",
             "/sys/fs/cgroup"}


def sandbox(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300, **kwargs)


@pytest.mark.engine
@pytest.mark.parametrize("preset", ["untrusted", "ci", "devcontainer"])
def test_an_agent_writes_its_home_as_its_uid_and_nothing_else_became_writable(engine, workspace, tmp_path, preset):
    report = tmp_path / "report.json"
    result = sandbox("run", "--policy", preset, "-w", str(workspace), "--report", str(report), "--", *AGENT)
    assert result.returncode == 0, result.stderr
    assert "made 1000:755 /home/agent" in result.stdout and "WROTE" not in result.stdout, result.stdout
    writable = {line[3:] for line in result.stdout.splitlines()   # /proc/keys, timer_list: masks (binds of /dev/null)
                if line.startswith("rw ") and not line.startswith("rw /proc/")} - ENGINE_RW
    assert writable == {"/workspace", "/tmp", "/home/agent"}, writable
    checks = {c["id"]: c for c in json.loads(report.read_text())["probe"]["checks"]}
    assert checks["home.private"]["ok"] and "owner=1000:1000,mode=700" in checks["home.private"]["observed"], checks["home.private"]
    assert "/home" in checks["fs.rofs"]["expected"] and checks["fs.rofs"]["ok"]
    for line in result.stderr.splitlines():   # copy mode: drop the copy this run made
        if "sandbox discard " in line:
            sandbox("discard", "--yes", line.split("sandbox discard ")[1].split("`")[0])


VOLUME_POLICY = "version: 1\nname: homevol\ndescription: d\nextends: [untrusted]\nworkspace: {mode: bind}\nhome: {mode: volume}\n"


@pytest.mark.engine
def test_a_home_volume_keeps_the_home_for_the_next_run_and_down_purge_removes_it(engine, workspace, tmp_path):
    policy = tmp_path / "homevol.yaml"
    policy.write_text(VOLUME_POLICY)
    name, volume = "sandbox-test-home-up", ""
    try:
        first = sandbox("run", "--policy", str(policy), "-w", str(workspace), "--", "sh", "-c", "echo kept >~/.note")
        made = re.search(r"created the home volume (sandbox-home-\S+-default):", first.stderr)
        assert first.returncode == 0 and made, first.stderr
        volume = made.group(1)
        assert sandbox("up", str(workspace), "--policy", str(policy), "--name", name, "--no-shell").returncode == 0
        listing = json.loads(sandbox("ls", "--json").stdout)
        row = next(r for r in listing if r["name"] == volume)
        assert {k: row[k] for k in ("kind", "state", "policy", "workspace", "created")} == {
            "kind": "home", "state": "in use", "policy": "(default)", "workspace": os.path.realpath(workspace),
            "created": 0}   # (a copy's rows also say how many changes it holds)
        again = sandbox("exec", name, "--", "sh", "-c", "cat ~/.note; stat -c %u:%a ~")
        assert again.stdout.split() == ["kept", "1000:700"], again
        down = sandbox("down", name, "--purge")
        assert down.returncode == 0 and volume in down.stderr, down.stderr
        assert engine.volume_info(volume) is None
    finally:
        sandbox("down", name)
        if volume and engine.volume_info(volume) is not None:
            engine.remove_volume(volume)


@pytest.mark.engine
def test_a_volume_of_that_name_that_is_not_this_workspaces_home_is_refused(engine, workspace):
    spec = HomeSpec(volume=f"sandbox-home-test-{os.getpid()}", workspace=str(workspace), profile="default",
                    trust="abc", uid=1000, gid=1000, labels=())
    for labels in ({}, {"dev.sandbox.managed": "1", "dev.sandbox.kind": "home", "dev.sandbox.workspace": "/elsewhere"}):
        engine.create_volume(spec.volume, labels)
        try:
            with pytest.raises(PolicyError, match="never shared"):
                home.prepare(engine, spec, lambda line: None)
        finally:
            engine.remove_volume(spec.volume)


@pytest.mark.parametrize("workspace, removed", [("/w/a", ["h-a1"]), (None, ["h-a1", "h-b"])])
def test_purge_and_gc_volumes_remove_only_unused_home_volumes(workspace, removed):
    """`down --purge` (one workspace) and `gc --volumes` (all): a home a sandbox uses stays; a copy stays."""
    engine = FakeEngine()
    for name, ws, kind in (("h-a1", "/w/a", "home"), ("h-a2", "/w/a", "home"), ("h-b", "/w/b", "home"),
                           ("c-upper", "/w/a", "copy")):
        engine.create_volume(name, {label.MANAGED: "1", label.KIND: kind, label.WORKSPACE: ws, label.PROFILE: "default"})
    engine.http.add_container("s1", {label.MANAGED: "1", label.KIND: "up", label.HOME: "h-a2"})
    engine.http.add_container("t1", {label.MANAGED: "1", label.KIND: "tool", label.HOME: "h-b"})
    gone, kept = home.remove_unused(engine, workspace)
    assert gone == removed == engine.removed_volumes and kept == ["h-a2 (in use by s1)"]
