"""The attestation record without an engine: its layout, and that any change to the file is caught
(every byte position, every field, whitespace), while a forger who recomputes the digests is not
(unsigned). Real runs are in test_attest_engine.py."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import fake_facts

from launcher.cli import main
from launcher.engine.enginefake import FakeEngine
from launcher.engine.engineproto import ContainerInfo, HostSettings
from launcher.engine.verify import Check, ProbeReport
from launcher.errors import AttestationInvalid, ExitCode
from launcher.launch import attest
from launcher.pipeline import pipeline
from launcher.plan.compiler import compile_policy
from launcher.targets import report


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


def statement(tmp_path, name="untrusted") -> dict:
    """A record as `run` writes it, with an org layer that sets a field (two file layers: a combined
    source digest) and a probe whose report holds a non-ASCII observation."""
    org = tmp_path / "org.yaml"
    org.write_text("version: 1\nlimits: {pids: 100}\n")
    os.environ["SANDBOX_ORG_POLICY"] = str(org)   # restored by conftest's monkeypatch of it
    layered = pipeline.layered(name, str(tmp_path))
    plan = compile_policy(layered.effective.policy, fake_facts(str(tmp_path)))
    probe = ProbeReport(checks=(Check(id="identity.uid", ok=True, expected="1000", observed="1000"),
                                Check(id="fs.root_ro", ok=False, expected="ro", observed="rw … é")),
                        finished=True, verdict_ok=False)
    data = report.build(status="probe-failed", exit_code=122, started=time.monotonic(), plan=plan, probe=probe,
                        error="the sandbox did not take effect")
    recorder = attest.Recorder(None)
    recorder.compared(ContainerInfo(id="c1", image_id="sha256:" + "a" * 64, host=HostSettings(runtime="runc")), [])
    return attest.build(recorder=recorder, plan=plan, policy=layered.effective.policy,
                        layers=layered.effective.layers, engine=FakeEngine(), report=data)


@pytest.fixture
def record(tmp_path) -> bytes:
    path = tmp_path / "att.json"
    attest.write(str(path), statement(tmp_path))
    return path.read_bytes()


def test_the_record_is_an_in_toto_statement_v1_of_our_own_predicate_type(record):
    doc = attest.verify(record, "att.json")
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://sandbox.dev/attestation/run/v1"
    assert list(doc) == ["_type", "predicate", "predicateType", "subject"]    # sorted: the canonical form
    pred = doc["predicate"]
    assert pred["unsigned"] is True and "unsigned" in pred["signature"]
    names = [s["name"] for s in doc["subject"]]
    assert names[0].startswith("sandbox-run:") and names[1] == "policy:untrusted"
    assert {n.split(":")[1] for n in names[2:]} == {"agent", "probe"}
    assert doc["subject"][0]["digest"]["sha256"] == attest.sha256(json.dumps(
        pred, sort_keys=True, separators=(",", ":")).encode())                 # as the README says to recompute it
    assert pred["runtime"] == {"name": "runc", "engine_runtime": "runc", "version": "1.1.5"}
    assert pred["engine"]["kernel"] == "6.1.0" and pred["inspect"]["ok"] is True
    assert pred["report"]["probe"]["checks"][1]["observed"] == "rw … é"       # the full probe report
    assert pred["run"]["exit_code"] == pred["report"]["exit_code"] == 122
    assert record.isascii() and record.endswith(b"}\n")


def test_layers_carry_their_digest_and_the_bytes_it_was_taken_of(record, tmp_path):
    pred = json.loads(record)["predicate"]
    kinds = [layer["kind"] for layer in pred["layers"]]
    assert kinds[0] == "policy" and "org" in kinds
    for layer in pred["layers"]:
        if layer["sha256"]:
            content = base64.b64decode(layer["content"])
            assert content == Path(layer["file"]).read_bytes()
            assert attest.sha256(content) == layer["sha256"]
    org = next(layer for layer in pred["layers"] if layer["kind"] == "org")
    assert org["fields"] == ["limits.pids"]
    assert pred["policy"]["effective"]["limits"]["pids"] == 100
    # Two file layers: the source digest is the combined one, which verify recomputes.
    assert pred["policy"]["source_sha256"] not in {layer["sha256"] for layer in pred["layers"]}


def test_a_layer_file_changed_since_the_run_is_named_not_embedded(tmp_path):
    from launcher.policy.layers import Layer, LayerKind

    doc = statement(tmp_path)
    entry = next(layer for layer in doc["predicate"]["layers"] if layer["kind"] == "org")
    (tmp_path / "org.yaml").write_text("version: 1\nlimits: {pids: 99}\n")
    again = attest.layer_entries([Layer(kind=LayerKind.ORG, file=entry["file"], digest=entry["sha256"], values=())])[0]
    assert "content" not in again and "changed" in again["content_note"]
    os.mkfifo(tmp_path / "fifo")   # never read (it would hang), never embedded
    fifo = attest.layer_entries([Layer(kind=LayerKind.ORG, file=str(tmp_path / "fifo"), digest="0" * 64, values=())])[0]
    assert "content" not in fifo


def similar(byte: int) -> int:
    """Another byte of the same kind, so that most changes still parse and reach the digests."""
    for alphabet in (b"0123456789", b"abcdef", b"ghijklmnopqrstuvwxyz", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b" \n\t"):
        if byte in alphabet:
            return alphabet[(alphabet.index(byte) + 1) % len(alphabet)]
    return byte ^ 0x01


def test_a_changed_byte_anywhere_is_caught(record):
    """Every position gets a byte of its own kind (a digit another digit, a space a newline: most
    changes still parse and reach the digests); every 16th also a case or punctuation change."""
    reached_digests = 0
    for i in range(len(record)):
        for new in {similar(record[i]), record[i] ^ 0x20} if i % 16 == 0 else {similar(record[i])}:
            try:
                attest.verify(record[:i] + bytes([new]) + record[i + 1:], "att.json")
            except AttestationInvalid as exc:
                reached_digests += "does not match its digests" in str(exc)
            else:
                pytest.fail(f"byte {i} ({record[i - 20:i + 20]!r}) changed to {bytes([new])!r} went unnoticed")
    assert len(record) > 5000 and reached_digests > len(record) // 2, (len(record), reached_digests)


def leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, list) and node:
        for i, value in enumerate(node):
            yield from leaves(value, path + (i,))
    else:
        yield path, node


def changed_value(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return "x" if value is None else None   # an empty list or object


def test_every_field_changed_and_written_canonically_is_caught(record):
    """Past the canonical-form check: each field's change is caught by a digest."""
    doc = json.loads(record)
    count = 0
    for path, value in leaves(doc):
        copy = json.loads(record)
        node = copy
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = changed_value(value)
        with pytest.raises(AttestationInvalid, match="does not match its digests|not a sandbox attestation"):
            attest.verify(attest.serialize(copy), "att.json")
        count += 1
    assert count > 300, count


