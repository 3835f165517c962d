"""The attestation record of a run (`sandbox run --attest FILE`): one in-toto Statement v1 whose
predicate holds what the run was (policy, layers, images, engine, runtime, inspect, the run report).
Unsigned (and saying so), or signed in a DSSE envelope (signing.py); `check` re-checks every digest
it holds and, given the public key, the signature."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone

from launcher import signing
from launcher.engine import images
from launcher.engine.engineproto import ContainerInfo
from launcher.errors import AttestationInvalid, EngineError
from launcher.host import engineid
from launcher.plan import runtimes
from launcher.plan.plan import PROBE_DIR, LaunchPlan, MountKind
from launcher.policy.layers import layers_digest
from launcher.targets.argv import plain
from launcher.timings import timed

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://sandbox.dev/attestation/run/v1"
UNSIGNED = ("unsigned: the digests catch accidents and naive edits, not a forger, who can recompute them; "
            "only a signature (`--attest-key`) says who wrote it")
SIGNED = ("signed: the file is a DSSE envelope over this statement; `sandbox verify-attestation FILE --key PUB` "
          "checks that the holder of the key with this keyid signed it")
CONTENT_LIMIT = 1 << 20        # a layer file larger than this is named and digested, not embedded


def canonical(value) -> bytes:
    """The bytes a digest is taken of: sorted keys, no whitespace, ASCII (as Python's json.dumps(value,
    sort_keys=True, separators=(",", ":")) writes them; a file name that is not UTF-8 survives too)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def serialize(statement: dict) -> bytes:
    """The one accepted file form (so that a whitespace or key-order edit is caught too)."""
    return (json.dumps(statement, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n").encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Recorder:
    """A launch listener that passes everything on and keeps what only the launch sees: the
    created container's `docker inspect`, compared with the plan."""

    def __init__(self, inner):
        self.inner = inner
        self.started_at = now()
        self.inspect: dict | None = None

    def status(self, message: str) -> None:
        self.inner.status(message)

    def output(self, stream: str, data: bytes) -> None:
        self.inner.output(stream, data)

    def phase(self, name: str):
        return timed(self.inner, name)

    def compared(self, info: ContainerInfo, diffs: list[str]) -> None:
        self.inspect = {"compared": True, "ok": not diffs, "differences": list(diffs),
                        "container_id": info.id, "image_id": info.image_id, "runtime": info.host.runtime or ""}


def runtime(plan: LaunchPlan, version: dict, info: dict) -> dict:
    """The runtime the sandbox runs under (the policy's `runtime:`, as the plan's probe expects it)
    and its version."""
    name = "gvisor" if plan.probe.kernel == "gvisor" else "runc"
    engine_name = plan.container.runtime   # HostConfig.Runtime: runc, sandbox-runsc, sandbox-runsc-hostinet
    return {"name": name, "engine_runtime": engine_name, "version": runtime_version(engine_name, version, info)}


def runtime_version(engine_name: str, version: dict, info: dict) -> str:
    """runc's version as the engine reports it; any other runtime's from its binary (`runsc --version`)."""
    if engine_name == "runc":
        return runtimes.runc_version(version) or (info.get("RuncCommit") or {}).get("ID", "")
    path = ((info.get("Runtimes") or {}).get(engine_name) or {}).get("path", "")
    if not path:
        return f"unknown: the engine has no runtime {engine_name}"
    try:
        return runtimes.binary_version(path) or "unknown"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown: {path} --version failed: {exc}"


def _engine_facts(engine, plan: LaunchPlan) -> tuple[dict, dict]:
    try:
        version, info = engine.version(), engine.info()
    except EngineError as exc:
        return {"error": str(exc)}, {**runtime(plan, {}, {}), "error": str(exc)}
    identity = engineid.identify(version, info)
    facts = {"engine": identity.kind, "version": identity.version, "api_version": identity.api_version,
             "rootless": identity.rootless,
             "os": version.get("Os", ""), "arch": version.get("Arch", ""),
             "kernel": version.get("KernelVersion") or info.get("KernelVersion", ""),
             "components": {c.get("Name", ""): c.get("Version", "") for c in version.get("Components") or []},
             "cgroup_version": str(info.get("CgroupVersion", "")),
             "security_options": list(info.get("SecurityOptions") or []),
             "default_runtime": info.get("DefaultRuntime", "")}
    return facts, runtime(plan, version, info)


def _images(engine, plan: LaunchPlan) -> dict:
    refs = {"agent": plan.container.image, "probe": images.probe_image().tag}
    if plan.proxy:
        refs["proxy"] = plan.proxy.image
    found = {}
    for role, ref in refs.items():
        try:
            found[role] = {"ref": ref, **engine.image_digests(ref)}
        except EngineError as exc:
            found[role] = {"ref": ref, "error": str(exc)}
    found["probe"]["volume"] = images.probe_volume_name()   # what the sandbox mounts, filled from that image
    bound = next((m.source for m in plan.container.mounts if m.target == PROBE_DIR and m.kind is MountKind.BIND), "")
    if bound:   # an engine on this host binds the launcher's own copy of its files instead (probedir.py)
        found["probe"]["directory"] = bound
    return found


def _read_back(path: str, digest: str) -> bytes | None:
    """The layer file's bytes, only if they are still the ones the run loaded (never a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, CONTENT_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= CONTENT_LIMIT and sha256(data) == digest else None


def layer_entries(layers) -> list[dict]:
    entries = []
    for layer in layers:
        entry = {"kind": layer.kind.value, "file": layer.file, "sha256": layer.digest or None,
                 "fields": [field for field, _ in layer.values]}
        if layer.digest:
            data = _read_back(layer.file, layer.digest)
            if data is None:
                entry["content_note"] = "not embedded: the file is gone, too large or changed since the run read it"
            else:
                entry["content"] = base64.b64encode(data).decode()
        entries.append(entry)
    return entries


def build(*, recorder: Recorder, plan: LaunchPlan, policy, layers, engine, report: dict,
          signer: signing.Key | None = None) -> dict:
    """The statement of a finished (or failed) run; `report` is the run report (`--report`); with
    `signer`, the statement says it is signed, and by which key (the envelope carries the signature)."""
    effective = plain(policy)
    none = "the engine was not reached"
    engine_facts, runtime_facts = (_engine_facts(engine, plan) if engine else
                                   ({"error": none}, {**runtime(plan, {}, {}), "error": none}))
    predicate = {
        "unsigned": signer is None,
        "signature": UNSIGNED if signer is None else SIGNED,
        **({} if signer is None else {"signer": {"keyid": signer.keyid, "algorithm": signer.algorithm}}),
        "run": {"sandbox": plan.container.name, "started_at": recorder.started_at, "finished_at": now(),
                "status": report["status"], "exit_code": report["exit_code"]},
        "policy": {"name": plan.policy_name, "sha256": sha256(canonical(effective)),
                   "source_sha256": plan.policy_digest, "effective": effective},
        "layers": layer_entries(layers),
        "images": _images(engine, plan) if engine else {},
        "engine": engine_facts,
        "runtime": runtime_facts,
        "inspect": recorder.inspect or {"compared": False, "ok": False, "differences": []},
        "report": report,
    }
    return {"_type": STATEMENT_TYPE, "subject": subjects(predicate), "predicateType": PREDICATE_TYPE,
            "predicate": predicate}


def record(path: str, recorder: Recorder, planned, engine, report: dict, key: signing.Key | None = None) -> str | None:
    """Build and write (with `key`: sign) the record of this run (`planned`: pipeline.Planned);
    returns why it could not be written, or None."""
    try:
        statement = build(recorder=recorder, plan=planned.plan, policy=planned.policy,
                          layers=planned.layered.effective.layers, engine=engine, report=report, signer=key)
        write(path, statement, key)
    except (OSError, EngineError, ValueError) as exc:
        return f"the attestation record was not written to {path}: {exc}"
    return None


def subjects(predicate: dict) -> list[dict]:
    """The run itself (the digest of the whole predicate), its effective policy and its images."""
    out = [{"name": f"sandbox-run:{predicate['run']['sandbox']}", "digest": {"sha256": sha256(canonical(predicate))}},
           {"name": f"policy:{predicate['policy']['name']}", "digest": {"sha256": predicate["policy"]["sha256"]}}]
    for role, image in sorted(predicate["images"].items()):
        if str(image.get("id", "")).startswith("sha256:"):
            out.append({"name": f"image:{role}:{image['ref']}", "digest": {"sha256": image["id"][len("sha256:"):]}})
    return out


def writable(path: str) -> str:
    """The absolute path, once it is clear a record can be written there; ValueError says why not."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise ValueError(f"{target} is a directory")
    if not os.path.isdir(directory):
        raise ValueError(f"the directory {directory} does not exist")
    try:   # a real write, not os.access: root passes that test for a read-only file system too
        fd, tmp = tempfile.mkstemp(prefix=".sandbox-attest-", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ValueError(f"cannot write in {directory}: {exc.strerror or exc}") from None
    return target


def signed(statement: dict, key: signing.Key) -> bytes:
    """The envelope file of `statement`: its canonical bytes are the payload."""
    return signing.serialize(signing.envelope(serialize(statement), key))


def write(path: str, statement: dict, key: signing.Key | None = None) -> None:
    """Atomically (temp file, fsync, rename): a reader finds the whole record or none."""
    data = serialize(statement) if key is None else signed(statement, key)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sandbox-attest-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _no_duplicates(pairs):
    found = dict(pairs)
    if len(found) != len(pairs):
        keys = [key for key, _ in pairs]
        raise ValueError("a duplicate key " + repr(sorted(k for k in keys if keys.count(k) > 1)[0]))
    return found


def _number(text: str):
    raise ValueError(f"{text} is not a JSON number")


def _json(data: bytes, file: str):
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_number)
    except (UnicodeDecodeError, ValueError) as exc:
        raise AttestationInvalid(f"{file}: not a sandbox attestation record: {exc}") from None


def parse(data: bytes, file: str, doc=None) -> dict:
    def bad(why: str) -> AttestationInvalid:
        return AttestationInvalid(f"{file}: not a sandbox attestation record: {why}")

    statement = _json(data, file) if doc is None else doc
    if not isinstance(statement, dict) or set(statement) != {"_type", "subject", "predicateType", "predicate"}:
        raise bad("expected an object with exactly _type, subject, predicateType and predicate")
    if statement["_type"] != STATEMENT_TYPE or statement["predicateType"] != PREDICATE_TYPE:
        raise bad(f"expected _type {STATEMENT_TYPE} and predicateType {PREDICATE_TYPE}, found "
                  f"{statement['_type']!r} and {statement['predicateType']!r}")
    if not isinstance(statement["predicate"], dict):
        raise bad("the predicate is not an object")
    return statement


def problems(data: bytes, statement: dict, keyid: str | None = None) -> list[str]:
    """Every digest (and the file's form) that does not match; empty when the record is intact.
    `keyid`: the statement is the payload of an envelope signed by that keyid (None: a plain file)."""
    found = []
    pred = statement["predicate"]
    try:
        if keyid is None and pred["unsigned"] is not True:
            found.append("predicate.unsigned is not true: this statement says it was signed, but it is not in its "
                         "DSSE envelope (it was taken out of it, or the flag was changed)")
        if keyid is not None and (pred["unsigned"] is not False or pred["signer"]["keyid"] != keyid):
            found.append(f"predicate.signer: the statement does not name the envelope's keyid {keyid} as its signer")
        policy = pred["policy"]
        if sha256(canonical(policy["effective"])) != policy["sha256"]:
            found.append("predicate.policy.sha256 does not match the effective policy in the record")
        for i, layer in enumerate(pred["layers"]):
            if "content" in layer and sha256(base64.b64decode(layer["content"], validate=True)) != layer["sha256"]:
                found.append(f"predicate.layers[{i}] ({layer['file']}): its sha256 does not match its content")
        pairs = [(layer["kind"], layer["sha256"]) for layer in pred["layers"] if layer["sha256"] and layer["fields"]]
        source = layers_digest(pairs) if len(pairs) > 1 else pairs[0][1] if pairs else policy["source_sha256"]
        if source != policy["source_sha256"]:
            found.append("predicate.policy.source_sha256 does not match the layers' digests")
        report = pred["report"]
        for key in ("status", "exit_code"):
            if pred["run"][key] != report[key]:
                found.append(f"predicate.run.{key} ({pred['run'][key]!r}) differs from the report's ({report[key]!r})")
        if subjects(pred) != statement["subject"]:
            found.append("subject: the digests do not match the predicate (the run's record, its policy or its images "
                         "were changed)")
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        found.append(f"the predicate lacks a field or holds a wrong type ({type(exc).__name__}: {exc})")
    # Last, once the digests match (the indented form is slow to make): a whitespace or order edit.
    if not found and data != serialize(statement):
        found.append("the file is not in its canonical form (sorted keys, two-space indent, ASCII, one final "
                     "newline): it was edited after it was written")
    return found


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A record whose digests match: its statement, whether it is signed (an envelope), by which
    keyid and algorithm, and whether that signature was verified (only with a key)."""

    statement: dict
    signed: bool = False
    verified: bool = False
    keyid: str | None = None
    algorithm: str | None = None


def check(data: bytes, file: str, key: signing.Key | None = None) -> Checked:
    """The record in `data` (a Statement or a DSSE envelope of one), once every digest in it
    matches and, with `key` (a public one), once the envelope's signature is that key's; an
    unsigned record with a key fails. AttestationInvalid names each mismatch."""
    doc = _json(data, file)
    envelope = signing.opened(data, doc, file)
    if envelope is None:
        if key is not None:
            raise AttestationInvalid(f"{file}: the record is unsigned (a bare in-toto Statement, no DSSE envelope); "
                                     f"--key {key.file} asks for a signature by keyid {key.keyid}")
        try:
            return Checked(statement=_intact(data, file, parse(data, file, doc)))
        except AttestationInvalid as exc:   # what the digests can and cannot say, with the mismatch
            raise AttestationInvalid(f"{exc}\n  ({UNSIGNED})") from None
    if key is not None:   # the signature first: nothing else of an unverified payload matters
        signing.check(envelope, key, file)
    statement = _intact(envelope.payload, file, parse(envelope.payload, f"{file} (its payload)"), envelope.keyid)
    return Checked(statement=statement, signed=True, verified=key is not None, keyid=envelope.keyid,
                   algorithm=statement["predicate"]["signer"]["algorithm"])


def _intact(data: bytes, file: str, statement: dict, keyid: str | None = None) -> dict:
    found = problems(data, statement, keyid)
    if found:
        raise AttestationInvalid(f"{file}: the attestation record does not match its digests:\n  " + "\n  ".join(found))
    return statement


def verify(data: bytes, file: str) -> dict:
    """The statement, once every digest in it matches (a signature, if any, unchecked)."""
    return check(data, file).statement
