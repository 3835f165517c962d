"""Real-engine tests of layers: paths that layers and git's hooksPath protect cannot be written or
created, and an approved repository layer narrows what the probe then proves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BIND, untrusted_bind

from launcher.policy import trust

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


@pytest.fixture
def env(tmp_path):
    (tmp_path / "org.yaml").write_text("version: 1\nworkspace: {protect: [secrets, docs/generated]}\n")
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "SANDBOX_ORG_POLICY": str(tmp_path / "org.yaml")}


def run(workspace, env, *args, script: str, report=None) -> subprocess.CompletedProcess:
    extra = ["--report", str(report)] if report else []
    return subprocess.run(SANDBOX + ["run", *BIND, "-w", str(workspace), *extra, *args, "--", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)


def test_layer_and_hooks_path_protections_hold_inside_the_sandbox(engine, workspace, env, tmp_path):
    with open(workspace / ".git" / "config", "a") as config:
        config.write("\thooksPath = .githooks\n")
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key.txt").write_text("original\n")
    for path in (workspace / "secrets", workspace / "secrets" / "key.txt"):
        os.chown(path, 1000, 1000)
    report = tmp_path / "report.json"
    result = run(workspace, env, report=report, script=(
        "echo evil > secrets/key.txt; touch secrets/new; mkdir -p .githooks && echo evil > .githooks/pre-commit; "
        "mkdir -p docs/generated; echo ok > notes.txt; true"))
    assert result.returncode == 0, result.stderr
    assert (workspace / "secrets" / "key.txt").read_text() == "original\n"
    assert sorted(os.listdir(workspace / "secrets")) == ["key.txt"]
    assert not (workspace / ".githooks").exists() and not (workspace / "docs" / "generated").exists()
    assert (workspace / "notes.txt").read_text() == "ok\n"
    checks = {c["id"]: c for c in json.loads(report.read_text())["probe"]["checks"]}
    assert checks["fs.protected"]["ok"]
    for path in ("/workspace/secrets", "/workspace/.githooks", "/workspace/docs/generated"):
        assert path in checks["fs.protected"]["expected"]


def test_a_pinned_repository_layer_narrows_and_cannot_be_changed_from_inside(engine, workspace, env, tmp_path):
    policy = b"version: 1\nlimits: {pids: 64}\n"
    (workspace / ".sandbox.yaml").write_bytes(policy)
    os.chown(workspace / ".sandbox.yaml", 1000, 1000)
    report = tmp_path / "report.json"
    result = run(workspace, env, "--trust-repo-policy", trust.sha256(policy), report=report,
                 script="echo 'limits: {pids: 4096}' >> .sandbox.yaml; true")
    assert result.returncode == 0, result.stderr
    assert (workspace / ".sandbox.yaml").read_bytes() == policy
    data = json.loads(report.read_text())
    assert data["plan"]["container"]["pids_limit"] == 64
    assert {c["id"]: c["ok"] for c in data["probe"]["checks"]}["limits.pids"]
    refused = run(workspace, env, script="true")
    assert refused.returncode == 120 and "not approved on this machine" in refused.stderr


def test_the_probe_notices_when_only_a_layer_added_protection_is_missing(engine, workspace, monkeypatch, tmp_path):
    """Tamper: the plan protects the hooks path and an org path, the container lacks exactly those mounts."""
    from dataclasses import replace

    from fakes import Recorder
    from launcher.engine import images
    from launcher.errors import ProbeFailed
    from launcher.host import hostfacts
    from launcher.launch import launch
    from launcher.pipeline import stack
    from launcher.plan.compiler import compile_policy

    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])   # test the probe alone
    for name, value in {"XDG_STATE_HOME": tmp_path / "state", "XDG_CONFIG_HOME": tmp_path / "config",
                        "SANDBOX_ORG_POLICY": tmp_path / "org.yaml"}.items():
        monkeypatch.setenv(name, str(value))
    (tmp_path / "org.yaml").write_text("version: 1\nworkspace: {protect: [secrets]}\n")
    with open(workspace / ".git" / "config", "a") as config:
        config.write("\thooksPath = .githooks\n")
    base = stack.load_base("untrusted")
    policy = stack.build(untrusted_bind(), base, str(workspace)).effective.policy
    plan = compile_policy(policy, hostfacts.gather(policy, str(workspace), images.probe_volume_name()),
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))
    added = {"/workspace/secrets", "/workspace/.githooks"}
    assert added <= set(plan.probe.protected)
    container = replace(plan.container, mounts=tuple(m for m in plan.container.mounts if m.target not in added))
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, replace(plan, container=container), Recorder())
    failed = {c.id: c for c in info.value.report.failed}
    assert set(failed) == {"fs.protected"}
    assert "creatable:/workspace/secrets" in failed["fs.protected"].observed
    assert "creatable:/workspace/.githooks" in failed["fs.protected"].observed
    assert not (workspace / "AGENT-RAN").exists()
