"""Copies as Docker volumes: NAME-base (the host tree's copy, the overlay's lower layer), NAME-upper (the
agent's changes, the overlay's work dir, the checkpoints), NAME-tree (the overlay the sandbox mounts) and,
while diff or apply reads one, NAME-view-XXXXXX (a checkpoint laid over the copy, read-only). Every
operation on the agent's files runs in a tools container (images/tools/copytool.py: no network, read-only
root, only its volumes, a time limit); the host never opens the agent's files in place. Two need none: the
user's tree goes in as a tar through the archive API (fill.py), and a run's end looks whether the upper
layer is still an empty directory (`untouched`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from launcher import labels as label
from launcher import resources
from launcher.copies import fill
from launcher.copies.export import Exported, read_export
from launcher.copies.limits import Limits, upper_refused
from launcher.copies.review import Allowed
from launcher.engine import overlap
from launcher.engine.engineproto import Engine, VolumeInfo
from launcher.engine.tools import TOOL_SECONDS, created, read_files, remove_released, run_tool, tool_stream
from launcher.errors import EngineError, NotFound, PolicyError, Problem
from launcher.plan.plan import CopySpec, Mount, MountKind

TOOL = (resources.images_dir() / "tools" / "copytool.py").read_text()
# root in the tools container: it copies files of any owner into the agent's, and whiteouts (the
# overlay's deletions, character devices) between checkpoints; never any of the agent's programs.
TOOL_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD")
EMPTY_DIR_LIMIT = 4096  # bytes read of v/upper's tar: an empty directory's header (and a pax one), the end
COPY_SECONDS = 3600     # copying a workspace in: a large tree may take long, never forever

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Copy:
    name: str
    workspace: str
    policy: str
    protected: tuple[str, ...]
    created: str
    maker: int                      # pid of the launcher that made it
    trust: str = "unkeyed"          # trustlevel.key of the policy it was made under (older copies: none)
    users: tuple[str, ...] = ()     # sandbox containers using it now
    changes: int | None = None      # changes it held at its last checkpoint (None: not known, see states)
    checkpoint: int | None = None   # that checkpoint


def _tool_args(engine: Engine, copy: str, argv: list[str], mounts: list[Mount], what: str) -> dict:
    for mount in mounts:   # Docker would create a missing one, empty, and we would read "no changes"
        if mount.kind is MountKind.VOLUME and engine.volume_info(mount.source) is None:
            raise NotFound(f"no copy named {copy!r} (volume {mount.source} is missing); `sandbox ls` lists them")
    scratch = Mount(kind=MountKind.TMPFS, target="/tmp", read_only=False, size_bytes=64 << 20)
    return dict(name=copy, entrypoint=("python3", "-c", TOOL), argv=argv, mounts=mounts + [scratch],
                caps=TOOL_CAPS, labels={label.COPY: copy}, what=what)


def _tool(engine: Engine, copy: str, argv: list[str], mounts: list[Mount], what: str,
          timeout: float = TOOL_SECONDS) -> bytes:
    return run_tool(engine, **_tool_args(engine, copy, argv, mounts, what), timeout=timeout)


def _volume(name: str, target: str, read_only: bool) -> Mount:
    return Mount(kind=MountKind.VOLUME, source=name, target=target, read_only=read_only)


def _mounts(spec_name: str, *, tree: bool, write: bool) -> list[Mount]:
    mounts = [_volume(f"{spec_name}-base", "/base", True), _volume(f"{spec_name}-upper", "/v", not write)]
    return mounts + ([_volume(f"{spec_name}-tree", "/tree", True)] if tree else [])


def prepare(engine: Engine, spec: CopySpec, progress: Progress) -> bool:
    """Make the copy, or reuse the one of that name (a second `up`, `run --name`). True if made."""
    filling = begin(engine, spec, progress)
    if filling is None:
        return False
    try:
        filling.wait()
    except BaseException:
        _remove_new(engine, spec)
        raise
    return True


def begin(engine: Engine, spec: CopySpec, progress: Progress, phase: fill.Phase = nullcontext) -> fill.Filling | None:
    """`prepare`, the copy's content going in on a thread (see Filling); None when an existing
    copy is reused. The caller waits for it before it starts a sandbox on it."""
    found = engine.volume_info(spec.upper_volume)
    if found is not None:
        have = found.labels.get(label.WORKSPACE)
        if have != spec.source:
            raise PolicyError([Problem(file="command line", path="--name", expected=f"a copy of {spec.source}",
                                       found=f"copy {spec.name} is of {have}",
                                       hint=f"choose another name, or `sandbox discard {spec.name}`")])
        if (made_under := found.labels.get(label.TRUST, "")) != spec.trust:   # a less trusted agent's work stays out
            raise PolicyError([Problem(
                file="command line", path="--name", expected=f"a copy made under trust key {spec.trust}",
                found=f"copy {spec.name} was made under trust key {made_under or 'none'} (a policy of another reach)",
                hint=f"`sandbox apply {spec.name}` or `sandbox discard {spec.name}` first, or choose another --name")])
        if engine.volume_info(spec.tree_volume) is None or engine.volume_info(spec.base_volume) is None:
            raise EngineError(f"copy {spec.name} is incomplete (a volume is missing); `sandbox discard {spec.name}`")
        progress(f"working on the existing copy {spec.name} (`sandbox checkpoints {spec.name}` lists its history)")
        return None
    labels = dict(spec.labels)
    started = time.monotonic()
    progress(f"copying {spec.source} into volume {spec.base_volume} (the host tree is only read)")
    try:
        made = {}
        overlap.each(lambda volume: made.__setitem__(volume, engine.create_volume(volume, labels)),
                     (spec.base_volume, spec.upper_volume))
        base, upper = (made[v].mountpoint for v in (spec.base_volume, spec.upper_volume))
        # mounted when a sandbox starts (its mount is no_copy: not at its create), once the fill made upper/, work/
        engine.create_volume(spec.tree_volume, labels, tree_options(base, upper))
    except BaseException:
        _remove_new(engine, spec)
        raise

    def copied(head: str) -> None:
        progress(f"copied in {time.monotonic() - started:.1f} s ({f'at commit {head[:12]}' if head else 'no git commit'}); "
                 "checkpoint 0 taken")
    return fill.Filling(lambda: _fill(engine, spec), copied, phase)


def tree_options(base: str, upper: str) -> dict:
    """The NAME-tree volume's overlay of the copy (mountpoint `base`) and its changes (`upper`);
    userxattr: the overlay's own markers are user.* attributes, so copying a checkpoint keeps them."""
    return {"type": "overlay", "device": "overlay", "o": f"lowerdir={base},upperdir={upper}/upper,workdir={upper}/work,userxattr"}


