"""The copy of the host tree as one tar the engine unpacks into the copy's volumes (its archive
API, on a container that is created and never started): no tools container starts for it. Only
the user's tree is read here, never a file of the agent's; the archive holds what
images/tools/copytool.py `copy` makes (the same files, modes, owners, links and times, checkpoint 0),
and a tree this cannot copy exactly is left to that tool (`plan` returns None).

Names are bytes (os.fsencode), as GNU tar sees them; `--exclude` is matched as GNU tar matches it
for `tar -C SRC -cf - .`: against "./rel" and every tail after a "/", a match of a leading part
of a path (up to a "/") excluding it too, "*" and "?" matching any byte, "/" included."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tarfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator

from launcher.errors import EngineError
from launcher.plan.plan import CopySpec

MAX_ENTRIES = 20_000      # beyond, the tools container's tar|tar is as fast and its start cost is noise
MAX_BYTES = 256 << 20
BLOCK = 512
Phase = Callable[[], ContextManager]


def _pattern(text: str) -> re.Pattern[bytes] | None:
    """The regex of one GNU tar exclude pattern; None for one with [ ] or \\ (left to GNU tar)."""
    raw = os.fsencode(text)
    if any(c in raw for c in b"[]\\"):
        return None
    body = b"".join(b".*" if c == 0x2A else b"." if c == 0x3F else re.escape(bytes([c])) for c in raw)
    return re.compile(b"(?:" + body + b")(?:/.*)?", re.DOTALL)


def patterns(excludes: tuple[str, ...]) -> list[re.Pattern[bytes]] | None:
    found = [_pattern(p) for p in excludes]
    return None if any(p is None for p in found) else found


def excluded(name: bytes, found: list[re.Pattern[bytes]]) -> bool:
    """Whether GNU tar leaves the member `name` ("." or "./rel") out."""
    tails = [name] + [name[i + 1:] for i in range(len(name) - 1) if name[i] == 0x2F and name[i + 1] != 0x2F]
    return any(p.fullmatch(tail) for p in found for tail in tails)


def head_commit(source: str) -> str:
    """The commit HEAD of SRC/.git names, read as files (no git runs on the host); "" when there is
    none or it is not plain to read (the tools container's `git rev-parse` said "" there too)."""
    git = os.path.join(source, ".git")
    if os.path.islink(git) or not os.path.isdir(git):
        return ""
    ref = "HEAD"
    for _ in range(5):
        value = _small(os.path.join(git, ref)) if ref == "HEAD" or ref.startswith("refs/") else None
        if value is None and ref.startswith("refs/"):
            value = _packed(git, ref)
        if value is None:
            return ""
        if not value.startswith("ref: "):
            return value if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value) else ""
        ref = value[5:].strip()
        if ".." in ref.split("/"):
            return ""
    return ""


def _small(path: str) -> str | None:
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            return None
        with open(path, "rb") as data:
            return data.read(4096).decode(errors="replace").strip()
    except OSError:
        return None


def _packed(git: str, ref: str) -> str | None:
    try:
        with open(os.path.join(git, "packed-refs"), "rb") as data:
            for line in data.read(64 << 20).decode(errors="replace").splitlines():
                parts = line.split(" ")
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        pass
    return None


@dataclass(frozen=True, kw_only=True)
class Fill:
    spec: CopySpec
    entries: tuple[tuple[bytes, os.stat_result], ...]   # "rel" (b"" for the root) and its lstat
    head: str
    created: int

    @property
    def root_mode(self) -> int:
        return stat.S_IMODE(self.entries[0][1].st_mode) & ~0o6000


def plan(spec: CopySpec) -> Fill | None:
    """The entries of the tree to copy, or None when the tools container must copy it: an exclude
    pattern this module does not match as GNU tar does, the root excluded, an entry the launcher
    may not read (the tools container reads as root), or a tree too large to gain anything."""
    found = patterns(spec.exclude)
    root = os.fsencode(spec.source)
    if found is None or excluded(b".", found):
        return None
    entries: list[tuple[bytes, os.stat_result]] = []
    size = 0

    def walk(rel: bytes) -> bool:
        nonlocal size
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as listing:
                names = sorted(e.name for e in listing)
        except OSError:
            return False
        for name in names:
            sub = os.path.join(rel, name) if rel else name
            if excluded(b"./" + sub, found):
                continue
            st = os.lstat(os.path.join(root, sub))
            if stat.S_ISSOCK(st.st_mode):
                continue                    # GNU tar ignores sockets
            entries.append((sub, st))
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            if len(entries) > MAX_ENTRIES or size > MAX_BYTES:
                return False
            if stat.S_ISREG(st.st_mode) and not os.access(os.path.join(root, sub), os.R_OK):
                return False
            if stat.S_ISDIR(st.st_mode) and not walk(sub):
                return False
        return True

    try:
        entries.append((b"", os.lstat(root)))
        if not walk(b""):
            return None
    except OSError:
        return None
    return Fill(spec=spec, entries=tuple(entries), head=head_commit(spec.source), created=int(time.time()))


def _header(name: str, st: os.stat_result | None, *, kind: bytes, uid: int, gid: int, mode: int,
            size: int = 0, link: str = "", mtime: int = 0) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.size, info.linkname = kind, mode, uid, gid, size, link
    info.mtime = st.st_mtime_ns // 1_000_000_000 if st is not None else mtime
    if st is not None and kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