@pytest.mark.parametrize("edit", [
    lambda text: text.replace('  "predicate"', '    "predicate"', 1),         # indentation
    lambda text: text.replace(": ", ":  ", 1),                                # a space more
    lambda text: text.rstrip("\n"),                                            # no final newline
    lambda text: text + "\n",                                                  # one more
    lambda text: text.replace("\n", "\r\n"),                                   # CRLF
    lambda text: text.replace("\n", "\n ", 1),                                 # a leading space
    lambda text: json.dumps(json.loads(text, object_pairs_hook=lambda p: dict(reversed(p))), indent=2) + "\n",   # order
    lambda text: json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n",   # é unescaped
    lambda text: json.dumps(json.loads(text), sort_keys=True) + "\n",          # compact
    lambda text: text.replace("\\u00e9", "\\u00E9"),                           # another spelling of é
], ids=["indent", "space", "no-newline", "newline", "crlf", "leading", "order", "unicode", "compact", "escape"])
def test_a_whitespace_or_spelling_edit_that_keeps_the_content_is_caught(record, edit):
    edited = edit(record.decode()).encode()
    assert edited != record and json.loads(edited) == json.loads(record)
    with pytest.raises(AttestationInvalid, match="not in its canonical form"):
        attest.verify(edited, "att.json")


