"""The probe's own files as a sandbox will run them: the launcher's probe.sh and the busybox it
recorded when it filled the probe volume, compared with the created container's copy before it
starts (a volume anyone with the engine can mount read-write must not decide what runs)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from functools import lru_cache

from launcher import resources

LIMIT = 16 << 20      # bytes of the probe directory's tar read at most (busybox is about 2 MB)
# name in the probe directory -> mode; nothing else may be there
FILES = {"busybox": 0o555, "probe.sh": 0o444}
DIR_MODE = 0o555


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@lru_cache(maxsize=1)
def script_digest() -> str:
    """The launcher's own probe.sh, the one its checks list and arguments were written for."""
    return sha256((resources.images_dir() / "probe" / "probe.sh").read_bytes())


def problems(tar: bytes | None, busybox: str | None) -> list[str]:
    """What is wrong with the probe directory's tar (the archive API's answer, top entry `probe`)
    given the busybox digest recorded at the fill (None: the volume has no record)."""
    if busybox is None:
        return ["the probe volume carries no record of its busybox (not filled by this launcher)"]
    if tar is None:
        return ["the container has no probe directory"]
    if len(tar) >= LIMIT:
        return [f"the probe directory is larger than {LIMIT >> 20} MiB"]
    want = {"busybox": busybox, "probe.sh": script_digest()}
    found: dict[str, str] = {}
    said: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:   # the API's tar is never compressed
            for member in archive:
                # Docker names the entries probe/NAME, podman /NAME (and the directory "");
                # ownership is not compared: the engines report it differently (podman as the
                # container's user), and the mount is read-only whoever owns the files
                name = member.name.strip("/").removeprefix("./")
                inside = name.partition("/")[2] if "/" in name or name == "probe" else name
                if not inside:
                    if not (member.isdir() and member.mode & 0o7777 == DIR_MODE):
                        said.append(f"the probe directory is not a directory of mode {DIR_MODE:o}")
                elif inside not in FILES:
                    said.append(f"the probe directory holds {inside!r}, which the launcher did not put there")
                elif not (member.isreg() and member.mode & 0o7777 == FILES[inside]):
                    said.append(f"probe file {inside} is not a regular file of mode {FILES[inside]:o}")
                else:
                    found[inside] = sha256(archive.extractfile(member).read())
    except (tarfile.TarError, OSError, EOFError) as exc:
        return [f"the probe directory could not be read: {exc}"]
    for name, digest in want.items():
        if name not in found:
            said.append(f"probe file {name} is missing")
        elif found[name] != digest:
            said.append(f"probe file {name} has sha256 {found[name][:16]}…, the launcher's is {digest[:16]}…")
    return said
