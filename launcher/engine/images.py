"""Bundled images (agent, probe): content-addressed tags, building what is missing, bootstrapping
the Debian base image where no registry can be reached."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from launcher import labels as label
from launcher import resources
from launcher.engine import overlap, probefiles
from launcher.engine.engineproto import Engine
from launcher.errors import EngineError

BASE_IMAGE = "debian:bookworm-slim"
AGENT_IMAGE = "sandbox/agent:bookworm"        # slim: the ci and read-only presets, the tools container
FULL_IMAGE = "sandbox/agent:bookworm-full"    # plus a coding agent's everyday tools (images/agent-full)
LABELS = {label.MANAGED: "1"}

Progress = Callable[[str], None]
HEARTBEAT = 5.0   # seconds: at most one routine progress line this often (a log stays short)
_now = time.monotonic   # tests replace the clock


class _Ticker:
    """Progress of one long step: lines carry the elapsed seconds; routine ones are thinned out."""

    def __init__(self, progress: Progress, label: str):
        self.progress, self.label, self.lock = progress, label, threading.Lock()
        self.started = self.last = _now()

    def elapsed(self) -> int:
        return round(_now() - self.started)

    def say(self, text: str, force: bool = False) -> None:
        with self.lock:   # the build's output and its heartbeat thread both speak
            if not (force or _now() - self.last >= HEARTBEAT):
                return
            self.last = _now()
        self.progress(f"  {self.label}: {text} ({self.elapsed()} s)")


@dataclass(frozen=True, kw_only=True)
class BundledImage:
    key: str
    tag: str
    context: Path
    # For a fixed tag that policies name (sandbox/agent:bookworm): the context's hash, kept as a
    # label, so a changed Dockerfile rebuilds the image instead of serving the old one.
    context_hash: str = ""
    # The image its Dockerfile builds on (its `ARG BASE`). The build gets that image's id as BASE,
    # never the name: engines resolve a short name differently (podman reads `debian` as an alias
    # of docker.io/library/debian and may go to a registry for it), an id means the same everywhere.
    base: str = BASE_IMAGE
    dockerfile: str = ""   # a Dockerfile elsewhere than context/Dockerfile (a repository's, imageext)


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


def upstream_image() -> BundledImage:
    """Tests' and selftest's stand-in for the internet (never used by a sandbox)."""
    context = resources.images_dir() / "upstream"
    return BundledImage(key="upstream", tag=f"sandbox-test/upstream:{_context_hash(context)}", context=context)


def model_api_image() -> BundledImage:
    """Tests' scripted stand-in model API for the real agent CLIs (never used by a sandbox)."""
    context = resources.images_dir() / "model-api"
    return BundledImage(key="model-api", tag=f"sandbox-test/model-api:{_context_hash(context)}", context=context)


def agent_image() -> BundledImage:
    context = resources.images_dir() / "agent"
    return BundledImage(key="agent", tag=AGENT_IMAGE, context=context, context_hash=_context_hash(context))


def full_image() -> BundledImage:
    """The agent image plus git, make, gcc, pip and venv, Node and npm, jq, ripgrep, curl, unzip, less."""
    context = resources.images_dir() / "agent-full"
    return BundledImage(key="agent-full", tag=FULL_IMAGE, context=context, context_hash=_chained(context, agent_image()),
                        base=AGENT_IMAGE)


def _chained(context: Path, *under: BundledImage) -> str:
    """The hash of a recipe that builds on other bundled images: a change in any of them changes it."""
    parts = [_context_hash(context)] + [image.context_hash or image.tag.rpartition(":")[2] for image in under]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:12]


def agent_fetch_image() -> BundledImage:
    """The stage the agent images share (images/agent-fetch, FROM the agent image): their fetch
    stages start from it, their final stages copy its hardening step. Never a sandbox's image."""
    context = resources.images_dir() / "agent-fetch"
    return BundledImage(key="agent-fetch", tag=f"sandbox/agent-fetch:{_chained(context, agent_image())}",
                        context=context, base=AGENT_IMAGE)