def forged(doc: dict) -> dict:
    doc["subject"] = attest.subjects(doc["predicate"])
    return doc


def test_each_internal_digest_is_checked_on_its_own(record):
    doc = json.loads(record)
    doc["predicate"]["policy"]["effective"]["limits"]["pids"] = 4096
    with pytest.raises(AttestationInvalid, match="policy.sha256 does not match the effective policy"):
        attest.verify(attest.serialize(forged(doc)), "att.json")
    doc = json.loads(record)
    org = next(layer for layer in doc["predicate"]["layers"] if layer["kind"] == "org")
    org["content"] = base64.b64encode(b"version: 1\n").decode()
    with pytest.raises(AttestationInvalid, match=r"layers\[\d\] .*org.yaml\): its sha256 does not match its content"):
        attest.verify(attest.serialize(forged(doc)), "att.json")
    doc = json.loads(record)
    org = next(layer for layer in doc["predicate"]["layers"] if layer["kind"] == "org")
    org["sha256"], org["content"] = attest.sha256(b"version: 1\n"), base64.b64encode(b"version: 1\n").decode()
    with pytest.raises(AttestationInvalid, match="source_sha256 does not match the layers' digests"):
        attest.verify(attest.serialize(forged(doc)), "att.json")
    doc = json.loads(record)
    doc["predicate"]["run"]["exit_code"] = 0
    with pytest.raises(AttestationInvalid, match="run.exit_code"):
        attest.verify(attest.serialize(forged(doc)), "att.json")


def test_a_forger_who_recomputes_every_digest_is_not_caught_that_is_what_unsigned_means(record):
    doc = json.loads(record)
    doc["predicate"]["report"]["probe"]["checks"][1]["ok"] = True
    assert attest.verify(attest.serialize(forged(doc)), "att.json")


@pytest.mark.parametrize("data, says", [
    (b"", "Expecting value"), (b"\xff{}", "codec"), (b"[]", "exactly _type"),
    (b'{"_type": 1, "_type": 2}', "duplicate key"), (b'{"a": NaN}', "not a JSON number"),
])
def test_what_is_not_a_record_is_said(data, says):
    with pytest.raises(AttestationInvalid, match=says):
        attest.verify(data, "x.json")


def test_verify_attestation_says_ok_and_unsigned_or_each_mismatch_with_exit_118(record, tmp_path):
    path = tmp_path / "att.json"
    path.write_bytes(record)
    result = invoke("verify-attestation", str(path))
    assert result.exit_code == 0, result.stderr
    assert f"{path}: ok: every digest matches" in result.stdout and "probe failed: fs.root_ro" in result.stdout
    assert "unsigned" in result.stdout
    path.write_bytes(record.replace(b'"exit_code": 122', b'"exit_code": 123', 1))
    result = invoke("verify-attestation", str(path))
    assert result.exit_code == ExitCode.ATTESTATION_INVALID == 118
    assert "does not match its digests" in result.stderr and "subject" in result.stderr and "unsigned" in result.stderr
    assert "Traceback" not in result.stderr
    result = invoke("verify-attestation", str(tmp_path / "missing.json"))
    assert result.exit_code == 2 and "does not exist" in result.stderr   # a usage error, not a digest mismatch


def test_the_record_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "att.json"
    path.write_text("the previous record\n")

    def broken(doc):
        raise KeyboardInterrupt

    monkeypatch.setattr(attest, "serialize", broken)
    with pytest.raises(KeyboardInterrupt):
        attest.write(str(path), {})
    assert path.read_text() == "the previous record\n" and os.listdir(tmp_path) == ["att.json"]


