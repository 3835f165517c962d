"""The GitHub Actions example, run locally step by step: the stand-in agent (examples/agent) calls a
stand-in model API (our own container) through the proxy-injected secret, edits the workspace, and
the key appears nowhere the agent or the job's records could show it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, script_upstream

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"


@pytest.fixture
def model_api(engine):
    """The stand-in model API as api.test on a fresh internal network, expecting a random key."""
    key = "key-" + os.urandom(12).hex()
    source = (ROOT / "examples" / "agent" / "fake-model-api.py").read_text()
    with script_upstream(engine, "ci", "api.test", source, {"MODEL_API_EXPECTED_KEY": key}) as (network, log, _):
        yield network, key, log


def step(name: str) -> str:
    return next(s["run"] for s in yaml.safe_load(WORKFLOW.read_text())["jobs"]["agent"]["steps"] if s.get("name") == name)


def checkout(tmp_path: Path) -> Path:
    """What actions/checkout leaves: the repository (here the example one) with examples/ in it."""
    repo = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples" / "untrusted-repo", repo)
    for part in ("agent", "ci"):
        shutil.copytree(ROOT / "examples" / part, repo / "examples" / part)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    return repo


def run_step(name: str, repo: Path, tmp_path: Path, network: str, key: str, task: str = "add notes",
             **extra_env: str):
    """Run one step's script with bash as the runner would, `sandbox` being this checkout's launcher;
    the signing key is prepared first (as the job does), once."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "sandbox"
    # The test network stands in for the internet: the proxy is attached to it.
    shim.write_text(f'#!/bin/sh\nif [ "$1" = run ]; then shift; set -- run --egress-network {network} "$@"; fi\n'
                    f'cd "$PWD" && PYTHONPATH={ROOT} exec {sys.executable} -m launcher "$@"\n')
    shim.chmod(0o755)
    # The example's policy, pointed at the stand-in model API, outside the workspace as the example
    # says; its mount source `../agent` is relative to the policy file, so the agent goes beside it.
    policy = tmp_path / "ci" / "policy.yaml"
    policy.parent.mkdir(exist_ok=True)
    if not (tmp_path / "agent").exists():
        shutil.copytree(ROOT / "examples" / "agent", tmp_path / "agent")
    policy.write_text((ROOT / "examples" / "ci" / "sandbox-ci.yaml").read_text()
                      .replace("https://api.example.com", "http://api.test"))
    runner_temp = tmp_path / "runner-temp"       # $RUNNER_TEMP: outside the checkout
    runner_temp.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SANDBOX_POLICY": str(policy),
           "MODEL_API_KEY": key, "TASK": task, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "RUNNER_TEMP": str(runner_temp), **extra_env}
    if name != "Prepare the signing key" and not (runner_temp / "sandbox-attest.pem").exists():
        prepared = subprocess.run(["bash", "-e", "-c", step("Prepare the signing key")], cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=60)
        assert prepared.returncode == 0, prepared.stderr
    return subprocess.run(["bash", "-e", "-c", step(name)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.engine
def test_the_workflow_runs_the_stand_in_agent_with_the_key_injected_and_invisible(engine, model_api, tmp_path):
    network, key, log = model_api
    repo = checkout(tmp_path)
    doctor = run_step("Check the host", repo, tmp_path, network, key)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr

    result = run_step("Run the agent in a sandbox", repo, tmp_path, network, key, task="fix the failing test")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agent succeeded" in result.stdout and "applied the model's patch (1 file(s))" in result.stdout
    assert (repo / "NOTES-FROM-THE-MODEL.md").read_text() == "# Notes from the model\nTask: fix the failing test\n"
    assert "auth=ok host=api.test task='fix the failing test'" in log()

    report = json.loads((repo / "sandbox-report.json").read_text())
    assert report["status"] == "ok" and report["probe"]["ok"] and report["agent"]["exit_code"] == 0
    verified = run_step("Verify the record", repo, tmp_path, network, key)   # the archived record: signed
    assert verified.returncode == 0 and "the signature verifies" in verified.stdout, verified.stderr
    record = json.loads((repo / "sandbox-run.intoto.json").read_text())
    assert record["payloadType"] == "application/vnd.in-toto+json"
    summary = (tmp_path / "summary.md").read_text()
    assert "sandbox: the agent ran and succeeded" in summary and "| probe | passed" in summary
    assert "| exit status | `0` (the agent) |" in summary and "**Egress blocked:** nothing" in summary
    for text in (result.stdout, result.stderr, summary, log(), *(p.read_text(errors="replace")
                                                                  for p in repo.rglob("*") if p.is_file())):
        assert key not in text


@pytest.mark.engine
def test_an_agent_failure_keeps_its_own_exit_code_and_is_told_apart_from_the_sandbox(engine, model_api, tmp_path):
    network, key, log = model_api
    repo = checkout(tmp_path)
    result = run_step("Run the agent in a sandbox", repo, tmp_path, network, "wrong-" + key)
    assert result.returncode == 3, result.stdout + result.stderr      # the stand-in's "model API failed"
    assert "::error::the agent failed (its exit code 3)" in result.stdout and "answered 401" in result.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert "the agent ran and failed" in summary and "| exit status | `3` (the agent) |" in summary
    assert not (repo / "NOTES-FROM-THE-MODEL.md").exists()


@pytest.mark.engine
def test_a_sandbox_failure_is_reported_as_one(engine, model_api, tmp_path):
    network, key, _ = model_api
    repo = checkout(tmp_path)
    result = run_step("Run the agent in a sandbox", repo, tmp_path, network, "")   # no key: refused before start
    assert result.returncode == 120 and "::error::sandbox refused or failed (exit 120)" in result.stdout
    assert "refused before anything ran" in (tmp_path / "summary.md").read_text()


def test_the_signing_key_comes_from_the_secret_or_is_made_in_the_job_and_said(tmp_path):
    """The key step alone (no engine needed): the secret's PEM written 0600 outside the checkout,
    or, without the secret, a key made there with a warning; the public key beside it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    for secret in (pem, ""):
        temp = tmp_path / ("with" if secret else "without")
        temp.mkdir()
        env = {**os.environ, "RUNNER_TEMP": str(temp), "SANDBOX_ATTEST_KEY": secret}
        done = subprocess.run(["bash", "-e", "-c", step("Prepare the signing key")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        key = temp / "sandbox-attest.pem"
        assert (key.stat().st_mode & 0o777) == 0o600 and (temp / "sandbox-attest.pub").exists()
        assert (key.read_text().strip() == pem.strip()) == bool(secret)
        assert ("::warning::no SANDBOX_ATTEST_KEY secret" in done.stdout) == (not secret)
