"""The probe's own files as a sandbox will run them: the launcher's probe.sh and the busybox it
recorded when it filled the probe volume, compared before the container starts with the created
container's copy (the shared volume: anyone with the engine can mount it read-write, so it must not
decide what runs) or, on an engine on this host, with the launcher's own directory that the
container binds (launcher/host/probedir.py), read here directly."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from functools import lru_cache

from launcher import labels as label
from launcher import resources
from launcher.engine.engineproto import Engine
from launcher.errors import EngineError
from launcher.host import probedir
from launcher.plan.plan import ContainerSpec

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
    return said + _compared(found, busybox)


def dir_problems(where: str, busybox: str | None) -> list[str]:
    """What is wrong with the launcher's own probe directory on this host (what an engine on this
    host binds), given the busybox digest recorded on the probe volume at its fill."""
    if busybox is None:
        return ["the probe volume carries no record of its busybox (not filled by this launcher)"]
    said, files = probedir.read(where, FILES, DIR_MODE)
    if files is None:
        return said
    return said + _compared({name: sha256(data) for name, data in files.items()}, busybox)


def ensure_volume(engine: Engine, volume: str, found: dict | None, tag: str, probe_dir: str = "") -> None:
    """The probe volume filled from the probe image `tag` (`found`: its labels, None when it does not
    exist), and the launcher's own copy at probe_dir on this host when one is bound and missing."""
    ours = found is not None and label.MANAGED in found and label.PROBE_BUSYBOX in found
    if found is not None and not ours:
        # Not ours, so not filled by us: Docker creates an empty volume of that name when a
        # container names it before it exists. Replace it rather than mount an empty probe.
        engine.remove_volume(volume)
    if not ours:
        # The busybox it is filled with, recorded on the volume (labels never change): every
        # launch compares the container's copy with it and with its own probe.sh.
        found = {label.MANAGED: "1", label.PROBE_BUSYBOX: sha256(busybox_of(engine, tag))}
        engine.fill_volume(volume, tag, "/probe", found)   # image path, see images/probe
    if probe_dir and not os.path.isdir(probe_dir):   # every launch compares it all the same
        fill_dir(probe_dir, busybox_of(engine, tag), found[label.PROBE_BUSYBOX], volume)


def busybox_of(engine: Engine, tag: str) -> bytes:
    """The probe image's busybox, read from a container of it that never starts."""
    ref = engine.create(ContainerSpec(
        name=f"sandbox-probe-read-{os.urandom(3).hex()}", image=tag, user="0:0", entrypoint=("/probe/busybox",),
        command=("true",), env=(), working_dir="/", mounts=(), network_mode="none", read_only_root=True,
        cap_drop=("ALL",), cap_add=(), security_opt=("no-new-privileges",), pids_limit=16, memory_bytes=None,
        nano_cpus=None, labels=((label.MANAGED, "1"),), hostname="sandbox-probe"))
    try:
        busybox = engine.read_file(ref, "/probe/busybox", LIMIT)
    finally:
        engine.remove(ref)
    if busybox is None:
        raise EngineError(f"the probe image {tag} has no /probe/busybox")
    return busybox


def fill_dir(where: str, busybox: bytes, recorded: str, volume: str) -> None:
    """The launcher's own copy of the probe files at `where` on this host (probedir.py): the probe
    image's busybox, which must be the one the volume recorded, and probe.sh."""
    if sha256(busybox) != recorded:
        raise EngineError(f"the probe image's busybox is not the one probe volume {volume} recorded; "
                          f"`docker volume rm {volume}` (the next launch fills it again)")
    script = (resources.images_dir() / "probe" / "probe.sh").read_bytes()
    probedir.fill(where, {"busybox": (busybox, FILES["busybox"]), "probe.sh": (script, FILES["probe.sh"])}, DIR_MODE)


def _compared(found: dict[str, str], busybox: str) -> list[str]:
    """What differs between the files' digests found and the launcher's (its probe.sh, the busybox recorded)."""
    want = {"busybox": busybox, "probe.sh": script_digest()}
    said = []
    for name, digest in want.items():
        if name not in found:
            said.append(f"probe file {name} is missing")
        elif found[name] != digest:
            said.append(f"probe file {name} has sha256 {found[name][:16]}…, the launcher's is {digest[:16]}…")
    return said
