"""Copy mode's tools: runs inside the launcher's tools container (python3 -c, stdlib only), never on the
host (launcher/copies/store.py starts it).

Mounts: /src the host workspace (read-only; `copy` only), /base the copy (lower layer), /v the
changes volume (v/upper and v/work are the overlay's upper and work dirs, v/checkpoints the
checkpoints, v/meta.json what the copy was taken from), /tree the overlay itself (read-only).
Everything it reports is JSON on stdout; `export` writes a tar (changes.json, then the files).
File names are bytes on Linux: they travel as surrogate-escaped strings (json keeps them).
"""

import difflib
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


def _describe(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.fsdecode(os.readlink(path))}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    if not stat.S_ISREG(st.st_mode):
        return {"type": "other"}
    digest, data = hashlib.sha256(), _open_regular(path)
    if data is None:
        return {"type": "other"}
    with data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    # mode: what diff shows and apply judges (it writes 0644 or 0755 only, and refuses setuid bits)
    return {"type": "file", "exec": bool(st.st_mode & 0o111), "mode": stat.S_IMODE(st.st_mode), "size": st.st_size,
            "sha256": digest.hexdigest()}


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


def changes():
    """What differs between the copy (/base) and what the agent sees (/tree), found by walking
    only the upper layer: each entry there is new, changed or a deletion."""
    out, seen = [], set()

    def entry(rel):
        if rel in seen:
            return
        seen.add(rel)
        # A directory is no change of its own: the files below it are (see gone() for deletions).
        old, new = (None if d and d["type"] == "dir" else d
                    for d in (_describe(os.path.join("/base", rel)), _describe(os.path.join("/tree", rel))))
        if old == new:
            return
        status = "added" if old is None else "deleted" if new is None else (
            "modified" if old["type"] == new["type"] else "type-changed")
        if status == "modified" and old["type"] == "file" and old["sha256"] == new["sha256"]:
            status = "mode-changed"
        out.append({"path": rel, "status": status, "old": old, "new": new})

    def gone(rel):
        """rel existed in the copy and is no longer there as it was: every file below it too, and
        the directory itself when nothing of that name is left."""
        base = os.path.join("/base", rel)
        if not (os.path.isdir(base) and not os.path.islink(base)):
            return entry(rel)
        for sub in _below(base):
            entry(os.path.normpath(os.path.join(rel, sub)))
        if not os.path.lexists(os.path.join("/tree", rel)) and rel not in seen:
            seen.add(rel)
            out.append({"path": rel, "status": "deleted", "old": {"type": "dir"}, "new": None})

    for top, dirs, files in os.walk("/v/upper", followlinks=False):
        rel_top = os.path.relpath(top, "/v/upper")
        merged, base = os.path.join("/tree", rel_top), os.path.join("/base", rel_top)
        if os.path.isdir(base) and not os.path.islink(base) and os.path.isdir(merged):
            for name in set(os.listdir(base)) - set(os.listdir(merged)):
                gone(os.path.normpath(os.path.join(rel_top, name)))
        for name in files + dirs:
            rel = os.path.normpath(os.path.join(rel_top, name))
            st = os.lstat(os.path.join(top, name))
            base_path = os.path.join("/base", rel)
            if _is_whiteout(st):
                gone(rel)
            elif stat.S_ISDIR(st.st_mode):
                if os.path.lexists(base_path) and not os.path.isdir(base_path):
                    entry(rel)                      # a file of the copy became a directory
            elif os.path.isdir(base_path) and not os.path.islink(base_path):
                gone(rel)                           # a directory of the copy became a file
                entry(rel)
            else:
                entry(rel)
    out.sort(key=lambda c: c["path"])
    return out