def _remove_new(engine: Engine, spec: CopySpec) -> None:
    for volume in (spec.tree_volume, spec.upper_volume, spec.base_volume):   # nothing of the user's is in a
        with contextlib.suppress(EngineError):                                 # copy that was never used
            engine.remove_volume(volume)


def _fill(engine: Engine, spec: CopySpec) -> str:
    """The host tree into the copy with checkpoint 0 (see fill.py): unpacked by the engine into a
    created container's volumes when fill.plan can, else by the tools container. Its git HEAD."""
    base, upper = _volume(spec.base_volume, "/base", False), _volume(spec.upper_volume, "/v", False)
    # podman's archive API unpacks into the volume the request's path is in, not the one each
    # entry's path is in (a tar at / of base/... and v/... lands in the container's own root): the
    # tools container copies there.
    found = fill.plan(spec) if engine.dialect.archive_spans_volumes else None
    if found is not None:
        # never started, so its root may be writable: the archive unpacks at / into /base and /v
        with created(engine, name=spec.name, mounts=[base, upper], labels={label.COPY: spec.name},
                     writable_root=True) as ref:
            engine.put_archive(ref, "/", fill.chunks(found))
        return found.head
    out = _tool(engine, spec.name, ["copy", str(spec.uid), str(spec.gid), json.dumps(list(spec.exclude))],
                [Mount(kind=MountKind.BIND, source=spec.source, target="/src", read_only=True), base, upper],
                "copying the workspace", COPY_SECONDS)
    return json.loads(out or b"{}").get("head") or ""


