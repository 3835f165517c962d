"""Copy mode's tools: runs inside the launcher's tools container (python3 -c, stdlib only), never on the
host (launcher/copies/store.py starts it).

Mounts: /src the host workspace (read-only; `copy` only), /base the copy (lower layer), /v the
changes volume (v/upper and v/work are the overlay's upper and work dirs, v/checkpoints the
checkpoints, v/meta.json what the copy was taken from, v/reviewed.json the checkpoint `diff` showed
last, v/state.json how many changes the copy held at its last checkpoint), /tree an overlay
(read-only): the sandbox's own, or one of a checkpoint over /base that the launcher made for `diff`
and `apply` (the kernel reads its whiteouts and opaque dirs, not we).
Everything it reports is JSON on stdout; `export` writes a tar (changes.json, then the files).
File names are bytes on Linux: they travel as surrogate-escaped strings (json keeps them).
"""

import difflib
import errno
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time

TEXT_LIMIT = 1 << 20      # larger files are summarised, not diffed
PATCH_BUDGET = 16 << 20   # bytes of patches in one answer; text files beyond it are summarised too
HOLE_MERGE = 1 << 20      # holes shorter than this travel as zeros: at most one data run per MiB


def _open_regular(path):
    """A file object for path if it is a regular file now, else None: an agent in a running sandbox
    may swap a file for a FIFO between two looks, and opening that would hang the tool."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


_KINDS = ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "char-device"),
          (stat.S_ISBLK, "block-device"))


def _lstat(path):
    """lstat of path (below /base or /tree) when every directory on the way is a directory, not a
    link or a file: a type change above it (a directory made a file or a link) means nothing is
    there, never a look through a link into the tools container's own files. None when missing."""
    root, _, rel = path.lstrip("/").partition("/")
    at = "/" + root
    for part in rel.split("/")[:-1] if rel else ():
        at = os.path.join(at, part)
        try:
            if not stat.S_ISDIR(os.lstat(at).st_mode):
                return None
        except FileNotFoundError:
            return None
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _describe(path):
    st = _lstat(path)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.fsdecode(os.readlink(path))}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    # "other": apply refuses it whatever it is; "kind" says what it is (diff shows it)
    other = {"type": "other", "kind": next((k for test, k in _KINDS if test(st.st_mode)), "unknown")}
    if not stat.S_ISREG(st.st_mode):
        return other
    data = _open_regular(path)
    if data is None:
        return other
    with data:
        size = os.fstat(data.fileno()).st_size
        # mode: what diff shows and apply judges (it writes 0644 or 0755 only, and refuses setuid bits)
        return {"type": "file", "exec": bool(st.st_mode & 0o111), "mode": stat.S_IMODE(st.st_mode), "size": size,
                "sha256": _sha256(data, size)}


def _is_dir(path):
    """A directory, reached through directories only (see _lstat)."""
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _sha256(data, size):
    """Of the file's `size` bytes; its holes are hashed as zeros from memory, never read."""
    digest, at, zeros = hashlib.sha256(), 0, memoryview(bytes(1 << 20))
    for offset, length in _runs(data.fileno(), size) + [(size, 0)]:
        while at < offset:
            digest.update(zeros[:min(offset - at, len(zeros))])
            at += min(offset - at, len(zeros))
        data.seek(offset)
        for block in iter(lambda: data.read(min(length - (at - offset), 1 << 20)), b""):
            digest.update(block)
            at += len(block)
    return digest.hexdigest()


def _below(root):
    """Every non-directory path below root (relative), directories walked without following links."""
    found = []
    for top, dirs, files in os.walk(root, followlinks=False):
        rel = os.path.relpath(top, root)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            found.append(os.path.normpath(os.path.join(rel, name)))
    return found


