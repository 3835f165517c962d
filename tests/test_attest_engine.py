"""`sandbox run --attest` against the real engine: the record verifies and is true to the run
(image IDs as `docker image inspect` says, engine and runc versions, exit status, the probe and
egress as they were), also when the probe fails. Traffic only to our own test containers."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest

from conftest import BIND, docker_sdk

from launcher.engine import images
from launcher.errors import AttestationInvalid, ExitCode
from launcher.launch import attest
from launcher.plan import checks
from launcher.selftest.testnet import Internet

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def verified(path) -> dict:
    result = sandbox("verify-attestation", str(path))
    assert result.returncode == 0, result.stderr
    assert "ok: every digest matches" in result.stdout and "unsigned" in result.stdout
    return json.loads(path.read_bytes())


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_run_writes_a_record_that_verifies_and_is_true_to_the_run(engine, workspace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path, report = out / "run.intoto.json", out / "report.json"
    before = time.time()
    result = sandbox("run", *BIND, "-w", str(workspace), "--attest", str(path), "--report", str(report),
                     "--", "sh", "-c", "echo hello; exit 7")
    after = time.time()
    assert result.returncode == 7, result.stderr
    assert f"attestation record written to {path} (unsigned)" in result.stderr
    assert sorted(os.listdir(out)) == ["report.json", "run.intoto.json"]      # no temp file left
    doc = verified(path)
    pred = doc["predicate"]
    api = docker_sdk().api
    for role, ref in (("agent", images.FULL_IMAGE), ("probe", images.probe_image().tag)):
        found = api.inspect_image(ref)
        volume = {"volume": images.probe_volume_name()} if role == "probe" else {}
        assert pred["images"][role] == {"ref": ref, "id": found["Id"], "repo_digests": found.get("RepoDigests") or [],
                                        **volume}
        assert {"name": f"image:{role}:{ref}", "digest": {"sha256": found["Id"].split(":")[1]}} in doc["subject"]
    assert "proxy" not in pred["images"]                           # mode none: no proxy ran
    version = engine.version()
    runc = next(c["Version"] for c in version["Components"] if c["Name"] == "runc")
    assert pred["engine"]["version"] == version["Version"] and pred["engine"]["kernel"] == version["KernelVersion"]
    assert pred["runtime"] == {"name": "runc", "engine_runtime": "runc", "version": runc}
    assert pred["inspect"]["compared"] and pred["inspect"]["ok"] and pred["inspect"]["differences"] == []
    assert pred["inspect"]["image_id"] == pred["images"]["agent"]["id"] and pred["inspect"]["runtime"] == "runc"
    assert pred["run"]["exit_code"] == 7 and pred["run"]["status"] == "agent-failed"
    written = {k: v for k, v in json.loads(report.read_text()).items() if k not in ("command", "ok", "sandbox")}
    assert pred["report"] == written   # the run report itself (the file adds the --json envelope's keys)
    assert pred["report"]["agent"] == {"exit_code": 7, "timed_out": False}
    probe = pred["report"]["probe"]
    assert probe["ok"] and [c["id"] for c in probe["checks"]] == list(checks.for_mode("none"))
    assert before - 1 <= when(pred["run"]["started_at"]) <= when(pred["run"]["finished_at"]) <= after + 1
    assert pred["policy"]["name"] == "untrusted" and pred["policy"]["effective"]["workspace"]["mode"] == "bind"
    base = pred["layers"][0]
    assert base["kind"] == "policy" and base["file"].endswith("policies/untrusted.yaml")
    with open(base["file"], "rb") as handle:
        assert base64.b64decode(base["content"]) == handle.read()
    data = path.read_bytes()   # the real record too: a changed byte (every 61st position) is caught
    for i in range(0, len(data), 61):
        with pytest.raises(AttestationInvalid):
            attest.verify(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:], str(path))


def test_a_probe_failure_still_writes_the_record_with_the_failed_report(engine, workspace, tmp_path):
    """The tamper of test_tamper's ws.access case: the workspace handed to root after the plan."""
    os.chown(workspace, 0, 0)
    os.chmod(workspace, 0o700)
    path = tmp_path / "failed.intoto.json"
    result = sandbox("run", *BIND, "-w", str(workspace), "--attest", str(path), "--",
                     "sh", "-c", "touch /workspace/AGENT-RAN")
    assert result.returncode == ExitCode.PROBE_FAILED, result.stderr
    assert not (workspace / "AGENT-RAN").exists()
    doc = verified(path)
    pred = doc["predicate"]
    assert pred["run"]["exit_code"] == ExitCode.PROBE_FAILED and pred["run"]["status"] == "probe-failed"
    probe = pred["report"]["probe"]
    assert probe["ok"] is False and [c["id"] for c in probe["checks"] if not c["ok"]] == ["ws.access"]
    assert len(probe["checks"]) == len(checks.for_mode("none"))   # the whole report, not only the failure
    assert pred["report"]["agent"] == {"exit_code": None, "timed_out": False}
    assert "ws.access" in pred["report"]["error"] and pred["inspect"]["ok"]
    assert "probe failed: ws.access" in sandbox("verify-attestation", str(path)).stdout


