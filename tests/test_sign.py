"""Signed run records (DSSE envelopes, ed25519 and ECDSA P-256): a round trip for both key types, every
tamper caught with the key (a changed byte anywhere, another key, another type, a swapped keyid, an
unsigned record, extra signatures), what is honest without a key, bad key files refused before
anything starts, and `up --attest` writing its record at `down`. No engine."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from test_attest import fake_run, invoke, statement

from launcher import signing
from launcher.engine.enginefake import FakeEngine
from launcher.errors import AttestationInvalid, ExitCode
from launcher.launch import attest, records
from launcher.pipeline import pipeline

MAKERS = {"ed25519": ed25519.Ed25519PrivateKey.generate, "ecdsa-p256": lambda: ec.generate_private_key(ec.SECP256R1())}


def pem_pair(tmp_path, name: str, private_key) -> tuple:
    """The key's private and public PEM files, as `openssl genpkey` / `openssl pkey -pubout` write them."""
    key, pub = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    key.write_bytes(private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    pub.write_bytes(private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pub


@pytest.fixture(params=sorted(MAKERS))
def keys(request, tmp_path):
    """(algorithm, private PEM, public PEM) of a fresh key of each type."""
    key, pub = pem_pair(tmp_path, request.param, MAKERS[request.param]())
    return request.param, key, pub


def signed_record(tmp_path, key_file) -> bytes:
    key = signing.signing_key(str(key_file))
    doc = statement(tmp_path)
    doc["predicate"].update(unsigned=False, signature=attest.SIGNED,
                            signer={"keyid": key.keyid, "algorithm": key.algorithm})
    doc["subject"] = attest.subjects(doc["predicate"])
    path = tmp_path / "att.intoto.json"
    attest.write(str(path), doc, key)
    return path.read_bytes()


def pub(file) -> signing.Key:
    return signing.verifying_key(str(file))


def envelope_of(data: bytes) -> dict:
    return json.loads(data)


def rewritten(doc: dict) -> bytes:
    return signing.serialize(doc)


def test_pae_is_dsse_v1s_encoding():
    # The DSSE protocol's own example.
    assert signing.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert signing.pae(signing.PAYLOAD_TYPE, b"") == b"DSSEv1 28 application/vnd.in-toto+json 0 "


def test_a_signed_record_round_trips_and_is_a_dsse_envelope_of_the_statement(keys, tmp_path):
    algorithm, key, public = keys
    data = signed_record(tmp_path, key)
    doc = envelope_of(data)
    assert list(doc) == ["payload", "payloadType", "signatures"] and data.endswith(b"]\n}\n") and data.isascii()
    assert doc["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(doc["payload"])
    inner = json.loads(payload)
    assert payload == attest.serialize(inner)            # the payload is the Statement's canonical file form
    assert inner["_type"] == attest.STATEMENT_TYPE and inner["predicate"]["unsigned"] is False
    checked = attest.check(data, "att.json", pub(public))
    assert checked.signed and checked.verified and checked.algorithm == algorithm
    [sig] = doc["signatures"]
    der = serialization.load_pem_public_key(public.read_bytes()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert sig["keyid"] == checked.keyid == attest.sha256(der) == inner["predicate"]["signer"]["keyid"]
    raw = base64.b64decode(sig["sig"])
    if algorithm == "ecdsa-p256":
        assert all(decode_dss_signature(raw))             # DER-encoded (r, s)
    else:
        assert len(raw) == 64
    # Checked independently of signing.check: the signature is the key's over PAE(type, payload).
    verifier = serialization.load_pem_public_key(public.read_bytes())
    message = signing.pae(doc["payloadType"], payload)
    if algorithm == "ed25519":
        verifier.verify(raw, message)
    else:
        from cryptography.hazmat.primitives import hashes

        verifier.verify(raw, message, ec.ECDSA(hashes.SHA256()))


def test_a_changed_byte_anywhere_is_caught_with_the_key(keys, tmp_path):
    """Every position of the envelope (the payload's base64, the signature, the keyid, the frame);
    for ECDSA every position of the signatures and every 7th of the payload (ed25519 has them all)."""
    algorithm, key, public = keys
    data, verifier = signed_record(tmp_path, key), pub(public)
    said = set()
    sigs = data.index(b'"signatures"')
    for i in range(len(data)):
        if algorithm == "ecdsa-p256" and i < sigs and i % 7:
            continue
        new = data[i] ^ 0x01 if data[i] not in b"\n " else data[i] ^ 0x02
        try:
            attest.check(data[:i] + bytes([new]) + data[i + 1:], "att.json", verifier)
        except AttestationInvalid as exc:
            said.add(str(exc).split(": ", 1)[1][:30])
        else:
            pytest.fail(f"byte {i} ({data[i - 20:i + 20]!r}) changed went unnoticed")
    assert len(data) > 5000 and any("the signature does not verify" in s for s in said), said


def flip_payload(data: bytes) -> bytes:
    """One byte of the Statement changed (a digit), re-encoded: a well-formed envelope."""
    doc = envelope_of(data)
    payload = bytearray(base64.b64decode(doc["payload"]))
    at = payload.index(b'"exit_code": 122') + len('"exit_code": 12')
    payload[at] = ord("3")
    doc["payload"] = base64.b64encode(bytes(payload)).decode()
    return rewritten(doc)


def flip_signature(data: bytes) -> bytes:
    doc = envelope_of(data)
    raw = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
    raw[len(raw) // 2] ^= 0x01
    doc["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    return rewritten(doc)


def test_each_tamper_is_caught_with_the_key_and_said(keys, tmp_path):
    algorithm, key, public = keys
    data, verifier = signed_record(tmp_path, key), pub(public)
    other_same = pem_pair(tmp_path, "same", MAKERS[algorithm]())
    other_type = pem_pair(tmp_path, "type", MAKERS[({*MAKERS} - {algorithm}).pop()]())
    swapped = envelope_of(data)
    swapped["signatures"][0]["keyid"] = pub(other_same[1]).keyid
    doubled = envelope_of(data)
    doubled["signatures"].append({"keyid": "0" * 64, "sig": "AAAA"})
    junk = envelope_of(data)
    junk["signatures"][0]["note"] = "x"
    retyped = envelope_of(data)
    retyped["payloadType"] = "application/json"
    cases = {
        "payload byte": (flip_payload(data), verifier, "the signature does not verify"),
        "signature byte": (flip_signature(data), verifier, "the signature does not verify"),
        "keyid swapped": (rewritten(swapped), verifier, "not by the key in"),
        "other key, same type": (data, pub(other_same[1]), "not by the key in"),
        "other type": (data, pub(other_type[1]), "not by the key in"),
        "extra signature": (rewritten(doubled), verifier, "expected exactly one signature"),
        "signature junk": (rewritten(junk), verifier, "exactly keyid and sig"),
        "payload type": (rewritten(retyped), verifier, "payloadType"),
        "not canonical": (data.replace(b"\n", b"\r\n"), verifier, "not in its canonical form"),
        "unsigned record": (attest.serialize(statement(tmp_path)), verifier, "the record is unsigned"),
    }
    for case, (tampered, given, says) in cases.items():
        with pytest.raises(AttestationInvalid, match=says):
            attest.check(tampered, "att.json", given)
        result = verify_cli(tmp_path, tampered, "--key", str(given.file))
        assert result.exit_code == ExitCode.ATTESTATION_INVALID == 118, (case, result.stderr)
        assert says in result.stderr.replace("\n  ", " ") and "Traceback" not in result.stderr, (case, result.stderr)


def test_a_forger_who_resigns_with_own_key_passes_only_as_not_verified_without_the_key(keys, tmp_path):
    algorithm, key, public = keys
    data = signed_record(tmp_path, key)
    forger_key, _ = pem_pair(tmp_path, "forger", MAKERS[algorithm]())
    forger = signing.signing_key(str(forger_key))
    inner = json.loads(base64.b64decode(envelope_of(data)["payload"]))
    inner["predicate"]["report"]["probe"]["checks"][1]["ok"] = True
    inner["predicate"]["signer"]["keyid"] = forger.keyid
    inner["subject"] = attest.subjects(inner["predicate"])
    forged = attest.signed(inner, forger)
    result = verify_cli(tmp_path, forged)
    assert result.exit_code == 0 and "NOT verified" in result.stdout and forger.keyid in result.stdout
    with pytest.raises(AttestationInvalid, match="not by the key in"):
        attest.check(forged, "att.json", pub(public))


def test_the_payload_taken_out_of_its_envelope_is_not_an_unsigned_record(keys, tmp_path):
    _, key, _ = keys
    payload = base64.b64decode(envelope_of(signed_record(tmp_path, key))["payload"])
    with pytest.raises(AttestationInvalid, match="not in its DSSE envelope"):
        attest.check(payload, "att.json")


def verify_cli(tmp_path, data: bytes, *args):
    path = tmp_path / "given.json"
    path.write_bytes(data)
    return invoke("verify-attestation", str(path), *args)


def test_verify_attestation_says_signed_verified_or_not_honestly(keys, tmp_path):
    algorithm, key, public = keys
    data = signed_record(tmp_path, key)
    keyid = pub(public).keyid
    result = verify_cli(tmp_path, data, "--key", str(public))
    assert result.exit_code == 0, result.stderr
    assert "ok: every digest matches, the signature verifies" in result.stdout
    assert f"signed and verified: the signature is by the key given ({algorithm}, keyid {keyid})" in result.stdout
    result = verify_cli(tmp_path, data)
    assert result.exit_code == 0 and "ok: every digest matches (" in result.stdout
    assert f"signed ({algorithm}, keyid {keyid}) but NOT verified: no --key was given" in result.stdout
    said = json.loads(verify_cli(tmp_path, data, "--json").stdout)
    assert (said["ok"], said["signed"], said["verified"], said["keyid"]) == (True, True, False, keyid)
    said = json.loads(verify_cli(tmp_path, data, "--json", "--key", str(public)).stdout)
    assert (said["ok"], said["signed"], said["verified"], said["algorithm"]) == (True, True, True, algorithm)
    result = verify_cli(tmp_path, flip_signature(data), "--json", "--key", str(public))
    said = json.loads(result.stdout)
    assert result.exit_code == 118 and said["ok"] is False and "does not verify" in said["error"]


def bad_key_files(tmp_path) -> dict:
    p384, _ = pem_pair(tmp_path, "p384", ec.generate_private_key(ec.SECP384R1()))
    rsa_key, _ = pem_pair(tmp_path, "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    _, public = pem_pair(tmp_path, "pubonly", ed25519.Ed25519PrivateKey.generate())
    encrypted = tmp_path / "enc.pem"
    encrypted.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    text = tmp_path / "notes.txt"
    text.write_text("not a key\n")
    fifo = tmp_path / "fifo.pem"
    os.mkfifo(fifo)                                           # never read: it would hang the launcher
    return {p384: "an EC key on secp384r1", rsa_key: "a key of type RSA", public: "a public key",
            encrypted: "the private key is encrypted", text: "not a PEM private key",
            tmp_path / "missing.pem": "cannot read the private key", tmp_path: "not a regular file",
            fifo: "not a regular file"}


@pytest.mark.parametrize("command", ["run", "up"])
def test_a_bad_signing_key_is_refused_before_anything_starts(tmp_path, monkeypatch, command):
    def never(*args, **kwargs):
        raise AssertionError("the pipeline ran")

    monkeypatch.setattr(pipeline, "layered", never)
    tail = ["--", "true"] if command == "run" else ["--no-shell"]
    for path, says in bad_key_files(tmp_path).items():
        result = invoke(command, "-w", str(tmp_path), "--attest", str(tmp_path / "a.json"), "--attest-key", str(path),
                        *tail)
        assert result.exit_code == ExitCode.USAGE, (path, result.stderr)
        assert "--attest-key" in result.stderr and str(path) in result.stderr and says in result.stderr, result.stderr
        assert "nothing was started" in result.stderr and "Traceback" not in result.stderr
    key, _ = pem_pair(tmp_path, "good", ed25519.Ed25519PrivateKey.generate())
    result = invoke(command, "-w", str(tmp_path), "--attest-key", str(key), *tail)
    assert result.exit_code == ExitCode.USAGE and "give --attest FILE too" in result.stderr


def test_verify_attestation_refuses_a_private_or_unreadable_key_as_a_usage_error(tmp_path):
    key, public = pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())
    data = signed_record(tmp_path, key)
    for given, says in [(key, "a private key; --key takes the public one"), (tmp_path / "nope.pub", "cannot read"),
                        (tmp_path / "att.intoto.json", "not a PEM public key")]:
        result = verify_cli(tmp_path, data, "--key", str(given))
        assert result.exit_code == ExitCode.USAGE, result.stderr
        assert says in result.stderr and str(given) in result.stderr and "Traceback" not in result.stderr


def test_the_documented_openssl_commands_make_keys_that_sign_and_verify(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl here")
    for args in (["-algorithm", "ed25519"], ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]):
        subprocess.run(["openssl", "genpkey", *args, "-out", str(tmp_path / "key.pem")], check=True)
        subprocess.run(["openssl", "pkey", "-in", str(tmp_path / "key.pem"), "-pubout",
                        "-out", str(tmp_path / "key.pub")], check=True)
        data = signed_record(tmp_path, tmp_path / "key.pem")
        assert attest.check(data, "att.json", pub(tmp_path / "key.pub")).verified
        # And openssl alone verifies it, as docs/attestation.md shows: the envelope is plain DSSE.
        doc = envelope_of(data)
        payload = base64.b64decode(doc["payload"])
        (tmp_path / "pae.bin").write_bytes(signing.pae(doc["payloadType"], payload))
        (tmp_path / "sig.bin").write_bytes(base64.b64decode(doc["signatures"][0]["sig"]))
        pub_file, pae_file, sig_file = (str(tmp_path / n) for n in ("key.pub", "pae.bin", "sig.bin"))
        verify = (["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub_file, "-rawin", "-in", pae_file,
                   "-sigfile", sig_file] if "ed25519" in args else
                  ["openssl", "dgst", "-sha256", "-verify", pub_file, "-signature", sig_file, pae_file])
        assert subprocess.run(verify, capture_output=True).returncode == 0
        (tmp_path / "sig.bin").write_bytes(base64.b64decode(envelope_of(flip_signature(data))["signatures"][0]["sig"]))
        assert subprocess.run(verify, capture_output=True).returncode != 0


def test_run_with_a_key_writes_a_signed_record(keys, tmp_path, monkeypatch):
    algorithm, key, public = keys
    fake_run(monkeypatch)
    (tmp_path / "ws").mkdir()
    out = tmp_path / "run.intoto.json"
    result = invoke("run", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--attest", str(out),
                    "--attest-key", str(key), "--", "true")
    assert result.exit_code == 0, result.stderr
    assert f"attestation record written to {out} (signed: a DSSE envelope, {algorithm}" in result.stderr
    checked = attest.check(out.read_bytes(), str(out), pub(public))
    assert checked.verified and checked.statement["predicate"]["run"]["status"] == "ok"


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
def test_a_signing_key_others_can_read_is_warned_of(tmp_path, monkeypatch, mode):
    fake_run(monkeypatch)
    (tmp_path / "ws").mkdir()
    key, _ = pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())
    key.chmod(mode)
    result = invoke("run", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--attest",
                    str(tmp_path / "a.json"), "--attest-key", str(key), "--", "true")
    assert result.exit_code == 0, result.stderr
    warned = f"warning: {key} (mode {mode:04o}) can be read by other users" in result.stderr
    assert warned == (mode != 0o600), result.stderr


def test_up_keeps_the_record_and_down_writes_it_signed(keys, tmp_path, monkeypatch):
    from launcher.engine import engine
    from launcher.errors import NotFound
    from launcher.launch import sandboxes

    algorithm, key, public = keys
    fake_run(monkeypatch)
    monkeypatch.setattr(sandboxes, "find", lambda eng, name: (_ for _ in ()).throw(NotFound(name)))
    (tmp_path / "ws").mkdir()
    out = tmp_path / "up.intoto.json"
    result = invoke("up", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--name", "sandbox-signed",
                    "--attest", str(out), "--attest-key", str(key), "--no-shell")
    assert result.exit_code == 0, result.stderr
    assert "goes to" in result.stderr and "`sandbox down sandbox-signed`" in result.stderr
    assert not out.exists() and records.names() == ("sandbox-signed",)
    kept = records.pending("sandbox-signed")
    assert kept["key"]["file"] == str(key) and key.read_text().splitlines()[1] not in json.dumps(kept)
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    monkeypatch.setattr(sandboxes, "down", lambda eng, name, purge=False: sandboxes.Down())
    result = invoke("down", "sandbox-signed", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["attestation"] == {"path": str(out), "signed": True, "written": True,
                                                        "error": None}
    assert f"attestation record written to {out} (signed)" in result.stderr and records.names() == ()
    checked = attest.check(out.read_bytes(), str(out), pub(public))
    run = checked.statement["predicate"]["run"]
    assert checked.verified and run["removed_by"] == "sandbox down" and run["status"] == "ok"
    assert run["started_at"] <= run["finished_at"] and checked.statement["predicate"]["report"]["probe"]["ok"]


def test_down_with_the_key_gone_says_so_keeps_the_record_and_exits_118(tmp_path, monkeypatch):
    from launcher.engine import engine
    from launcher.errors import NotFound
    from launcher.launch import sandboxes

    key, _ = pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())
    fake_run(monkeypatch)
    monkeypatch.setattr(sandboxes, "find", lambda eng, name: (_ for _ in ()).throw(NotFound(name)))
    (tmp_path / "ws").mkdir()
    out = tmp_path / "up.intoto.json"
    assert invoke("up", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--name", "sandbox-k",
                  "--attest", str(out), "--attest-key", str(key), "--no-shell").exit_code == 0
    pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())   # the file now holds another key
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    monkeypatch.setattr(sandboxes, "down", lambda eng, name, purge=False: sandboxes.Down())
    result = invoke("down", "sandbox-k")
    assert result.exit_code == ExitCode.ATTESTATION_INVALID, result.stderr
    assert "holds another key" in result.stderr and "kept: `sandbox gc` tries again" in result.stderr
    assert not out.exists() and records.names() == ("sandbox-k",)


def test_a_sandbox_gc_removes_gets_its_record_written_by_gc(tmp_path, monkeypatch):
    from launcher.engine import engine
    from launcher.errors import NotFound
    from launcher.launch import sandboxes

    fake_run(monkeypatch)
    monkeypatch.setattr(sandboxes, "find", lambda eng, name: (_ for _ in ()).throw(NotFound(name)))
    (tmp_path / "ws").mkdir()
    out = tmp_path / "up.intoto.json"
    assert invoke("up", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"), "--name", "sandbox-gc",
                  "--attest", str(out), "--no-shell").exit_code == 0
    monkeypatch.setattr(engine, "connect", lambda **_: FakeEngine())
    for name in ("gc", "stale_probe_volumes", "ls", "gc_copies"):
        monkeypatch.setattr(sandboxes, name, lambda *args, **kwargs: [])
    result = invoke("gc")
    assert result.exit_code == 0, result.stderr
    assert f"attestation record written to {out} (unsigned)" in result.stderr and records.names() == ()
    checked = attest.check(out.read_bytes(), str(out))
    assert not checked.signed and checked.statement["predicate"]["run"]["removed_by"] == "sandbox gc"


@pytest.mark.parametrize("command", ["run", "up"])
def test_a_signing_key_inside_the_workspace_is_refused_the_agent_could_read_it(tmp_path, monkeypatch, command):
    def never(*args, **kwargs):
        raise AssertionError("the pipeline ran")

    monkeypatch.setattr(pipeline, "layered", never)
    ws = tmp_path / "ws"
    (ws / "keys").mkdir(parents=True)
    key, _ = pem_pair(ws / "keys", "k", ed25519.Ed25519PrivateKey.generate())
    (tmp_path / "link.pem").symlink_to(key)                 # through a link outside: the same file
    tail = ["--", "true"] if command == "run" else ["--no-shell"]
    for given in (key, tmp_path / "link.pem"):
        result = invoke(command, "-w", str(ws), "--attest", str(tmp_path / "a.json"), "--attest-key", str(given), *tail)
        assert result.exit_code == ExitCode.USAGE, result.stderr
        assert "is inside the workspace" in result.stderr and "nothing was started" in result.stderr


def test_without_the_key_a_keyid_that_is_not_the_statements_signer_is_still_caught(tmp_path):
    key, _ = pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())
    doc = envelope_of(signed_record(tmp_path, key))
    doc["signatures"][0]["keyid"] = "0" * 64
    with pytest.raises(AttestationInvalid, match="does not name the envelope's keyid 0000"):
        attest.check(rewritten(doc), "att.json")


def test_a_kept_record_of_a_sandbox_removed_behind_our_back_is_written_by_the_next_up(tmp_path, monkeypatch):
    from launcher.errors import NotFound
    from launcher.launch import sandboxes

    fake_run(monkeypatch)
    monkeypatch.setattr(sandboxes, "find", lambda eng, name: (_ for _ in ()).throw(NotFound(name)))
    (tmp_path / "ws").mkdir()
    first, up = tmp_path / "first.intoto.json", ["up", "--workspace-mode", "bind", "-w", str(tmp_path / "ws"),
                                                 "--name", "sandbox-again", "--no-shell"]
    assert invoke(*up, "--attest", str(first)).exit_code == 0 and not first.exists()
    result = invoke(*up)   # `docker rm -f` removed the first: no down, no gc
    assert result.exit_code == 0, result.stderr
    assert f"the attestation record of the earlier sandbox-again (removed without `sandbox down`) was written to " \
           f"{first}" in result.stderr
    assert records.names() == ()   # the new sandbox's down writes no record it was not asked for
    run = attest.check(first.read_bytes(), str(first)).statement["predicate"]["run"]
    assert run["removed_by"] == "found removed by `sandbox up`"


def test_a_malformed_envelope_is_not_called_unsigned(tmp_path):
    key, _ = pem_pair(tmp_path, "k", ed25519.Ed25519PrivateKey.generate())
    doc = envelope_of(signed_record(tmp_path, key))
    doc["signatures"].append(dict(doc["signatures"][0]))
    result = verify_cli(tmp_path, rewritten(doc))
    assert result.exit_code == 118 and "expected exactly one signature" in result.stderr
    assert "unsigned:" not in result.stderr