def _copy_of(volume: VolumeInfo) -> Copy:
    labels = volume.labels
    return Copy(name=labels.get(label.COPY, "?"), workspace=labels.get(label.WORKSPACE, "?"),
                policy=labels.get(label.POLICY, "?"), protected=tuple(json.loads(labels.get(label.PROTECTED, "[]"))),
                created=volume.created, maker=int(labels.get(label.OWNER_PID, "0") or 0),
                trust=labels.get(label.TRUST, "unkeyed"))


def all_copies(engine: Engine) -> list[Copy]:
    copies: dict[str, VolumeInfo] = {}
    for volume in engine.list_volumes(label.selector(label.KIND, "copy")):
        name = volume.labels.get(label.COPY, "")
        if name and (name not in copies or volume.name == f"{name}-upper"):
            copies[name] = volume
    return [_with_users(engine, _copy_of(v)) for _, v in sorted(copies.items())]


def _with_users(engine: Engine, copy: Copy) -> Copy:
    users = tuple(i.name for i in engine.list(label.selector(label.COPY, copy.name))
                  if i.labels.get(label.KIND) in ("run", "up"))
    return replace(copy, users=users)


def complete(engine: Engine, name: str) -> bool:
    """All three volumes exist (a launcher killed while copying leaves fewer)."""
    return all(engine.volume_info(f"{name}-{part}") is not None for part in ("base", "upper", "tree"))


def find(engine: Engine, name: str) -> Copy:
    for part in ("upper", "base", "tree"):
        volume = engine.volume_info(f"{name}-{part}")
        if volume is not None and volume.labels.get(label.KIND) == "copy":
            return _with_users(engine, _copy_of(volume))
    raise NotFound(f"no copy named {name!r}; `sandbox ls` lists them")


@contextmanager
def _view(engine: Engine, name: str, number: int) -> Iterator[str]:
    """A volume that is checkpoint `number` laid over the copy as a read-only overlay (two lower
    layers, no upper): the tree as the agent left it then, whiteouts and opaque directories read by
    the kernel as in the sandbox's own overlay. Removed afterwards (`drop` and `gc` take a leftover)."""
    upper, base = (engine.volume_info(f"{name}-{part}").mountpoint for part in ("upper", "base"))
    view = f"{name}-view-{os.urandom(3).hex()}"
    labels = {label.MANAGED: "1", label.KIND: "copy-view", label.COPY: name, label.OWNER_PID: str(os.getpid())}
    options = f"lowerdir={upper}/checkpoints/{number}/tree:{base},userxattr"
    made = []
    try:
        if engine.dialect.chowns_volume_at_attach:
            # podman 4.3 chowns a volume's root to the container's user at its first attach, which a
            # read-only overlay refuses (EROFS): a throwaway upper layer takes that chown. The tools
            # container still mounts the view read-only.
            made.append(engine.create_volume(f"{view}-scratch", labels).name)
            scratch = engine.volume_info(made[0]).mountpoint
            for part in ("upper", "work"):
                os.mkdir(f"{scratch}/{part}", 0o700)
            options += f",upperdir={scratch}/upper,workdir={scratch}/work"
        made.insert(0, engine.create_volume(view, labels, {"type": "overlay", "device": "overlay", "o": options}).name)
        yield view
    finally:
        for volume in made:   # the view first: the scratch volume is its upper layer
            with contextlib.suppress(EngineError):
                engine.remove_volume(volume)


def _frozen_mounts(name: str, view: str) -> list[Mount]:
    return _mounts(name, tree=False, write=False) + [_volume(view, "/tree", True)]