def test_proxy_mode_records_the_proxy_image_and_the_egress_summary(engine, workspace, tmp_path):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    net = Internet(engine)
    try:
        path = tmp_path / "proxy.intoto.json"
        result = sandbox("run", "-p", "ci", "-w", str(workspace), "--egress-network", net.network,
                         "--allow-private", "allowed.test", "--attest", str(path), "--", "bash", "-c",
                         "curl -s -o /dev/null --max-time 10 http://allowed.test/; "
                         "curl -s -o /dev/null --max-time 10 http://denied.test/")
    finally:
        net.close()
    assert result.returncode == 0, result.stderr
    pred = verified(path)["predicate"]
    proxy = images.proxy_image().tag
    assert pred["images"]["proxy"] == {"ref": proxy, "id": docker_sdk().api.inspect_image(proxy)["Id"],
                                       "repo_digests": docker_sdk().api.inspect_image(proxy).get("RepoDigests") or []}
    blocked = pred["report"]["egress"]["blocked"]
    assert [(b["host"], b["count"]) for b in blocked] == [("denied.test", 1)]
    assert any(r["host"] == "allowed.test" and not r["denied"] for r in pred["report"]["egress"]["requests"])
    assert pred["policy"]["effective"]["network"]["mode"] == "proxy"
    assert [c["id"] for c in pred["report"]["probe"]["checks"]] == list(checks.for_mode("proxy"))


def test_an_inspect_mismatch_is_recorded_with_its_differences_and_no_probe(engine, workspace, tmp_path):
    """The host-side check failing: an image whose VOLUME lines add writable mounts the plan lacks."""
    import io

    tag = f"sandbox-test/attest-volumes:{os.getpid()}"
    dockerfile = f"FROM {images.AGENT_IMAGE}\nVOLUME /etc/cron.d\n".encode()
    docker_sdk().images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, labels={"dev.sandbox.managed": "1"})
    try:
        policy = tmp_path / "volumes.yaml"
        policy.write_text(f"version: 1\nname: volumes\ndescription: d\nextends: [untrusted]\nimage: {tag}\n")
        path = tmp_path / "inspect.intoto.json"
        result = sandbox("run", "-p", str(policy), "-w", str(workspace), "--attest", str(path), "--",
                         "touch", "/workspace/AGENT-RAN")
        image_id = docker_sdk().api.inspect_image(tag)["Id"]
    finally:
        docker_sdk().api.remove_image(tag, force=True)
    assert result.returncode == ExitCode.PROBE_FAILED, result.stderr
    pred = verified(path)["predicate"]
    assert pred["inspect"]["compared"] and pred["inspect"]["ok"] is False
    assert any("VOLUME /etc/cron.d" in d for d in pred["inspect"]["differences"]), pred["inspect"]
    assert pred["inspect"]["image_id"] == pred["images"]["agent"]["id"] == image_id
    assert pred["report"]["probe"] is None and pred["run"]["status"] == "probe-failed"
    assert [layer["kind"] for layer in pred["layers"]][:2] == ["preset", "policy"]   # extends: both files, in order
    assert not (workspace / "AGENT-RAN").exists()