def _is_whiteout(st):
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def changes(upper="/v/upper"):
    """What differs between the copy (/base) and the overlay of `upper` on it (/tree), found by
    walking only the upper layer: each entry there is new, changed or a deletion. A directory is
    no change of its own (its files are); one that took the place of something else, or whose
    place something else took, is a "type-changed" entry whose "dir" says which side it was on
    ("old" or "new"; that side is null, as for an added or deleted file)."""
    if not os.path.ismount("/tree"):   # an empty directory would read as "everything was deleted"
        sys.exit("no overlay is mounted at /tree")
    out, seen = [], set()

    def entry(rel):
        if rel in seen:
            return
        seen.add(rel)
        was, now = _describe(os.path.join("/base", rel)), _describe(os.path.join("/tree", rel))
        old, new = (None if d and d["type"] == "dir" else d for d in (was, now))
        if old == new:
            return
        status = "added" if old is None else "deleted" if new is None else (
            "modified" if old["type"] == new["type"] else "type-changed")
        if status == "modified" and old["type"] == "file" and old["sha256"] == new["sha256"]:
            status = "mode-changed"
        found = {"path": rel, "status": status, "old": old, "new": new}
        if (was or {}).get("type") == "dir" and now is not None or (now or {}).get("type") == "dir" and was is not None:
            found.update(status="type-changed", dir="old" if (was or {}).get("type") == "dir" else "new")
        out.append(found)

    def gone(rel):
        """rel existed in the copy and is no longer there as it was: every file below it too, and
        the directory itself when nothing of that name is left."""
        base = os.path.join("/base", rel)
        if not _is_dir(base):
            return entry(rel)
        for sub in _below(base):
            entry(os.path.normpath(os.path.join(rel, sub)))
        if _lstat(os.path.join("/tree", rel)) is None and rel not in seen:
            seen.add(rel)
            out.append({"path": rel, "status": "deleted", "old": {"type": "dir"}, "new": None})

    for top, dirs, files in os.walk(upper, followlinks=False):
        rel_top = os.path.relpath(top, upper)
        merged, base = os.path.join("/tree", rel_top), os.path.join("/base", rel_top)
        if _is_dir(base) and _is_dir(merged):
            for name in set(os.listdir(base)) - set(os.listdir(merged)):
                gone(os.path.normpath(os.path.join(rel_top, name)))
        for name in files + dirs:
            rel = os.path.normpath(os.path.join(rel_top, name))
            st = os.lstat(os.path.join(top, name))
            base_path = os.path.join("/base", rel)
            if _is_whiteout(st):
                gone(rel)
            elif stat.S_ISDIR(st.st_mode):
                if _lstat(base_path) is not None and not _is_dir(base_path):
                    entry(rel)                      # a file, link or other of the copy became a directory
            elif _is_dir(base_path):
                gone(rel)                           # a directory of the copy became a file, link or other
                entry(rel)
            else:
                entry(rel)
    out.sort(key=lambda c: c["path"])
    return out


def _text(path):
    if _lstat(path) is None:
        return []
    data = _open_regular(path)
    if data is None:
        return None
    with data:
        blob = data.read(TEXT_LIMIT + 1)
    if len(blob) > TEXT_LIMIT or b"\0" in blob:
        return None
    try:
        return blob.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def with_patches(found):
    budget = PATCH_BUDGET
    for change in found:
        kinds = {(change.get(k) or {}).get("type") for k in ("old", "new")} - {None}
        if kinds != {"file"}:
            continue
        old = _text(os.path.join("/base", change["path"])) if change["old"] else []
        new = _text(os.path.join("/tree", change["path"])) if change["new"] else []
        if old is None or new is None or budget <= 0:
            change["binary"] = True
            if budget <= 0:
                change["summarised"] = f"over the {PATCH_BUDGET >> 20} MiB of patches one diff shows"
            continue
        lines = list(difflib.unified_diff(old, new, "a/" + change["path"] if change["old"] else "/dev/null",
                                          "b/" + change["path"] if change["new"] else "/dev/null"))
        change["patch"] = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                                  for line in lines)
        change["added"] = sum(1 for line in lines[2:] if line.startswith("+"))
        change["removed"] = sum(1 for line in lines[2:] if line.startswith("-"))
        budget -= len(change["patch"])
    return found


