"""`sandbox fork NAME NEW`: a copy made from another copy's checkpoint, so two agents can try two
approaches. The same workspace, base (what `diff` and `apply` compare with) and trust key as the
origin; volumes of its own, so nothing either writes reaches the other."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from launcher import labels as label
from launcher.copies import store
from launcher.copies.limits import Limits, human
from launcher.engine.engineproto import Engine
from launcher.engine.tools import run_tool
from launcher.errors import EngineError, NotFound, PolicyError, Problem
from launcher.plan.plan import Mount, MountKind

PARTS = ("base", "upper", "tree")


@dataclass(frozen=True, kw_only=True)
class Forked:
    name: str                  # the new copy
    origin: str                # the copy it was made from
    checkpoint: int            # the origin's checkpoint it holds (its own checkpoint 0)
    workspace: str
    changes: int | None        # changes it holds against the base (the origin's at that checkpoint)
    seconds: float             # how long making it took


def origin(engine: Engine, name: str) -> str:
    """"ORIGIN@CHECKPOINT" when the copy `name` is a fork, else ""."""
    found = engine.volume_info(f"{name}-upper")
    return found.labels.get(label.FORKED, "") if found is not None else ""


def _refuse_taken(engine: Engine, new: str) -> None:
    """PolicyError when anything of a copy named `new` exists (its volumes, whole or in part)."""
    found = [v for v in (engine.volume_info(f"{new}-{part}") for part in PARTS) if v is not None]
    found += engine.list_volumes(label.selector(label.COPY, new))
    if found:
        of = found[0].labels.get(label.WORKSPACE)
        raise PolicyError([Problem(file="command line", path="NEW", expected="a name no copy has",
                                   found=f"copy {new} exists ({f'of {of}' if of else f'volume {found[0].name}'})",
                                   hint=f"choose another NEW, or `sandbox discard {new}` first; nothing was made")])


def _volume(name: str, target: str, read_only: bool) -> Mount:
    return Mount(kind=MountKind.VOLUME, source=name, target=target, read_only=read_only)


def fork(engine: Engine, name: str, new: str, at: int | None = None, limits: Limits = Limits()) -> Forked:
    """Make the copy `new` from the copy `name` at its checkpoint `at` (None: as it is now, frozen
    into a checkpoint first, its sandbox paused meanwhile, an unchanged copy reusing its last).
    NotFound for an unknown copy or checkpoint, PolicyError when `new` is taken; on any failure
    whatever of `new` this made is removed, and the origin keeps all it had."""
    started = time.monotonic()
    copy = store.find(engine, name)
    if not store.complete(engine, name):
        raise EngineError(f"copy {name} is incomplete (a volume is missing); `sandbox discard {name}`")
    _refuse_taken(engine, new)
    if at is None:
        at = store.checkpoint(engine, name, f"forked as {new}", limits, reuse=True)["id"]
    else:
        ids = [c["id"] for c in store.checkpoints(engine, name)]
        if at not in ids:
            raise NotFound(f"{name} has no checkpoint {at}; it has {', '.join(map(str, ids))}")
    of = engine.volume_info(f"{name}-upper").labels
    labels = {**of, label.COPY: new, label.OWNER_PID: str(os.getpid()), label.FORKED: f"{name}@{at}"}
    made: list[str] = []
    try:
        for part in ("base", "upper"):
            made.append(engine.create_volume(f"{new}-{part}", labels).name)
        mounts = [_volume(f"{new}-base", "/base", False), _volume(f"{new}-upper", "/v", False),
                  _volume(f"{name}-base", "/from/base", True), _volume(f"{name}-upper", "/from/v", True),
                  Mount(kind=MountKind.TMPFS, target="/tmp", read_only=False, size_bytes=64 << 20)]
        answer = run_tool(engine, name=new, entrypoint=("python3", "-c", store.TOOL),
                          argv=["fork", name, str(at), "--limit", str(limits.copy_bytes)], mounts=mounts, caps=store.TOOL_CAPS, labels={label.COPY: new},
                          what=f"forking {name} at checkpoint {at} as {new}", timeout=store.COPY_SECONDS)
        taken = json.loads(answer or b"{}")
        if "refused" in taken:
            usage = taken["refused"]["usage"]
            raise PolicyError([Problem(
                file=f"copy {name}", path=f"checkpoint {at}", found=f"{human(usage)} ({usage} bytes); nothing was made",
                expected=f"changes of at most {human(limits.copy_bytes)} on disk (--max-copy-size: a fork copies them)",
                hint="the same command with --max-copy-size SIZE, a larger SIZE")])
        base, upper = (engine.volume_info(f"{new}-{part}").mountpoint for part in ("base", "upper"))
        made.append(engine.create_volume(f"{new}-tree", labels, store.tree_options(base, upper)).name)
    except BaseException:
        for volume in reversed(made):   # the overlay first; nothing of the user's is in a fork just made
            try:
                engine.remove_volume(volume)
            except EngineError:
                pass
        raise
    return Forked(name=new, origin=name, checkpoint=at, workspace=copy.workspace, changes=taken.get("changes"),
                  seconds=time.monotonic() - started)
