"""Bundled images (agent, probe): content-addressed tags, building what is missing, bootstrapping
the Debian base image where no registry can be reached."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from launcher import resources
from launcher.engine import Engine
from launcher.errors import EngineError

BASE_IMAGE = "debian:bookworm-slim"
AGENT_IMAGE = "sandbox/agent:bookworm"
LABELS = {"dev.sandbox.managed": "1"}

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BundledImage:
    key: str
    tag: str
    context: Path


def _context_hash(context: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def probe_image() -> BundledImage:
    context = resources.images_dir() / "probe"
    # The tag follows the content, so a changed probe.sh is never served from an old image.
    return BundledImage(key="probe", tag=f"sandbox/probe:{_context_hash(context)}", context=context)


def proxy_image() -> BundledImage:
    context = resources.images_dir() / "proxy"
    return BundledImage(key="proxy", tag=f"sandbox/proxy:{_context_hash(context)}", context=context)


def agent_image() -> BundledImage:
    return BundledImage(key="agent", tag=AGENT_IMAGE, context=resources.images_dir() / "agent")


def probe_volume_name() -> str:
    return "sandbox-probe-" + probe_image().tag.split(":")[1]


def ensure_base(engine: Engine, progress: Progress) -> None:
    if engine.image_exists(BASE_IMAGE):
        return
    progress(f"base image {BASE_IMAGE} is missing; trying to pull it")
    try:
        engine.pull(BASE_IMAGE)
        return
    except EngineError as exc:
        progress(f"pull failed ({str(exc).splitlines()[0]}); bootstrapping it from Debian packages instead")
    bootstrap(engine, progress)


def bootstrap(engine: Engine, progress: Progress) -> None:
    """Make debian:bookworm-slim locally: debootstrap --variant=minbase, then docker import."""
    if shutil.which("debootstrap") is None:
        raise EngineError("cannot make the base image: debootstrap is not installed.\n"
                          "    hint: apt-get install debootstrap (or make debian:bookworm-slim available)")
    if os.geteuid() != 0:
        raise EngineError("debootstrap needs root.\n    hint: run `sudo sandbox images bootstrap` once")
    with tempfile.TemporaryDirectory(prefix="sandbox-rootfs-") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        progress(f"debootstrap --variant=minbase bookworm (about a minute) into {rootfs}")
        _run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs)], progress)
        progress("packing the root filesystem")
        _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], progress)
        progress(f"importing it as {BASE_IMAGE}")
        repository, tag = BASE_IMAGE.split(":")
        engine.import_tar(str(tarball), repository, tag)
    progress(f"created {BASE_IMAGE} locally from Debian packages (no registry was used)")


def _run(argv: list[str], progress: Progress) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise EngineError(f"{argv[0]} failed with exit code {proc.returncode}:\n{tail}")


def build(engine: Engine, image: BundledImage, progress: Progress, force: bool = False) -> bool:
    """Build one bundled image when it is missing (or when forced). Returns True if it built."""
    if not force and engine.image_exists(image.tag):
        return False
    ensure_base(engine, progress)
    progress(f"building {image.tag} from {image.context}")
    # Docker's own step lines show progress; the package managers' chatter would drown it.
    engine.build(str(image.context), image.tag, LABELS,
                 lambda line: progress("  " + line) if line.startswith(("Step ", "Successfully")) else None)
    return True


def ensure_for(engine: Engine, policy_image: str, progress: Progress, proxy: bool = False) -> str:
    """Make sure the probe image, its volume, the policy's image (and the proxy) exist. Returns the volume."""
    probe = probe_image()
    build(engine, probe, progress)
    if proxy:
        build(engine, proxy_image(), progress)
    volume = probe_volume_name()
    if not engine.volume_exists(volume):
        engine.fill_volume(volume, probe.tag, "/probe", LABELS)  # image path, see images/probe
    if policy_image == AGENT_IMAGE:
        build(engine, agent_image(), progress)
    elif not engine.image_exists(policy_image):
        progress(f"image {policy_image} is missing; pulling it")
        engine.pull(policy_image)
    return volume