def _runs(fd, size):
    """The data of a file as (offset, length) runs, from SEEK_DATA/SEEK_HOLE: a sparse file's holes
    are never read or sent (short ones are, as zeros, to keep the list short)."""
    runs, at = [], 0
    try:
        while at < size:
            try:
                start = os.lseek(fd, at, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:   # only a hole is left
                    break
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            if runs and start - sum(runs[-1]) < HOLE_MERGE:
                runs[-1] = (runs[-1][0], end - runs[-1][0])
            else:
                runs.append((start, end - start))
            at = end
    except OSError:                            # no SEEK_DATA here: all of it is data
        return [(0, size)] if size else []
    return runs


class _Runs:
    """The bytes of a file's data runs, one after another (what a member of the export holds)."""

    def __init__(self, data, runs):
        self.data, self.runs = data, list(runs)

    def read(self, count):
        """Up to count bytes, fewer only at the end (tarfile takes a short read for a broken file)."""
        parts = []
        while count and self.runs:
            offset, length = self.runs[0]
            if not length:
                self.runs.pop(0)
                continue
            self.data.seek(offset)
            blob = self.data.read(min(count, length))
            if not blob:
                sys.exit("a file of the checkpoint shrank while it was read")
            self.runs[0] = (offset + len(blob), length - len(blob))
            parts.append(blob)
            count -= len(blob)
        return b"".join(parts)


def export(number, file_limit):
    """changes.json, then each new or changed file of checkpoint `number` as files/PATH, in one
    tar: only its data runs (pax SANDBOX.runs "offset:length,...", SANDBOX.size the apparent size).
    A file over `file_limit` bytes is not sent (the launcher refuses it from the list)."""
    found = changes(f"/v/checkpoints/{number}/tree")
    tar = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
    blob = json.dumps({"changes": found, "meta": _meta(), "checkpoint": number}).encode()
    info = tarfile.TarInfo("changes.json")
    info.size = len(blob)
    tar.addfile(info, io.BytesIO(blob))
    for change in found:
        new = change["new"] or {}
        if new.get("type") != "file" or new["size"] > file_limit:
            continue
        data = _open_regular(os.path.join("/tree", change["path"]))
        if data is None:
            sys.exit(f"{change['path']!r} of the checkpoint is no longer a regular file")
        with data:
            add_file(tar, "files/" + change["path"], data)
    tar.close()


def add_file(tar, arcname, data):
    """The open file `data` as a member: its data runs one after another, where they go in pax
    headers (SANDBOX.runs "offset:length,...", SANDBOX.size the apparent size)."""
    st = os.fstat(data.fileno())
    runs = _runs(data.fileno(), st.st_size)
    info = tarfile.TarInfo(arcname)
    info.size, info.mode = sum(length for _, length in runs), 0o755 if st.st_mode & 0o111 else 0o644
    info.pax_headers = {"SANDBOX.size": str(st.st_size),
                        "SANDBOX.runs": ",".join(f"{offset}:{length}" for offset, length in runs)}
    tar.addfile(info, _Runs(data, runs))


def _meta(path="/v/meta.json"):
    try:
        with open(path) as data:
            return json.load(data)
    except FileNotFoundError:
        return {}


def copy(uid, gid, excludes):
    """The host tree into /base, owned by the agent; the overlay's dirs; checkpoint 0."""
    head = ""
    if os.path.isdir("/src/.git"):
        found = subprocess.run(["git", "-c", "safe.directory=*", "--git-dir=/src/.git", "rev-parse", "--verify",
                                "-q", "HEAD"], capture_output=True, text=True, env={"PATH": os.environ["PATH"],
                                "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"})
        head = found.stdout.strip() if found.returncode == 0 else ""
    pack = ["tar", "-C", "/src", "-cf", "-", "--numeric-owner", f"--owner={uid}", f"--group={gid}",
            "--mode=u-s,g-s", "--warning=no-file-ignored"] + [f"--exclude={p}" for p in excludes] + ["."]
    reader = subprocess.Popen(pack, stdout=subprocess.PIPE)
    unpack = subprocess.run(["tar", "-C", "/base", "-xf", "-", "--numeric-owner", "--same-owner",
                             "--same-permissions"], stdin=reader.stdout)
    reader.stdout.close()
    if reader.wait() != 0 or unpack.returncode != 0:
        sys.exit(f"copying the workspace failed (tar exit {reader.returncode}/{unpack.returncode})")
    root = os.stat("/base")
    for name in ("upper", "work", "checkpoints"):
        os.makedirs(f"/v/{name}", exist_ok=True)
    os.chown("/v/upper", uid, gid)
    os.chmod("/v/upper", stat.S_IMODE(root.st_mode))
    with open("/v/meta.json", "w") as out:
        json.dump({"head": head, "created": int(time.time()), "uid": uid, "gid": gid}, out)
    json.dump({"head": head, "checkpoint": checkpoint("the copy was made")}, sys.stdout)


def _checkpoint_ids():
    return sorted(int(n) for n in os.listdir("/v/checkpoints") if n.isdigit())


def _usage(root):
    """Bytes on disk below root, each inode once (what a checkpoint's copy of it adds)."""
    seen, total = set(), 0
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _digest(root):
    """A digest of the tree below root as the overlay reads it: names, types, modes, owners, device
    numbers, xattrs (the overlay's user.overlay.* markers), link targets and content (data runs
    only: holes are never read). Equal digests: the same tree; timestamps do not count."""
    digest = hashlib.sha256()
    for top, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files) if top != root else [""] + sorted(dirs + files):
            path = os.path.join(top, name) if name else root
            st = os.lstat(path)
            xattrs = sorted((k, os.getxattr(path, k, follow_symlinks=False).hex())
                            for k in os.listxattr(path, follow_symlinks=False))
            target = os.fsdecode(os.readlink(path)) if stat.S_ISLNK(st.st_mode) else ""
            digest.update(json.dumps([os.path.relpath(path, root), st.st_mode, st.st_uid, st.st_gid, st.st_rdev,
                                      st.st_size if stat.S_ISREG(st.st_mode) else 0, xattrs, target]).encode() + b"\0")
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as data:
                    runs = _runs(data.fileno(), st.st_size)
                    digest.update(json.dumps(runs).encode())
                    reader = _Runs(data, runs)
                    for block in iter(lambda: reader.read(1 << 20), b""):
                        digest.update(block)
    return digest.hexdigest()


