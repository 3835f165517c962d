"""Short-lived root containers that do one job on our volumes for the launcher (copy mode's
copytool, the home volume's owner): our agent image, no network, read-only root, all
capabilities dropped but the few the job needs, only the mounts it names; never the agent's programs.
Every one has a time limit, and its output is read as a stream or up to a bound, never whole."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from launcher import labels as label
from launcher.engine.engineproto import Engine
from launcher.errors import EngineError, NotFound, SandboxError
from launcher.plan.plan import ContainerSpec, Mount

TOOL_IMAGE = "sandbox/agent:bookworm"      # has python3, tar, cp, chown (images/agent)
TOOL_SECONDS = 600                         # a job on the agent's files: long enough for gigabytes, not forever
OUTPUT_LIMIT = 64 << 20                    # bytes of a job's answer (JSON) the launcher holds in memory
HELD_SECONDS = 60                          # a volume still held by a container: waited for this long


def _spec(name: str, entrypoint: tuple[str, ...], argv: list[str], mounts: list[Mount], caps: tuple[str, ...],
          labels: dict[str, str], read_only_root: bool = True) -> ContainerSpec:
    return ContainerSpec(
        name=name, image=TOOL_IMAGE, user="0:0", entrypoint=entrypoint,
        command=tuple(argv), env=(("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),), working_dir="/",
        mounts=tuple(mounts), network_mode="none", read_only_root=read_only_root, cap_drop=("ALL",), cap_add=caps,
        security_opt=("no-new-privileges",), pids_limit=256, memory_bytes=1 << 30, nano_cpus=None,
        labels=tuple(sorted({label.MANAGED: "1", label.KIND: "tool", label.SANDBOX: name,
                             label.OWNER_PID: str(os.getpid()), **labels}.items())), hostname="sandbox-tools")


def _tail(err: bytes) -> str:
    return "\n    ".join(err.decode(errors="replace").strip().splitlines()[-5:])


@contextmanager
def tool_stream(engine: Engine, *, name: str, entrypoint: tuple[str, ...], argv: list[str], mounts: list[Mount],
                caps: tuple[str, ...], labels: dict[str, str], what: str,
                timeout: float = TOOL_SECONDS) -> Iterator[BinaryIO]:
    """Run the job as root in a fresh container NAME-tool-XXXXXX (always removed) and yield its
    stdout as it comes; EngineError when it fails or runs past `timeout` seconds (then it is killed)."""
    spec = _spec(f"{name}-tool-{os.urandom(3).hex()}", entrypoint, argv, mounts, caps, labels)
    timed_out = EngineError(f"{what} timed out after {timeout:g} s (the tools container was killed and removed)")
    with engine.run_attached(spec, timeout) as run:
        try:
            yield run.stdout
        except Exception as exc:
            if run.timed_out:          # the kill cut its output short: that is the story, not the short read
                raise timed_out from None
            if isinstance(exc, SandboxError):
                raise
            raise EngineError(f"{what} failed: its output broke off ({exc}):\n    {_tail(run.stderr)}") from None
    if run.timed_out:
        raise timed_out
    if run.exit_code != 0:
        raise EngineError(f"{what} failed (exit {run.exit_code}):\n    {_tail(run.stderr)}")


def run_tool(engine: Engine, *, name: str, entrypoint: tuple[str, ...], argv: list[str], mounts: list[Mount],
             caps: tuple[str, ...], labels: dict[str, str], what: str, timeout: float = TOOL_SECONDS) -> bytes:
    """Run the job (see tool_stream); its stdout, refused beyond OUTPUT_LIMIT bytes."""
    with tool_stream(engine, name=name, entrypoint=entrypoint, argv=argv, mounts=mounts, caps=caps, labels=labels,
                     what=what, timeout=timeout) as out:
        answer = out.read(OUTPUT_LIMIT + 1)
        if len(answer) > OUTPUT_LIMIT:
            raise EngineError(f"{what}: its answer is over {OUTPUT_LIMIT >> 20} MiB; refused rather than held in "
                              "memory.\n    hint: leave generated trees out of the copy (workspace.exclude) or "
                              "`sandbox discard` it")
    return answer


@contextmanager
def created(engine: Engine, *, name: str, mounts: list[Mount], labels: dict[str, str],
            writable_root: bool = False) -> Iterator[str]:
    """A container of our volumes that is created and never started, for the archive API (no
    process runs: a look or a fill costs a create and a remove). A volume that vanished meanwhile,
    which the engine would create empty for the mount, is removed again afterwards."""
    ref = engine.create(_spec(f"{name}-look-{os.urandom(3).hex()}", ("true",), [], mounts, (), labels,
                              read_only_root=not writable_root))
    try:
        yield ref
    finally:
        engine.remove(ref)
        for mount in mounts:
            info = engine.volume_info(mount.source) if mount.source else None
            if info is not None and not info.labels.get(label.MANAGED):
                try:
                    engine.remove_volume(mount.source)
                except EngineError:
                    pass


def read_files(engine: Engine, *, name: str, mounts: list[Mount], paths: list[str], labels: dict[str, str],
               limit: int = 1 << 16) -> dict[str, bytes | None]:
    """Small files of our volumes through one created, never started container (see `created`):
    each path's bytes, None where there is no regular file."""
    with created(engine, name=name, mounts=mounts, labels=labels) as ref:
        return {path: engine.read_file(ref, path, limit) for path in paths}


def remove_released(engine: Engine, volume: str, seconds: float = HELD_SECONDS) -> None:
    """Remove `volume` (one already gone is fine), trying again for up to `seconds` while a
    container holds it: another launcher's tools container (a `gc` reading each copy) holds one
    for a moment, and a `down` or `discard` meanwhile failed on it (seen in CI)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            engine.remove_volume(volume)
            return
        except NotFound:
            return
        except EngineError as exc:   # Docker: "volume is in use"; podman: "volume is being used"
            if not any(words in str(exc) for words in ("in use", "being used")) or time.monotonic() >= deadline:
                raise
        time.sleep(0.25)