def test_a_bad_attest_path_is_refused_before_anything_starts(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the pipeline ran")

    monkeypatch.setattr(pipeline, "layered", never)
    for path, says in [(tmp_path / "no" / "att.json", "does not exist"), (tmp_path, "is a directory"),
                       (Path("/proc/att.json"), "cannot write in /proc")]:
        result = invoke("run", "-w", str(tmp_path), "--attest", str(path), "--", "true")
        assert result.exit_code == ExitCode.USAGE, result.stderr
        assert "--attest" in result.stderr and says in result.stderr and "nothing was started" in result.stderr


def test_runsc_is_asked_its_version_and_a_missing_runtime_is_said(tmp_path):
    runsc = tmp_path / "runsc"
    runsc.write_text("#!/bin/sh\necho 'runsc version release-20221107.0'\necho 'spec: 1.0.2'\n")
    runsc.chmod(0o755)
    info = {"Runtimes": {"runsc": {"path": str(runsc)}}}
    assert attest.runtime_version("runsc", {}, info) == "runsc version release-20221107.0"
    assert attest.runtime_version("runsc", {}, {}).startswith("unknown: the engine has no runtime runsc")
    assert attest.runtime_version("runc", FakeEngine().version(), {}) == "1.1.5"


def test_an_engine_that_fails_while_recording_is_written_down(tmp_path):
    layered = pipeline.layered("untrusted", str(tmp_path))
    plan = compile_policy(layered.effective.policy, fake_facts(str(tmp_path)))
    data = report.build(status="engine-error", exit_code=121, started=time.monotonic(), plan=plan)
    doc = attest.build(recorder=attest.Recorder(None), plan=plan, policy=layered.effective.policy,
                       layers=layered.effective.layers, report=data,
                       engine=FakeEngine(fail={"GET /(version|images/)": "the engine went away"}))
    pred = attest.verify(attest.serialize(doc), "att.json")["predicate"]
    gone = "reading the engine version: the engine went away"   # the engine's words, with what it was asked
    assert pred["engine"] == {"error": gone} and "the engine went away" in pred["images"]["agent"]["error"]
    assert pred["runtime"]["name"] == "runc" and pred["runtime"]["error"] == gone
    assert pred["inspect"] == {"compared": False, "ok": False, "differences": []}
    assert [s["name"].split(":")[0] for s in doc["subject"]] == ["sandbox-run", "policy"]


def fake_run(monkeypatch, probe_ok=True):
    """A launch that ends well (or with a failed probe) without an engine: session and launch stand-ins."""
    from launcher.launch import launch, session

    probe = ProbeReport(checks=(Check(id="identity.uid", ok=probe_ok, expected="1000", observed="1000"),),
                        finished=True, verdict_ok=probe_ok)
    monkeypatch.setattr(session, "connect", lambda listener: FakeEngine())
    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "run", lambda engine, plan, listener, forwarding=None: launch.Outcome(
        container=plan.container.name, probe=probe, exit_code=0, timed_out=False))
    monkeypatch.setattr(launch, "up", lambda engine, plan, listener: probe)
    return probe


def test_a_record_that_cannot_be_written_at_the_end_turns_a_success_into_118(tmp_path, monkeypatch):
    fake_run(monkeypatch)

    def disk_full(path, statement, key=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(attest, "write", disk_full)
    (tmp_path / "ws").mkdir()
    result = invoke("run", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--attest", str(tmp_path / "a.json"),
                    "--", "true")
    assert result.exit_code == ExitCode.ATTESTATION_INVALID, result.stderr
    assert f"the attestation record was not written to {tmp_path / 'a.json'}" in result.stderr
    assert "No space left on device" in result.stderr and not (tmp_path / "a.json").exists()


def test_verify_attestation_json_says_the_verdict_and_the_record_or_why_not(record, tmp_path):
    path = tmp_path / "att.json"
    path.write_bytes(record)
    result = invoke("verify-attestation", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    said = json.loads(result.stdout)
    assert said["ok"] is True and said["signed"] is False and said["run"]["exit_code"] == 122
    assert said["probe"] == {"ok": False, "checks": 2, "failed": ["fs.root_ro"]} and said["layers"] >= 2
    path.write_bytes(record.replace(b'"exit_code": 122', b'"exit_code": 123', 1))
    result = invoke("verify-attestation", str(path), "--json")
    said = json.loads(result.stdout)
    assert result.exit_code == 118 and said["ok"] is False and "does not match its digests" in said["error"]