def _reviewed():
    try:
        with open("/v/reviewed.json") as data:
            return json.load(data).get("checkpoint")
    except FileNotFoundError:
        return None


def _review(number):
    with open("/v/.reviewed.tmp", "w") as out:
        json.dump({"checkpoint": number, "time": int(time.time())}, out)
    os.rename("/v/.reviewed.tmp", "/v/reviewed.json")


def _only_own_dirs(upper="/v/upper"):
    """Whether the upper layer holds nothing but the overlay's own directories: ones it copied up
    on the way to a file made and removed again (the probe's write tests do that), each a
    directory of the copy too and not opaque. That is no change, known without reading a file."""
    for top, dirs, files in os.walk(upper, followlinks=False):
        if files or any(os.path.islink(os.path.join(top, d)) for d in dirs):
            return False
        rel = os.path.relpath(top, upper)
        base = os.path.join("/base", rel)
        if rel != "." and (os.path.islink(base) or not os.path.isdir(base)):
            return False
        if any(k.endswith("overlay.opaque") for k in os.listxattr(top, follow_symlinks=False)):
            return False                    # it hides what the copy has below it
    return True


def _count():
    """How many changes the upper layer holds (see changes()), None when that cannot be known here
    (no overlay at /tree, and more than the overlay's own directories in the upper layer)."""
    if _only_own_dirs():
        return 0
    return len(changes()) if os.path.ismount("/tree") else None


