"""A copy's export, received: the change list of one checkpoint, and each file `apply` may write
streamed into a private spool directory (0700, removed on close) as it arrives, data runs only, so
neither a huge file nor a sparse one is ever held in memory or expanded on disk."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import BinaryIO, Mapping

from launcher.copies.limits import Limits, check
from launcher.copies.review import Allowed, annotated
from launcher.errors import CopyConflict, PolicyError, Problem
from launcher.values import visible

LIST_LIMIT = 64 << 20        # bytes of change list held in memory
_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


@dataclass(frozen=True, kw_only=True)
class Blob:
    """One file of an export in the spool: its apparent size, where its data is (the rest is holes)
    and the SHA-256 of all of it, checked against the change list on arrival."""

    path: str                               # the spool file (ours, 0600)
    size: int
    runs: tuple[tuple[int, int], ...]       # (offset, length) of the data; between them zeros
    sha256: str

    def open(self) -> BinaryIO:
        return open(self.path, "rb")

    def read(self) -> bytes:
        """All of it in memory: for small files only (write_to streams)."""
        with self.open() as data:
            return data.read()

    def write_to(self, out: BinaryIO) -> None:
        """Into `out` (a new, empty file open for writing): the data runs only, so holes stay holes."""
        with self.open() as data:
            for offset, length in self.runs:
                data.seek(offset)
                out.seek(offset)
                while length:
                    block = data.read(min(length, _CHUNK))
                    out.write(block)
                    length -= len(block)
            out.truncate(self.size)


@dataclass(frozen=True, kw_only=True)
class Exported:
    changes: tuple[dict, ...]               # annotated: "refused" says why apply leaves one out
    meta: dict
    data: Mapping[str, Blob] = field(default_factory=dict)   # every applicable new file, by its path
    checkpoint: int | None = None           # the checkpoint it was taken from
    spool: str = ""                         # the private directory holding `data`

    @property
    def applicable(self) -> tuple[dict, ...]:
        return tuple(c for c in self.changes if not c["refused"])

    def close(self) -> None:
        if self.spool:
            shutil.rmtree(self.spool, ignore_errors=True)

    def __enter__(self) -> "Exported":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def listing(answer: dict, protected: tuple[str, ...]) -> Exported:
    """An export without files, from a change list (what gc needs to count what is not applied)."""
    return Exported(changes=tuple(annotated(answer["changes"], protected)), meta=answer.get("meta", {}),
                    checkpoint=answer.get("checkpoint"))


def spooled(changes: tuple[dict, ...], meta: dict, data: Mapping[str, bytes]) -> Exported:
    """An export of these changes whose files hold `data` (bytes in hand: tests, small tools)."""
    spool, blobs = tempfile.mkdtemp(prefix="sandbox-export-"), {}
    for index, (path, blob) in enumerate(data.items()):
        target = os.path.join(spool, str(index))
        with open(target, "xb") as out:
            out.write(blob)
        blobs[path] = Blob(path=target, size=len(blob), runs=((0, len(blob)),) if blob else (),
                           sha256=hashlib.sha256(blob).hexdigest())
    return Exported(changes=changes, meta=meta, data=blobs, spool=spool)


def read_export(source: bytes | BinaryIO, protected: tuple[str, ...], limits: Limits = Limits(),
                name: str = "the copy", allowed: Allowed | None = None) -> Exported:
    """Read copytool's export (a tar: changes.json, then files/PATH) from bytes or a stream, keeping
    the files apply may write with the per-path yeses `allowed` (None: with any yes given later).
    Refuses (PolicyError, before any file arrives) when those are over `limits`."""
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    spool = tempfile.mkdtemp(prefix="sandbox-export-")   # 0700: the agent's files, readable by us only
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            head = _head(tar)
            changes = tuple(annotated(head["changes"], protected, allowed or Allowed()))
            wanted = {c["path"]: c["new"] for c in changes if (not c["refused"] or (allowed is None and c["needs"]))
                      and (c["new"] or {}).get("type") == "file"}
            check(name, wanted, limits)
            data: dict[str, Blob] = {}
            for member in tar:
                path = member.name[len("files/"):] if member.name.startswith("files/") else None
                if path in wanted and path not in data and member.isfile():   # refused ones stay unread
                    data[path] = _receive(tar, member, path, wanted[path], os.path.join(spool, str(len(data))))
        missing = sorted(set(wanted) - set(data))
        if missing:
            raise CopyConflict(f"the copy's export lacks {visible(missing[0], keep_lines=False)} (and "
                               f"{len(missing) - 1} more); nothing was written")
        return Exported(changes=changes, meta=head.get("meta", {}), data=data, checkpoint=head.get("checkpoint"),
                        spool=spool)
    except OSError as exc:   # the stream's own errors arrive as EngineError: this is the spool
        shutil.rmtree(spool, ignore_errors=True)
        raise PolicyError([Problem(file=spool, path="(apply's spool)", expected="room for the files apply writes",
                                   found=exc.strerror or str(exc),
                                   hint="point TMPDIR at a directory with room (sparse files stay sparse there)")])
    except BaseException:
        shutil.rmtree(spool, ignore_errors=True)
        raise


def _head(tar: tarfile.TarFile) -> dict:
    member = tar.next()
    if member is None or member.name != "changes.json" or member.size > LIST_LIMIT:
        raise CopyConflict("the copy's export had no change list, or one over "
                           f"{LIST_LIMIT >> 20} MiB (a broken tools container?)")
    return json.loads(tar.extractfile(member).read())


def _runs(member: tarfile.TarInfo, size: int) -> tuple[tuple[int, int], ...]:
    text = member.pax_headers.get("SANDBOX.runs")
    if text is None:                        # a plain member: all of it is data
        return ((0, member.size),) if member.size else ()
    runs = tuple((int(o), int(n)) for o, n in (pair.split(":") for pair in text.split(","))) if text else ()
    end = 0
    for offset, length in runs:
        if offset < end or length <= 0 or offset + length > size:
            raise ValueError("overlapping or out of range")
        end = offset + length
    if sum(length for _, length in runs) != member.size:
        raise ValueError("the runs do not add up to the member")
    return runs


def _receive(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str, want: dict, target: str) -> Blob:
    shown = visible(path, keep_lines=False)
    try:
        size = int(member.pax_headers.get("SANDBOX.size", member.size))
        runs = _runs(member, size)
    except ValueError as exc:
        raise CopyConflict(f"{shown}: the copy's export is malformed ({exc}); nothing was written") from None
    if size != want["size"]:
        raise CopyConflict(f"{shown}: the copy's export does not match its change list; nothing was written")
    source, digest, at = tar.extractfile(member), hashlib.sha256(), 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        for offset, length in runs:
            _zeros(digest, offset - at)
            out.seek(offset)
            at = offset + length
            while length:
                block = source.read(min(length, _CHUNK))
                if not block:
                    raise CopyConflict(f"{shown}: the copy's export broke off; nothing was written")
                digest.update(block)
                out.write(block)
                length -= len(block)
        _zeros(digest, size - at)
        out.truncate(size)
    if digest.hexdigest() != want["sha256"]:
        raise CopyConflict(f"{shown} is not what the change list says; nothing was written, run apply again")
    return Blob(path=target, size=size, runs=runs, sha256=want["sha256"])


def _zeros(digest, count: int) -> None:
    """Hash `count` zero bytes (a hole) without holding them."""
    while count > 0:
        digest.update(_ZEROS[:min(count, _CHUNK)])
        count -= _CHUNK
