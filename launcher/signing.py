"""Signed run records: the in-toto Statement in a DSSE envelope (ed25519 or ECDSA P-256 PEM keys),
made and checked with `cryptography`, which is imported only here and only when a key is used."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field

from launcher.errors import AttestationInvalid

PAYLOAD_TYPE = "application/vnd.in-toto+json"
KEY_LIMIT = 64 << 10           # a PEM key is a few hundred bytes
ENVELOPE_KEYS = {"payload", "payloadType", "signatures"}
MAKE_KEY = "openssl genpkey -algorithm ed25519 -out key.pem && openssl pkey -in key.pem -pubout -out key.pub"


class KeyInvalid(ValueError):
    """A key file that cannot be used: it names the file and says why (the CLI makes it a usage error)."""


@dataclass(frozen=True, kw_only=True)
class Key:
    """A loaded key: its file, its algorithm (ed25519, ecdsa-p256), its keyid (the sha256 of its
    public key's DER SubjectPublicKeyInfo) and the key object itself (never shown)."""

    file: str
    algorithm: str
    keyid: str
    private: bool
    handle: object = field(repr=False, compare=False)
    shared_mode: int | None = None   # a private key file others may read: its mode (the CLI warns)


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def _read(path: str, what: str) -> bytes:
    """The file's first bytes; a regular file only (a FIFO would hang the launcher, never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise KeyInvalid(f"{path}: cannot read the {what}: not a regular file")
            data = os.read(fd, KEY_LIMIT + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise KeyInvalid(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > KEY_LIMIT:
        raise KeyInvalid(f"{path}: larger than {KEY_LIMIT >> 10} KiB: not a PEM {what}")
    return data


def _described(path: str, public) -> tuple[str, str]:
    """(algorithm, keyid) of a public key we accept; KeyInvalid for any other."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(public, ed25519.Ed25519PublicKey):
        algorithm = "ed25519"
    elif isinstance(public, ec.EllipticCurvePublicKey) and isinstance(public.curve, ec.SECP256R1):
        algorithm = "ecdsa-p256"
    else:
        found = f"an EC key on {public.curve.name}" if isinstance(public, ec.EllipticCurvePublicKey) else \
            f"a key of type {type(public).__name__.replace('PublicKey', '') or 'unknown'}"
        raise KeyInvalid(f"{path}: {found}; expected an ed25519 or ECDSA P-256 (prime256v1) key "
                         f"(make one: {MAKE_KEY})")
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return algorithm, hashlib.sha256(der).hexdigest()


def signing_key(path: str) -> Key:
    """The private key in the PEM file `path` (unencrypted ed25519 or EC P-256); KeyInvalid says why not."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:   # cryptography's "Password was not given but private key is encrypted"
        raise KeyInvalid(f"{path}: the private key is encrypted; sandbox reads no passphrase: give it a key file "
                         "only the job can read (`openssl pkey -in ENCRYPTED.pem -out key.pem`)") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        if b"PUBLIC KEY-----" in data:
            raise KeyInvalid(f"{path}: a public key; --attest-key takes the private one (its public key is what "
                             "`verify-attestation --key` takes)") from None
        raise KeyInvalid(f"{path}: not a PEM private key ({exc}); make one: {MAKE_KEY}") from None
    algorithm, keyid = _described(path, key.public_key())
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return Key(file=path, algorithm=algorithm, keyid=keyid, private=True, handle=key,
               shared_mode=mode if mode & 0o077 else None)


def verifying_key(path: str) -> Key:
    """The public key in the PEM file `path` (SubjectPublicKeyInfo, ed25519 or EC P-256)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _read(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise KeyInvalid(f"{path}: a private key; --key takes the public one, which is all a verifier should hold "
                         f"(`openssl pkey -in {path} -pubout -out key.pub`)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyInvalid(f"{path}: not a PEM public key: {exc}") from None
    algorithm, keyid = _described(path, key)
    return Key(file=path, algorithm=algorithm, keyid=keyid, private=False, handle=key)


def _signature(key: Key, message: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if key.algorithm == "ed25519":
        return key.handle.sign(message)
    return key.handle.sign(message, ec.ECDSA(hashes.SHA256()))   # DER-encoded (r, s), as DSSE's ECDSA users write it


def envelope(payload: bytes, key: Key) -> dict:
    """The DSSE envelope of `payload` (the Statement's canonical bytes), signed with `key`."""
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(_signature(key, pae(PAYLOAD_TYPE, payload)))
                            .decode()}]}


def serialize(doc: dict) -> bytes:
    """The one accepted form of an envelope file (as attest.serialize for a Statement)."""
    return (json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n").encode()


@dataclass(frozen=True, kw_only=True)
class Opened:
    """An envelope whose form is right: the payload's bytes and its one signature (not yet checked)."""

    payload: bytes
    keyid: str
    sig: bytes


def _decoded(text, where: str, bad) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or base64.b64encode(raw).decode() != text:   # one spelling only: standard, padded
        raise bad(f"{where} is not standard base64")
    return raw


def opened(data: bytes, doc, file: str) -> Opened | None:
    """The envelope in `doc` (the file's parsed JSON), or None when `doc` is not one (an unsigned
    Statement); AttestationInvalid for an envelope of another form than sandbox writes."""
    if not (isinstance(doc, dict) and doc.keys() & ENVELOPE_KEYS):
        return None

    def bad(why: str) -> AttestationInvalid:
        return AttestationInvalid(f"{file}: not a sandbox DSSE envelope: {why}")

    if set(doc) != ENVELOPE_KEYS:
        raise bad("expected an object with exactly payload, payloadType and signatures")
    if doc["payloadType"] != PAYLOAD_TYPE:
        raise bad(f"payloadType is {doc['payloadType']!r}, not {PAYLOAD_TYPE}")
    sigs = doc["signatures"]
    if not isinstance(sigs, list) or len(sigs) != 1:
        raise bad(f"expected exactly one signature (sandbox signs with one key), found "
                  f"{len(sigs) if isinstance(sigs, list) else type(sigs).__name__}")
    one = sigs[0]
    if not isinstance(one, dict) or set(one) != {"keyid", "sig"}:
        raise bad("the signature is not an object of exactly keyid and sig")
    if not (isinstance(one["keyid"], str) and len(one["keyid"]) == 64 and
            all(c in "0123456789abcdef" for c in one["keyid"])):
        raise bad("signatures[0].keyid is not a sha256 in hex")
    found = Opened(payload=_decoded(doc["payload"], "payload", bad), keyid=one["keyid"],
                   sig=_decoded(one["sig"], "signatures[0].sig", bad))
    if data != serialize(doc):
        raise bad("the file is not in its canonical form (sorted keys, two-space indent, ASCII, one final newline): "
                  "it was edited after it was written")
    return found


def check(found: Opened, key: Key, file: str) -> None:
    """That the envelope's one signature is `key`'s over its payload; AttestationInvalid says why not."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if found.keyid != key.keyid:
        raise AttestationInvalid(f"{file}: signed by keyid {found.keyid}, not by the key in {key.file} "
                                 f"({key.algorithm}, keyid {key.keyid})")
    message = pae(PAYLOAD_TYPE, found.payload)
    try:
        if key.algorithm == "ed25519":
            key.handle.verify(found.sig, message)
        else:
            key.handle.verify(found.sig, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise AttestationInvalid(f"{file}: the signature does not verify with the key in {key.file} "
                                 f"({key.algorithm}, keyid {key.keyid}): the payload or the signature was "
                                 "changed") from None