def key_files(tmp_path, name: str, algorithm: str) -> tuple:
    """A key made as docs/attestation.md says (openssl), its private and public PEM files."""
    key, pub = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    how = ["-algorithm", "ed25519"] if algorithm == "ed25519" else ["-algorithm", "EC", "-pkeyopt",
                                                                    "ec_paramgen_curve:P-256"]
    subprocess.run(["openssl", "genpkey", *how, "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    return key, pub


def test_a_signed_run_record_verifies_with_its_key_only(engine, workspace, tmp_path):
    key, pub = key_files(tmp_path, "signer", "ed25519")
    _, other = key_files(tmp_path, "other", "ed25519")
    path = tmp_path / "signed.intoto.json"
    result = sandbox("run", *BIND, "-w", str(workspace), "--attest", str(path), "--attest-key", str(key), "--",
                     "true")
    assert result.returncode == 0, result.stderr
    assert f"attestation record written to {path} (signed: a DSSE envelope, ed25519" in result.stderr
    checked = sandbox("verify-attestation", str(path), "--key", str(pub))
    assert checked.returncode == 0 and "the signature verifies" in checked.stdout, checked.stderr
    assert json.loads(path.read_bytes())["payloadType"] == "application/vnd.in-toto+json"
    wrong = sandbox("verify-attestation", str(path), "--key", str(other))
    assert wrong.returncode == ExitCode.ATTESTATION_INVALID and "not by the key in" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_up_with_attest_writes_a_signed_record_at_down(engine, workspace, tmp_path):
    key, pub = key_files(tmp_path, "signer", "ecdsa-p256")
    name, path = f"sandbox-attest-up-{os.getpid()}", tmp_path / "up.intoto.json"
    try:
        result = sandbox("up", *BIND, str(workspace), "--name", name, "--attest", str(path), "--attest-key", str(key),
                         "--no-shell")
        assert result.returncode == 0, result.stderr
        assert not path.exists() and f"`sandbox down {name}` removes it" in result.stderr
        assert sandbox("exec", name, "--", "touch", "/workspace/made-while-up").returncode == 0
    finally:
        down = sandbox("down", name)
    assert down.returncode == 0, down.stderr
    assert f"attestation record written to {path} (signed)" in down.stderr
    checked = sandbox("verify-attestation", str(path), "--key", str(pub), "--json")
    assert checked.returncode == 0, checked.stderr
    said = json.loads(checked.stdout)
    assert said["verified"] and said["algorithm"] == "ecdsa-p256" and said["run"]["sandbox"] == name
    doc = attest.check(path.read_bytes(), str(path)).statement
    pred = doc["predicate"]
    assert pred["run"]["removed_by"] == "sandbox down"
    assert when(pred["run"]["started_at"]) < when(pred["run"]["finished_at"])
    assert pred["inspect"]["compared"] and pred["inspect"]["ok"] and pred["report"]["probe"]["ok"]
    assert pred["images"]["agent"]["id"] == docker_sdk().api.inspect_image(images.FULL_IMAGE)["Id"]


def test_up_whose_probe_fails_writes_its_signed_record_at_once(engine, workspace, tmp_path):
    """No `down` follows a refused start, so its record is written then, not kept for later."""
    from launcher.launch import records

    key, pub = key_files(tmp_path, "signer", "ed25519")
    os.chown(workspace, 0, 0)
    os.chmod(workspace, 0o700)
    name, path = f"sandbox-attest-refused-{os.getpid()}", tmp_path / "refused.intoto.json"
    result = sandbox("up", *BIND, str(workspace), "--name", name, "--attest", str(path), "--attest-key", str(key),
                     "--no-shell")
    assert result.returncode == ExitCode.PROBE_FAILED, result.stderr
    assert f"attestation record of the refused start written to {path} (signed" in result.stderr
    assert records.pending(name) is None
    checked = sandbox("verify-attestation", str(path), "--key", str(pub), "--json")
    assert checked.returncode == 0, checked.stderr
    pred = attest.check(path.read_bytes(), str(path)).statement["predicate"]
    assert pred["run"]["status"] == "probe-failed" and pred["run"]["exit_code"] == ExitCode.PROBE_FAILED
    assert [c["id"] for c in pred["report"]["probe"]["checks"] if not c["ok"]] == ["ws.access"]
    assert docker_sdk().containers.list(all=True, filters={"name": name}) == []


def test_up_in_proxy_mode_records_the_egress_read_at_down_before_the_proxy_goes(engine, workspace, tmp_path):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    net = Internet(engine)
    name, path = f"sandbox-attest-proxy-{os.getpid()}", tmp_path / "proxy-up.intoto.json"
    try:
        result = sandbox("up", "-p", "ci", str(workspace), "--name", name, "--egress-network", net.network,
                         "--allow-private", "allowed.test", "--attest", str(path), "--no-shell")
        assert result.returncode == 0, result.stderr
        for host in ("allowed.test", "denied.test"):
            sandbox("exec", name, "--", "curl", "-s", "-o", "/dev/null", "--max-time", "10", f"http://{host}/")
    finally:
        down = sandbox("down", name)
        net.close()
    assert down.returncode == 0, down.stderr
    pred = verified(path)["predicate"]
    egress = pred["report"]["egress"]
    assert "error" not in egress and [(b["host"], b["count"]) for b in egress["blocked"]] == [("denied.test", 1)]
    assert any(r["host"] == "allowed.test" and not r["denied"] for r in egress["requests"])
    # the rules in force, as the start recorded them, kept when down adds the log
    assert {"host": "allowed.test", "ports": [80, 443], "private": True, "methods": None, "paths": None,
            "mode": "enforce", "enforcer": "proxy (tunnel)"} in egress["rules"]
    assert pred["run"]["removed_by"] == "sandbox down" and "proxy" in pred["images"]