def _unchanged(meta):
    """Whether a checkpoint surely holds no change (older ones did not record their count)."""
    return meta.get("changes") == 0 or ("changes" not in meta and meta.get("entries") == 0)


def _state(count, number):
    """v/state.json: the copy's change count as of its last checkpoint, and whether any checkpoint
    ever held a change ("clean": dropping the copy loses nothing). The launcher reads it through the
    engine's archive API for `sandbox ls` (no tools container per copy); the agent never reaches
    it (the sandbox mounts only the overlay, whose upper layer is v/upper)."""
    state = {"changes": count, "checkpoint": number, "time": int(time.time()),
             "clean": count == 0 and all(_unchanged(c) for c in checkpoints())}
    with open("/v/.state.tmp", "w") as out:
        json.dump(state, out)
    os.rename("/v/.state.tmp", "/v/state.json")
    return state


def _unknown():
    """v/state.json says the change count is not known (`sandbox ls` shows "?")."""
    with open("/v/.state.tmp", "w") as out:
        json.dump({"changes": None, "checkpoint": None, "time": int(time.time()), "clean": False}, out)
    os.rename("/v/.state.tmp", "/v/state.json")


def checkpoint(message, limit=None, reuse=False, reviewed=False, known=None):
    """A copy of the upper layer as checkpoints/N (a quiet tree: the launcher paused its users).
    `limit`: refuse when the upper layer takes more bytes on disk (the copy would double them);
    `reuse`: an existing checkpoint of the same tree instead of a new one; `reviewed`: record it
    as the one `diff` showed; `known`: the change count, counted already (a fork's first). Its answer
    says how many changes the copy holds ("changes") and whether no checkpoint ever held one
    ("clean"); v/state.json keeps both."""
    usage = _usage("/v/upper") if limit is not None else 0
    if limit is not None and usage > limit:
        return {"refused": {"usage": usage, "limit": limit}}
    _unknown()   # until this checkpoint has counted: a tool that fails now leaves "not known", not a stale count
    count = _count() if known is None else known
    digest = _digest("/v/upper") if reuse else None
    same = [c for c in checkpoints() if c.get("digest") == digest] if reuse else []
    if same:
        meta = dict(same[-1], reused=True)
    else:
        ids = _checkpoint_ids()
        number = (ids[-1] + 1) if ids else 0
        temp = f"/v/checkpoints/.{number}.tmp"
        shutil.rmtree(temp, ignore_errors=True)
        os.makedirs(temp)
        subprocess.run(["cp", "-a", "/v/upper", f"{temp}/tree"], check=True)
        entries = sum(len(f) + len(d) for _, d, f in os.walk(f"{temp}/tree"))
        meta = {"id": number, "time": int(time.time()), "message": message, "entries": entries,
                "digest": _digest(f"{temp}/tree"),   # of the copy itself: what a later reuse compares
                "changes": count}
        with open(f"{temp}/meta.json", "w") as out:
            json.dump(meta, out)
        os.rename(temp, f"/v/checkpoints/{number}")
    if reviewed:
        _review(meta["id"])
    state = _state(count, meta["id"])
    return dict(meta, changes=count, clean=state["clean"])


def checkpoints():
    found, reviewed = [], _reviewed()
    for number in _checkpoint_ids():
        with open(f"/v/checkpoints/{number}/meta.json") as data:
            found.append(dict(json.load(data), reviewed=number == reviewed))
    return found


