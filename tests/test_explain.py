"""`sandbox explain`: every effective field has a mechanism, a component and probe checks that exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.check import explain
from launcher.pipeline import stack
from launcher.policy.layers import FIELDS

ROOT = Path(__file__).resolve().parent.parent


def test_every_check_the_table_names_is_one_the_probe_runs():
    from launcher.plan import checks

    assert explain.checks_named() <= set(checks.ALL)   # exact equality: tests/test_checks.py


def test_every_field_has_a_row_for_every_variant():
    for preset in ("untrusted", "read-only"):
        rows = explain.rows(stack.load_base(preset))
        assert [r.field for r in rows] == list(FIELDS)
    for field in FIELDS:
        assert any(f == field for f, _ in explain.ENFORCEMENT), field


def test_unenforced_and_unprobed_fields_are_flagged():
    flags = {r.field: r.flags for r in explain.rows(stack.load_base("untrusted"))}
    assert flags["image"] == flags["command"] == ("enforced by nothing", "not probed")
    assert flags["limits.cpus"] == flags["limits.timeout"] == ("not probed",)
    assert flags["workspace.protect"] == flags["network.mode"] == ()


def test_network_rows_follow_the_mode(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: p\ndescription: d\nnetwork: {mode: proxy, allow: [api.example.com]}\n")
    rows = {r.field: r for r in explain.rows(stack.load_base(str(path)))}
    assert rows["network.allow"].enforcement.component is explain.Component.PROXY
    assert "egress.denied" in rows["network.allow"].enforcement.checks
    none = {r.field: r for r in explain.rows(stack.load_base("untrusted"))}
    assert none["network.allow"].enforcement.checks == ("net.interfaces", "net.routes")


@pytest.fixture
def env(tmp_path_factory):
    host = tmp_path_factory.mktemp("host")   # beside the workspace (tmp_path), never in it: refused there
    (host / "org.yaml").write_text("version: 1\nlimits: {pids: 100}\n")
    return {**os.environ, "XDG_STATE_HOME": str(host / "state"), "XDG_CONFIG_HOME": str(host / "config"),
            "SANDBOX_ORG_POLICY": str(host / "org.yaml"), "PYTHONPATH": str(ROOT)}


def explain_cli(*args, env):
    return subprocess.run([sys.executable, "-m", "launcher", "explain", *args], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)


def test_cli_text_json_and_markdown(env, tmp_path):
    text = explain_cli("untrusted", "-w", str(tmp_path), env=env)
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith("limits.pids"))
    assert "100" in row and "--pids-limit" in row and "cgroup" in row and "limits.pids" in row
    assert "not probed: image, packages, build, workspace.exclude, home.size, limits.cpus, limits.timeout, limits.session, limits.idle, command" in text.stdout
    data = json.loads(explain_cli("untrusted", "-w", str(tmp_path), "--format", "json", env=env).stdout)
    assert [f["field"] for f in data["fields"]] == list(FIELDS) and data["layers"][1]["kind"] == "org"
    pids = next(f for f in data["fields"] if f["field"] == "limits.pids")
    assert pids["decided_by"].startswith("org ") and pids["probe_checks"] == ["limits.pids"]
    markdown = explain_cli("untrusted", "-w", str(tmp_path), "--format", "markdown", env=env).stdout
    assert markdown.startswith("| field | value |")


def test_explain_never_asks_about_an_unapproved_repository_policy(env, tmp_path):
    (tmp_path / ".sandbox.yaml").write_text("version: 1\nlimits: {pids: 32}\n")
    result = explain_cli("untrusted", "-w", str(tmp_path), env=env)
    assert result.returncode == 0 and "is not applied: not approved" in result.stderr
    assert "32" not in next(line for line in result.stdout.splitlines() if line.startswith("limits.pids"))


def test_checks_that_cannot_observe_are_shown_not_applicable_with_their_reason():
    gvisor, runc = stack.load_base("untrusted-gvisor"), stack.load_base("untrusted")
    assert [c for c, _ in explain.not_applicable(gvisor)] == ["nnp", "mounts.workspace", "limits.pids"]
    assert explain.not_applicable(runc) == ()
    # a Pod: no pids limit of its own, the claim's source unknown; the same reasons on both Pod targets
    pod = explain.not_applicable(runc, "kubernetes")
    assert [c for c, _ in pod] == ["mounts.workspace", "limits.pids"] and pod == explain.not_applicable(runc, "agent-sandbox")
    assert "probe check n/a (not observable inside): nnp: gVisor shows no NoNewPrivs line" in explain.render(gvisor)
    assert explain.to_json(runc, "kubernetes")["not_applicable"][1]["check"] == "limits.pids"