def agent_profile_image(name: str) -> BundledImage:
    """An agent CLI's image (images/agents/NAME, FROM the full agent image, with the CLI from the
    fetch image): an agent works with the everyday tools. The tag follows its recipe and theirs."""
    context = resources.images_dir() / "agents" / name
    if not (context / "Dockerfile").is_file():
        raise EngineError(f"no agent image recipe {name!r} in {context.parent}")
    # The fetch image's tag already follows the agent image; all are named so that any one's
    # change is a changed recipe.
    digest = _chained(context, full_image(), agent_fetch_image())
    return BundledImage(key=f"agent-{name}", tag=f"sandbox/agent-{name}:{digest}", context=context, base=FULL_IMAGE)


EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")   # Debian/Ubuntu: the host's extra CAs


def extra_ca_files(directory: Path = EXTRA_CA_DIR) -> list[Path]:
    """The host's extra CA certificates (update-ca-certificates' input, *.crt), sorted; none if
    absent: the default CA bundle of agent image builds (a TLS-intercepting proxy on the way out)."""
    return sorted(p for p in directory.rglob("*.crt") if p.is_file()) if directory.is_dir() else []


def ca_buildargs(files: list[Path]) -> dict[str, str]:
    """CA_BUNDLE for the agent images' download steps: the certificates of `files` (PEM; a private
    key is refused), or nothing. The images use it only while installing, never as their trust."""
    from launcher.policy.inject import ca_bundle

    if not files:
        return {}
    pems = []
    for path in files:
        try:
            pems.append(ca_bundle(path.read_bytes()))
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot use {path} as a CA bundle: {exc}") from None
    return {"CA_BUNDLE": "".join(pems)}


def build_agent(engine: Engine, name: str, progress: Progress, ca_files: list[Path] = (),
                force: bool = False) -> BundledImage:
    """Build the agent image and the shared fetch image (each when missing or changed) and NAME's
    image on them, trusting ca_files during the download steps (the CLI's default:
    extra_ca_files(), the host's own). `force` rebuilds the fetch image and NAME's."""
    build(engine, agent_image(), progress)
    build(engine, full_image(), progress)
    fetch = agent_fetch_image()
    build(engine, fetch, progress, force)
    image = agent_profile_image(name)
    build(engine, image, progress, force, {"FETCH": image_id(engine, fetch.tag), **ca_buildargs(list(ca_files))})
    return image


def probe_version() -> str:   # the probe image's tag, its context's digest: names its volume and host directory
    return probe_image().tag.split(":")[1]


def probe_volume_name() -> str:
    return "sandbox-probe-" + probe_version()


def image_id(engine: Engine, ref: str) -> str:
    """The id of a local image (what a build goes FROM); an error if the engine has none."""
    found = engine.image_digests(ref)["id"]
    if not found:
        raise EngineError(f"the engine reports no id for image {ref}")
    return found


def ensure_base(engine: Engine, progress: Progress) -> str:
    """debian:bookworm-slim present (pulled, or else bootstrapped); returns its id."""
    if engine.image_exists(BASE_IMAGE):
        return image_id(engine, BASE_IMAGE)
    progress(f"base image {BASE_IMAGE} is missing; trying to pull it")
    try:
        engine.pull(BASE_IMAGE)
        return image_id(engine, BASE_IMAGE)
    except EngineError as exc:
        progress(f"pull failed ({str(exc).splitlines()[0]}); bootstrapping it from Debian packages instead")
    bootstrap(engine, progress)
    return image_id(engine, BASE_IMAGE)


