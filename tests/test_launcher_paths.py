"""What the launcher itself trusts on this host (its state: trust store, approvals, probe files; the
user's layer and defaults; the org policy) is never mounted into a sandbox, read-only or not: a
sandbox that could write the trust store would approve its own repository policy next time."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.errors import PolicyError
from launcher.host import host
from launcher.host.hostpaths import PathFact
from launcher.plan.compiler import compile_policy
from tests.conftest import fake_facts, untrusted_bind
from tests.test_compiler import policy_with_mount

STATE = "/home/dev/.local/state/sandbox"


@pytest.mark.parametrize("real", ["/home/dev/.local", "/home/dev/.local/state", STATE, STATE + "/approvals"])
def test_a_source_that_is_or_holds_what_the_launcher_trusts_is_refused(real):
    paths = (STATE, "/home/dev/.config/sandbox", "/etc/sandbox/policy.yaml")
    for policy, facts, where in (
            (policy_with_mount("x"), fake_facts(mounts=[PathFact(given="x", real=real, kind="dir")], launcher_paths=paths),
             "mounts[0].source"),
            (untrusted_bind(), fake_facts(workspace=real, launcher_paths=paths), "--workspace")):
        with pytest.raises(PolicyError) as info:
            compile_policy(policy, facts)
        assert f"which is or holds the launcher's own {STATE}" in str(info.value) and where in str(info.value)
    assert compile_policy(policy_with_mount("x"), fake_facts(   # a sibling is not refused
        mounts=[PathFact(given="x", real="/home/dev/.local/share", kind="dir")], launcher_paths=paths))


def test_the_paths_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "s"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(tmp_path / "org" / "p.yaml"))
    assert host.launcher_paths() == (str(tmp_path / "s" / "sandbox"), str(tmp_path / "c" / "sandbox"),
                                     str(tmp_path / "org" / "p.yaml"))


@pytest.mark.parametrize("which", ["XDG_STATE_HOME", "XDG_CONFIG_HOME", "SANDBOX_ORG_POLICY"])
def test_a_bind_workspace_holding_them_is_refused_and_nothing_written(which, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv(which, str(ws / "org.yaml") if which == "SANDBOX_ORG_POLICY" else str(ws / "xdg"))
    if which == "SANDBOX_ORG_POLICY":
        (ws / "org.yaml").write_text("version: 1\n")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, ["compile", "-p", "ci", "-w", "ws", "--format", "argv"],
                              env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert done.exit_code == 120, done.output
    assert "which is or holds the launcher's own" in done.output and "Traceback" not in done.output
    assert sorted(os.listdir(ws)) == (["org.yaml"] if which == "SANDBOX_ORG_POLICY" else [])