def rewind(number, limit=None):
    """The upper layer as checkpoint `number` had it (the overlay is not mounted now); what it held
    before becomes a checkpoint of its own first, so a rewind can itself be undone."""
    if number not in _checkpoint_ids():
        sys.exit(f"no checkpoint {number}")
    before = checkpoint(f"before rewinding to {number}", limit)
    if "refused" in before:
        return before
    shutil.rmtree("/v/upper.old", ignore_errors=True)
    subprocess.run(["cp", "-a", f"/v/checkpoints/{number}/tree", "/v/upper.new"], check=True)
    os.rename("/v/upper", "/v/upper.old")
    os.rename("/v/upper.new", "/v/upper")
    shutil.rmtree("/v/upper.old")
    shutil.rmtree("/v/work")
    os.makedirs("/v/work")
    with open(f"/v/checkpoints/{number}/meta.json") as data:
        _state(json.load(data).get("changes"), number)   # the upper layer is that checkpoint's now
    return before


def fork(origin, number, limit=None):
    """This copy (/base and /v, empty) as a fork of the copy `origin` (/from/base and /from/v,
    read-only) at its checkpoint `number`: the same base, whose changes are diffed against, and that
    checkpoint as its upper layer and its own checkpoint 0. Nothing is shared with the origin:
    cp -a copies owners, modes, the overlay's user.* markers and its whiteouts (--reflink=auto
    shares a file's blocks copy-on-write where the filesystem can, btrfs or XFS; else it copies).
    `limit`: refuse, copying nothing, when the checkpoint takes more bytes on disk."""
    source = f"/from/v/checkpoints/{number}"
    try:
        with open(f"{source}/meta.json") as data:
            known = json.load(data).get("changes")
    except FileNotFoundError:
        sys.exit(f"{origin} has no checkpoint {number}")
    usage = _usage(f"{source}/tree") if limit is not None else 0
    if limit is not None and usage > limit:
        return json.dump({"refused": {"usage": usage, "limit": limit}}, sys.stdout)
    subprocess.run(["cp", "-a", "--reflink=auto", "/from/base/.", "/base/"], check=True)
    root = os.stat("/from/base")   # the workspace root's owner and mode, as the copy was made
    os.chown("/base", root.st_uid, root.st_gid)
    os.chmod("/base", stat.S_IMODE(root.st_mode))
    subprocess.run(["cp", "-a", "--reflink=auto", f"{source}/tree", "/v/upper"], check=True)
    for name in ("work", "checkpoints"):
        os.makedirs(f"/v/{name}")
    with open("/v/meta.json", "w") as out:   # "head": what `apply --to` commits on top of, the origin's
        json.dump(dict(_meta("/from/v/meta.json"), forked={"from": origin, "checkpoint": number}), out)
    json.dump(checkpoint(f"forked from {origin} at its checkpoint {number}", known=known), sys.stdout)


def _option(argv, name, default=None):
    """--name N of the options (after the operation's positional arguments)."""
    return int(argv[argv.index(name) + 1]) if name in argv else default


def main(argv):
    op = argv[0]
    if op == "copy":
        copy(int(argv[1]), int(argv[2]), json.loads(argv[3]))
    elif op == "changes":
        number = _option(argv, "--checkpoint")
        found = changes("/v/upper" if number is None else f"/v/checkpoints/{number}/tree")
        json.dump({"changes": with_patches(found) if "--patch" in argv else found, "meta": _meta(),
                   "checkpoint": number}, sys.stdout)
    elif op == "export":
        export(_option(argv, "--checkpoint"), _option(argv, "--file-limit"))
    elif op == "checkpoint":
        flags = argv[2:]   # argv[1] is the message, whatever it says
        json.dump(checkpoint(argv[1], _option(flags, "--limit"), "--reuse" in flags, "--reviewed" in flags), sys.stdout)
    elif op == "checkpoints":
        json.dump(checkpoints(), sys.stdout)
    elif op == "fork":
        fork(argv[1], int(argv[2]), _option(argv[3:], "--limit"))
    elif op == "rewind":
        json.dump(rewind(int(argv[1]), _option(argv[2:], "--limit")), sys.stdout)
    else:
        sys.exit(f"unknown operation {op}")


if __name__ == "__main__":
    main(sys.argv[1:])