_KINDS = {stat.S_IFDIR: tarfile.DIRTYPE, stat.S_IFREG: tarfile.REGTYPE, stat.S_IFLNK: tarfile.SYMTYPE,
          stat.S_IFCHR: tarfile.CHRTYPE, stat.S_IFBLK: tarfile.BLKTYPE, stat.S_IFIFO: tarfile.FIFOTYPE}


def _tree(fill: Fill) -> Iterator[bytes]:
    """/base: every entry owned by the agent, setuid and setgid bits cleared (copytool's
    `tar --owner --group --mode=u-s,g-s`), hard links as links (GNU tar's too)."""
    root, uid, gid = os.fsencode(fill.spec.source), fill.spec.uid, fill.spec.gid
    linked: dict[tuple[int, int], str] = {}
    for rel, st in fill.entries:
        name = "base/" + os.fsdecode(rel) if rel else "base"
        mode, kind = stat.S_IMODE(st.st_mode) & ~0o6000, _KINDS[stat.S_IFMT(st.st_mode)]
        if kind != tarfile.DIRTYPE and st.st_nlink > 1:
            first = linked.setdefault((st.st_dev, st.st_ino), name)
            if first != name:
                yield _header(name, st, kind=tarfile.LNKTYPE, uid=uid, gid=gid, mode=mode, link=first)
                continue
        if kind == tarfile.SYMTYPE:
            yield _header(name, st, kind=kind, uid=uid, gid=gid, mode=mode,
                          link=os.fsdecode(os.readlink(os.path.join(root, rel))))
        elif kind == tarfile.REGTYPE:
            yield from _file(os.path.join(root, rel), name, st, uid, gid, mode)
        else:
            yield _header(name, st, kind=kind, uid=uid, gid=gid, mode=mode)


def _file(path: bytes, name: str, st: os.stat_result, uid: int, gid: int, mode: int) -> Iterator[bytes]:
    changed = EngineError(f"copying the workspace failed: {os.fsdecode(path)!r} changed while it was copied")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise EngineError(f"copying the workspace failed: {exc}") from None
    with os.fdopen(fd, "rb") as data:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_size != st.st_size:
            raise changed
        yield _header(name, st, kind=tarfile.REGTYPE, uid=uid, gid=gid, mode=mode, size=st.st_size)
        left = st.st_size
        while left:
            block = data.read(min(left, 1 << 20))
            if not block:
                raise changed
            left -= len(block)
            yield block
    if st.st_size % BLOCK:
        yield bytes(BLOCK - st.st_size % BLOCK)


def _json(name: str, value: dict, when: int) -> Iterator[bytes]:
    blob = json.dumps(value).encode()
    yield _header(name, None, kind=tarfile.REGTYPE, uid=0, gid=0, mode=0o644, size=len(blob), mtime=when)
    yield blob + bytes(-len(blob) % BLOCK)


def digest_of_empty(mode: int, uid: int, gid: int) -> str:
    """copytool._digest of an empty directory (checkpoint 0's tree) with that mode and owner."""
    entry = [".", stat.S_IFDIR | mode, uid, gid, 0, 0, [], ""]
    return hashlib.sha256(json.dumps(entry).encode() + b"\0").hexdigest()


def _layout(fill: Fill) -> Iterator[bytes]:
    """/v as copytool `copy` leaves it: the overlay's upper and work dirs, checkpoint 0 of the
    empty upper layer, meta.json and state.json (the copy was made; no change, ever)."""
    uid, gid, mode, now = fill.spec.uid, fill.spec.gid, fill.root_mode, fill.created
    for name, owner, dir_mode in (("v/upper", uid, mode), ("v/work", 0, 0o755), ("v/checkpoints", 0, 0o755),
                                  ("v/checkpoints/0", 0, 0o755), ("v/checkpoints/0/tree", uid, mode)):
        yield _header(name, None, kind=tarfile.DIRTYPE, uid=owner, gid=0 if owner == 0 else gid, mode=dir_mode,
                      mtime=now)
    meta = {"id": 0, "time": now, "message": "the copy was made", "entries": 0,
            "digest": digest_of_empty(mode, uid, gid), "changes": 0}
    yield from _json("v/checkpoints/0/meta.json", meta, now)
    yield from _json("v/meta.json", {"head": fill.head, "created": now, "uid": uid, "gid": gid}, now)
    yield from _json("v/state.json", {"changes": 0, "checkpoint": 0, "time": now, "clean": True}, now)


def chunks(fill: Fill) -> Iterator[bytes]:
    """The whole archive, streamed: /base, then /v, then the end of the archive."""
    yield from _tree(fill)
    yield from _layout(fill)
    yield bytes(2 * BLOCK)


class Filling:
    """A new copy whose volumes exist (a sandbox mounting them can be created) while its content
    goes in on a thread; `wait` returns once the copy is complete, or raises what the fill raised."""

    def __init__(self, fill: Callable[[], str], done: Callable[[str], None], phase: Phase):
        self._head: str | None = None
        self._error: BaseException | None = None
        self._done = done

        def work() -> None:
            try:
                with phase():
                    self._head = fill()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                self._error = exc
        self._thread = threading.Thread(target=work, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._done is not None:   # said once
            done, self._done = self._done, None
            done(self._head or "")

    def settle(self) -> None:
        """Wait for the fill however it ends (before the copy is removed after a failure)."""
        self._thread.join()
