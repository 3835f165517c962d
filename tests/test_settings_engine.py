"""Defaults set once, on a real engine: `sandbox run` with no --policy or --timeout runs the preset
and the timeout of the user's config.yaml (and says so), and a flag still wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def test_run_takes_the_user_files_preset_and_timeout(engine, tmp_path):
    from conftest import owned_workspace

    ws = owned_workspace(tmp_path)
    config = tmp_path / "config" / "sandbox"
    config.mkdir(parents=True)
    (config / "config.yaml").write_text("version: 1\npolicy: read-only\ntimeout: 5m\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([*SANDBOX, "run", "-w", str(ws), "--json", "--", "true"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["policy"]["name"] == "read-only", report["policy"]
    assert f"defaults: policy read-only (user {config}/config.yaml); timeout 5m" in done.stderr
    assert report["plan"]["timeout_seconds"] == 300, report["plan"].keys()
    flagged = subprocess.run([*SANDBOX, "run", "-w", str(ws), "--json", "-p", "untrusted", "--workspace-mode", "bind",
                              "--", "true"], capture_output=True, text=True, timeout=300, env=env)
    assert flagged.returncode == 0, flagged.stderr
    assert json.loads(flagged.stdout)["policy"]["name"] == "untrusted"