def _text(path):
    data = _open_regular(path)
    if data is None:
        return [] if not os.path.lexists(path) else None
    with data:
        blob = data.read(TEXT_LIMIT + 1)
    if len(blob) > TEXT_LIMIT or b"\0" in blob:
        return None
    try:
        return blob.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def with_patches(found):
    for change in found:
        kinds = {(change.get(k) or {}).get("type") for k in ("old", "new")} - {None}
        if kinds != {"file"}:
            continue
        old = _text(os.path.join("/base", change["path"])) if change["old"] else []
        new = _text(os.path.join("/tree", change["path"])) if change["new"] else []
        if old is None or new is None:
            change["binary"] = True
            continue
        lines = list(difflib.unified_diff(old, new, "a/" + change["path"] if change["old"] else "/dev/null",
                                          "b/" + change["path"] if change["new"] else "/dev/null"))
        change["patch"] = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                                  for line in lines)
        change["added"] = sum(1 for line in lines[2:] if line.startswith("+"))
        change["removed"] = sum(1 for line in lines[2:] if line.startswith("-"))
    return found


def export():
    """changes.json, then each new or changed file and symlink as files/PATH, in one tar."""
    found = changes()
    tar = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
    blob = json.dumps({"changes": found, "meta": _meta()}).encode()
    info = tarfile.TarInfo("changes.json")
    info.size = len(blob)
    tar.addfile(info, io.BytesIO(blob))
    for change in found:
        new, path = change["new"] or {}, os.path.join("/tree", change["path"])
        if new.get("type") == "symlink":
            tar.add(path, arcname="files/" + change["path"], recursive=False)
        elif new.get("type") == "file":
            data = _open_regular(path)   # never tarfile's own open: it would follow a swapped-in FIFO
            if data is not None:
                with data:
                    info = tar.gettarinfo(arcname="files/" + change["path"], fileobj=data)
                    tar.addfile(info, data)
    tar.close()


def _meta():
    try:
        with open("/v/meta.json") as data:
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


def checkpoint(message):
    ids = _checkpoint_ids()
    number = (ids[-1] + 1) if ids else 0
    temp = f"/v/checkpoints/.{number}.tmp"
    shutil.rmtree(temp, ignore_errors=True)
    os.makedirs(temp)
    subprocess.run(["cp", "-a", "/v/upper", f"{temp}/tree"], check=True)
    entries = sum(len(f) + len(d) for _, d, f in os.walk(f"{temp}/tree"))
    meta = {"id": number, "time": int(time.time()), "message": message, "entries": entries}
    with open(f"{temp}/meta.json", "w") as out:
        json.dump(meta, out)
    os.rename(temp, f"/v/checkpoints/{number}")
    return meta


def checkpoints():
    found = []
    for number in _checkpoint_ids():
        with open(f"/v/checkpoints/{number}/meta.json") as data:
            found.append(json.load(data))
    return found


def rewind(number):
    """The upper layer as checkpoint `number` had it (the overlay is not mounted now); what it held
    before becomes a checkpoint of its own first, so a rewind can itself be undone."""
    if number not in _checkpoint_ids():
        sys.exit(f"no checkpoint {number}")
    before = checkpoint(f"before rewinding to {number}")
    shutil.rmtree("/v/upper.old", ignore_errors=True)
    subprocess.run(["cp", "-a", f"/v/checkpoints/{number}/tree", "/v/upper.new"], check=True)
    os.rename("/v/upper", "/v/upper.old")
    os.rename("/v/upper.new", "/v/upper")
    shutil.rmtree("/v/upper.old")
    shutil.rmtree("/v/work")
    os.makedirs("/v/work")
    return before


def main(argv):
    op = argv[0]
    if op == "copy":
        copy(int(argv[1]), int(argv[2]), json.loads(argv[3]))
    elif op == "changes":
        json.dump({"changes": with_patches(changes()) if "--patch" in argv else changes(), "meta": _meta()},
                  sys.stdout)
    elif op == "export":
        export()
    elif op == "checkpoint":
        json.dump(checkpoint(argv[1]), sys.stdout)
    elif op == "checkpoints":
        json.dump(checkpoints(), sys.stdout)
    elif op == "rewind":
        json.dump(rewind(int(argv[1])), sys.stdout)
    else:
        sys.exit(f"unknown operation {op}")


if __name__ == "__main__":
    main(sys.argv[1:])
