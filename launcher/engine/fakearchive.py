"""enginefake's archive API answers: a tar of one file, its path-stat header, and the probe
directory as the launcher fills it (its own probe.sh, a stand-in busybox whose digest the volume
records; tests that launch directly skip the fill, so a probe volume is found filled)."""

from __future__ import annotations

import hashlib
import io
import tarfile

from launcher import labels as label
from launcher import resources
from launcher.plan.plan import PROBE_DIR

FAKE_BUSYBOX = b"\x7fELF a stand-in for the probe's static busybox"
FAKE_BUSYBOX_SHA = hashlib.sha256(FAKE_BUSYBOX).hexdigest()
PROBE_VOLUME_PREFIX = "sandbox-probe-"


def filled_probe_volume(name: str) -> dict | None:
    """The labels of probe volume `name` as the launcher fills it (None: not a probe volume)."""
    return {label.MANAGED: "1", label.PROBE_BUSYBOX: FAKE_BUSYBOX_SHA} if name.startswith(PROBE_VOLUME_PREFIX) else None


def probe_files(path: str) -> bytes | None:
    """The archive API's tar of the probe directory (or of the probe image's busybox), as filled."""
    if path not in (PROBE_DIR, "/probe/busybox"):
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if path == "/probe/busybox":
            files = [("busybox", FAKE_BUSYBOX, 0o555)]
        else:
            top = tarfile.TarInfo("probe")
            top.type, top.mode = tarfile.DIRTYPE, 0o555
            tar.addfile(top)
            script = (resources.images_dir() / "probe" / "probe.sh").read_bytes()
            files = [("probe/busybox", FAKE_BUSYBOX, 0o555), ("probe/probe.sh", script, 0o444)]
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_of(name: str, data: bytes) -> bytes:
    """A tar of one regular file, as the archive API answers for a file."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def stat_of(data: bytes) -> dict:
    """The path-stat header the engine sends with an archive: its first member's name, size, mode."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
    except (tarfile.TarError, EOFError):
        return {}
    if member is None:
        return {}
    mode = member.mode | (0x80000000 if member.isdir() else 0) | (0 if member.isreg() or member.isdir() else 0x8000000)
    return {"name": member.name, "size": member.size, "mode": mode}