def changes(engine: Engine, name: str, patch: bool = False, checkpoint: int | None = None) -> dict:
    """{"changes": [...], "meta": {...}, "checkpoint": N}: what the agent changed in the copy (see
    copytool.changes) as checkpoint N froze it, or (None) as the copy is now."""
    if checkpoint is None:
        return json.loads(_tool(engine, name, ["changes"] + (["--patch"] if patch else []),
                                _mounts(name, tree=True, write=False), f"reading the changes of {name}"))
    find(engine, name)
    with _view(engine, name, checkpoint) as view:
        return json.loads(_tool(engine, name, ["changes", "--checkpoint", str(checkpoint)] + (["--patch"] if patch else []),
                                _frozen_mounts(name, view), f"reading the changes of {name} at checkpoint {checkpoint}"))


@contextmanager
def exported(engine: Engine, copy: Copy, number: int, limits: Limits,
             allowed: Allowed | None = None) -> Iterator[Exported]:
    """The changes of checkpoint `number` with every file `apply` may write (with the yeses
    `allowed`), streamed into a private spool (removed afterwards); PolicyError before any file
    arrives when they are over `limits`."""
    with _view(engine, copy.name, number) as view:
        args = _tool_args(engine, copy.name, ["export", "--checkpoint", str(number), "--file-limit",
                                              str(limits.file_bytes)], _frozen_mounts(copy.name, view),
                          f"reading the changes of {copy.name} at checkpoint {number}")
        with tool_stream(engine, **args) as stream:
            found = read_export(stream, copy.protected, limits, copy.name, allowed)
    try:
        yield found
    finally:
        found.close()


def checkpoint(engine: Engine, name: str, message: str, limits: Limits = Limits(), *, reuse: bool = False,
               reviewed: bool = False) -> dict:
    """Snapshot the agent's changes; a running sandbox is paused meanwhile (a quiet tree). Refused
    (PolicyError) when they take more disk than limits.copy_bytes. `reuse`: an existing checkpoint
    of the very same tree if there is one; `reviewed`: record it as the one `diff` showed."""
    users = find(engine, name).users
    for user in users:
        engine.pause(user)
    try:
        # the overlay too: the tool counts the changes ("changes"; "clean" when no checkpoint ever
        # held one), so whoever checkpoints learns whether there is anything to keep, at no extra cost
        taken = json.loads(_tool(engine, name, ["checkpoint", message, "--limit", str(limits.copy_bytes)]
                                 + (["--reuse"] if reuse else []) + (["--reviewed"] if reviewed else []),
                                 _mounts(name, tree=True, write=True), f"checkpointing {name}"))
    finally:
        for user in users:
            engine.unpause(user)
    if "refused" in taken:
        raise upper_refused(name, taken["refused"]["usage"], limits)
    return taken


def checkpoints(engine: Engine, name: str) -> list[dict]:
    find(engine, name)
    return json.loads(_tool(engine, name, ["checkpoints"], _mounts(name, tree=False, write=False),
                            f"listing the checkpoints of {name}"))


def _unused(copy: Copy, action: str) -> None:
    if copy.users:
        raise PolicyError([Problem(file="command line", path="NAME", expected=f"a copy no sandbox uses ({action})",
                                   found=f"{copy.name} is in use by {', '.join(copy.users)}",
                                   hint=f"`sandbox down {copy.users[0]}` first; the copy stays")])


def rewind(engine: Engine, name: str, number: int, limits: Limits = Limits()) -> dict:
    """Put the copy back to checkpoint `number`; returns the checkpoint taken of what it replaced."""
    _unused(find(engine, name), "rewind")
    ids = [c["id"] for c in checkpoints(engine, name)]
    if number not in ids:
        raise NotFound(f"{name} has no checkpoint {number}; it has {', '.join(map(str, ids))}")
    before = json.loads(_tool(engine, name, ["rewind", str(number), "--limit", str(limits.copy_bytes)],
                              _mounts(name, tree=False, write=True), f"rewinding {name}"))
    if "refused" in before:
        raise upper_refused(name, before["refused"]["usage"], limits)
    return before


def drop_if_clean(engine: Engine, name: str, taken: dict) -> bool:
    """Drop the copy when the checkpoint just `taken` found no change in it and none in any
    checkpoint before (dropping it loses nothing) and no sandbox uses it. True if dropped."""
    if not taken.get("clean") or find(engine, name).users:
        return False
    drop(engine, name)
    return True