def bootstrap(engine: Engine, progress: Progress, tag: str = BASE_IMAGE) -> None:
    """Make debian:bookworm-slim (or `tag`: tests keep the shared one) locally: debootstrap
    --variant=minbase, then docker import. Installs debootstrap first when it is missing."""
    _ensure_debootstrap(progress)
    with tempfile.TemporaryDirectory(prefix="sandbox-rootfs-") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        ticker = _Ticker(progress, "debootstrap")
        progress(f"debootstrap --variant=minbase bookworm (about a minute) into {rootfs}")
        _run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs)], _stages(ticker))
        progress(f"packing the root filesystem ({ticker.elapsed()} s)")
        _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."])
        progress(f"importing it as {tag} ({ticker.elapsed()} s)")
        # name:tag as the API's repo (engine.import_tar): podman 4.3 drops a separate tag (NAME:latest)
        engine.import_tar(str(tarball), tag)
    if not engine.image_exists(tag):
        # An engine that names the import otherwise would leave every build without its base.
        raise EngineError(f"the engine imported the base image but not as {tag}.\n    hint: "
                          f"`docker images` shows the name it chose; tag it {tag} and run `sandbox images build`")
    progress(f"created {tag} locally from Debian packages in {ticker.elapsed()} s (no registry was used)")


# apt-get waits this long for another apt-get or dpkg to finish instead of failing at once.
_APT = ["apt-get", "-o", "DPkg::Lock::Timeout=120"]
# What apt-get says when it has no package lists yet (a fresh image or a cleaned host).
_NO_LISTS = ("Unable to locate package", "has no installation candidate")


def _ensure_debootstrap(progress: Progress) -> None:
    """debootstrap on PATH and root to run it. On a fresh Debian or Ubuntu host (run as root)
    apt-get installs it; anywhere else the error names the one command to run."""
    root = os.geteuid() == 0
    if shutil.which("debootstrap") is not None:
        if not root:
            raise EngineError("debootstrap needs root.\n    hint: run `sudo sandbox images bootstrap` once")
        return
    if not root:
        raise EngineError("cannot make the base image: debootstrap is not installed, and installing and running it "
                          "needs root.\n    hint: run `sudo sandbox images bootstrap` once (it installs debootstrap "
                          "and makes the image)")
    if shutil.which("apt-get") is None:
        raise EngineError("cannot make the base image: debootstrap is not installed and there is no apt-get to "
                          "install it.\n    hint: install debootstrap with this system's package manager, or make "
                          f"{BASE_IMAGE} available to the engine (`docker load`, or a registry `docker pull` reaches)")
    progress("debootstrap is missing; installing it with apt-get (the base image is made from Debian packages)")
    ticker = _Ticker(progress, "apt-get")
    install = _APT + ["install", "-y", "--no-install-recommends", "debootstrap"]
    try:
        with _heartbeat(ticker, lambda: "still running"):
            try:
                _run(install, _thinned(ticker))
            except EngineError as exc:
                if not any(text in str(exc) for text in _NO_LISTS):
                    raise
                progress(f"apt-get has no package lists yet; running apt-get update first ({ticker.elapsed()} s)")
                _run(_APT + ["update"], _thinned(ticker))
                _run(install, _thinned(ticker))
    except EngineError as exc:
        raise EngineError(f"cannot install debootstrap: {exc}\n    hint: `sudo apt-get install debootstrap` "
                          "(after `sudo apt-get update`), then `sandbox images bootstrap`") from None
    if shutil.which("debootstrap") is None:
        raise EngineError("apt-get installed debootstrap, but it is not on PATH.\n"
                          "    hint: add /usr/sbin to PATH, then run `sandbox images bootstrap` again")
    progress(f"installed debootstrap in {ticker.elapsed()} s")


def _thinned(ticker: _Ticker) -> Callable[[str], None]:
    """Each line of a chatty tool as a heartbeat: at most one every HEARTBEAT seconds."""
    return lambda line: ticker.say(_short(line.strip())) if line.strip() else None