def settle(engine: Engine, name: str, message: str, made: bool, looked: bool | None = None) -> tuple[int | None, bool]:
    """At the end of a run: (changes, dropped). A copy this run made whose upper layer is still an
    empty directory, with no checkpoint but its first and no user, is dropped without a tools
    container (nothing was ever changed in it); any other is checkpointed (drop_if_clean).
    `looked`: what `untouched` said (while the run's sandbox was being removed)."""
    if made and (untouched(engine, name) if looked is None else looked) and not find(engine, name).users:
        drop(engine, name)
        return 0, True
    taken = checkpoint(engine, name, message)
    return taken.get("changes"), drop_if_clean(engine, name, taken)


def untouched(engine: Engine, name: str, ignoring: str = "") -> bool:
    """Whether no sandbox but `ignoring` uses the copy, v/upper is an empty directory and
    v/checkpoints/1 does not exist, seen through the archive API of one created container: the
    first bytes of the engine's tar of v/upper, which for an empty directory are its one header
    and the archive's end. Only headers are parsed, and only the first two; no file of the
    agent's is opened on the host, its content never looked at. False when it cannot tell."""
    try:
        if set(find(engine, name).users) - {ignoring}:
            return False
        with created(engine, name=name, mounts=[_volume(f"{name}-upper", "/v", True)], labels={label.COPY: name}) as ref:
            if engine.exists(ref, "/v/checkpoints/1"):
                return False
            head = engine.archive_head(ref, "/v/upper", EMPTY_DIR_LIMIT)
    except EngineError:   # the checkpoint says what is wrong
        return False
    if not head:
        return False
    try:   # a zero block ends the archive (the engine may pad it): a second member or a cut one is a change
        with tarfile.open(fileobj=io.BytesIO(head), mode="r:") as tar:
            members = tar.getmembers()
    except tarfile.TarError:
        return False
    if len(members) != 1 or not members[0].isdir() or members[0].name.rstrip("/") != "upper":
        return False
    after = head[members[0].offset_data:members[0].offset_data + 512]   # read, not just cut off: the end
    return len(after) == 512 and not any(after)


def states(engine: Engine, copies: list[Copy]) -> list[Copy]:
    """The copies with what their last checkpoint counted (v/state.json), read through one created,
    never started container for all of them (the archive API): no tools container per copy.
    A copy without the file (made by an older launcher, or incomplete) keeps changes=None."""
    upper = {v.name for v in engine.list_volumes(label.selector(label.KIND, "copy"))}
    looked = [c for c in copies if f"{c.name}-upper" in upper]
    if not looked:
        return copies
    mounts = [_volume(f"{c.name}-upper", f"/c/{i}", True) for i, c in enumerate(looked)]
    try:
        found = read_files(engine, name="sandbox-copies", mounts=mounts,
                           paths=[f"/c/{i}/state.json" for i in range(len(looked))], labels={})
    except EngineError:   # no tools image, say: `ls` still lists them, without counts
        return copies
    known = {}
    for i, copy in enumerate(looked):
        try:
            state = json.loads(found.get(f"/c/{i}/state.json") or b"null")
        except ValueError:
            state = None
        if isinstance(state, dict) and isinstance(state.get("changes"), int):
            number = state.get("checkpoint")
            known[copy.name] = replace(copy, changes=state["changes"], checkpoint=number if isinstance(number, int) else None)
    return [known.get(c.name, c) for c in copies]


def discard(engine: Engine, name: str) -> None:
    _unused(find(engine, name), "discard")
    drop(engine, name)


def drop(engine: Engine, name: str) -> None:
    """Remove whichever of the copy's volumes exist, each waited for a moment while another
    launcher's tools container holds it (tools.remove_released)."""
    views = [v.name for v in engine.list_volumes(label.selector(label.COPY, name))
             if v.labels.get(label.KIND) == "copy-view"]   # a killed diff's or apply's
    for volume in views + [f"{name}-tree"]:   # the overlays first: they hold the other two
        remove_released(engine, volume)
    overlap.each(lambda volume: remove_released(engine, volume), [f"{name}-upper", f"{name}-base"])