@contextlib.contextmanager
def _heartbeat(ticker: _Ticker, text: Callable[[], str]):
    """A line every HEARTBEAT seconds while the block runs, also when its step prints nothing
    (a long compile, `sleep`, dpkg unpacking)."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT):
            ticker.say(text())

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _stages(ticker: _Ticker) -> Callable[[str], None]:
    """debootstrap's "I: Retrieving/Validating/Unpacking/Configuring …" lines: each new stage at
    once, then at most one line per HEARTBEAT (it prints one per package, hundreds in all)."""
    seen: set[str] = set()

    def on_line(line: str) -> None:
        if line.startswith("I: "):
            stage = line[3:].split(" ", 1)[0]
            ticker.say(line[3:].strip(), force=stage not in seen)
            seen.add(stage)
    return on_line


def _run(argv: list[str], on_line: Callable[[str], None] = lambda line: None) -> None:
    """Run argv, passing each line of its output (stdout and stderr together) to on_line."""
    tail: deque[str] = deque(maxlen=5)
    # No stdin: nothing run here may wait for an answer (apt-get's prompts take their defaults).
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            tail.append(line.rstrip())
            on_line(line.rstrip())
    if proc.returncode != 0:
        raise EngineError(f"{argv[0]} failed with exit code {proc.returncode}:\n" + "\n".join(tail))


def build(engine: Engine, image: BundledImage, progress: Progress, force: bool = False,
          buildargs: dict[str, str] | None = None) -> bool:
    """Build one bundled image when it is missing (or when forced). Returns True if it built."""
    if not force and current(engine, image):
        return False
    base = ensure_base(engine, progress) if image.base == BASE_IMAGE else image_id(engine, image.base)
    buildargs = {"BASE": base, **(buildargs or {})}
    progress(f"building {image.tag} from {image.context}")
    ticker, step = _Ticker(progress, image.tag), ["?"]

    def on_line(line: str) -> None:
        # Docker's "Step N/M : INSTRUCTION" lines (podman's "STEP N/M: INSTRUCTION") show how far it
        # is; the package managers' chatter in between would drown them, so it only keeps a
        # heartbeat going during a long step.
        if line.startswith(("Step ", "STEP ")):
            number, _, instruction = line[5:].partition(" : " if line.startswith("Step ") else ": ")
            step[0] = number
            ticker.say(f"step {number}: {_short(instruction)}", force=True)
        elif not line.startswith("Successfully"):
            ticker.say(f"step {step[0]} still running")

    with _heartbeat(ticker, lambda: f"step {step[0]} still running"):
        engine.build(str(image.context), image.tag,
                     {**LABELS, **({label.CONTEXT: image.context_hash} if image.context_hash else {})}, on_line,
                     buildargs, **({"dockerfile": image.dockerfile} if image.dockerfile else {}))
    progress(f"built {image.tag} in {ticker.elapsed()} s")
    return True


def current(engine: Engine, image: BundledImage) -> bool:
    """Whether the engine has the image, built from this context (one inspect)."""
    labels = engine.image_labels(image.tag)
    return labels is not None and (not image.context_hash or labels.get(label.CONTEXT) == image.context_hash)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def ensure_for(engine: Engine, policy_image: str, progress: Progress, proxy: bool = False, probe_dir: str = "",
               tools: bool = False) -> str:
    """Make sure the probe image, its volume (and its copy at probe_dir on this host, when one is
    bound), the policy's image, the proxy's and the tools' (the agent image) exist. Returns the
    volume. What is there is asked all at once (one inspect each); what is missing is made in order."""
    bundled = [probe_image()] + [proxy_image()] * proxy + [agent_image()] * (
        tools or policy_image in (AGENT_IMAGE, FULL_IMAGE)) + [full_image()] * (policy_image == FULL_IMAGE)
    volume = probe_volume_name()
    asks = {volume: lambda: engine.volume_labels(volume), **{i.tag: lambda i=i: current(engine, i) for i in bundled}}
    asks.setdefault(policy_image, lambda: engine.image_exists(policy_image))
    seen: dict = {}
    overlap.each(lambda key: seen.__setitem__(key, asks[key]()), asks)
    for image in bundled:   # in this order: the full image is built on the agent image
        if not seen[image.tag]:
            build(engine, image, progress)
            seen[image.tag] = True
    probefiles.ensure_volume(engine, volume, seen[volume], bundled[0].tag, probe_dir)
    if not seen[policy_image]:
        progress(f"image {policy_image} is missing; pulling it")
        engine.pull(policy_image)
    return volume
