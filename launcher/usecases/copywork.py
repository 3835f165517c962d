"""Copy mode's way back as library calls: `diff` (freeze and judge what the agent changed),
`apply` (write exactly what was shown, all or nothing, or commit it on a branch) and `discard`
(drop a copy, never silently with work the host tree lacks). Checkpoints, rewind and fork are one
call each already: launcher.copies.store and launcher.copies.fork."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from launcher.copies import apply as applying, branch as branches, fork, limits, review, store
from launcher.engine import images
from launcher.engine.engineproto import Engine
from launcher.errors import CopyConflict, NotFound, PolicyError, Problem, SandboxError
from launcher.launch import sandboxes
from launcher.values import visible


def tools_engine(engine: Engine, progress: Callable[[str], None]) -> Engine:
    """The engine with the image the copies' tools run in (built when missing)."""
    images.build(engine, images.agent_image(), progress)
    return engine


@dataclass(frozen=True, kw_only=True)
class Shown:
    """`diff`'s answer: the copy's changes at the checkpoint `apply` then writes, as review judged them."""

    copy: store.Copy
    checkpoint: int
    changes: tuple[dict, ...]
    over: tuple[Problem, ...]   # files apply would refuse for their size


def diff(engine: Engine, name: str, cap: limits.Limits = limits.Limits()) -> Shown:
    """Freeze the copy `name` into a checkpoint (reused when unchanged; marked as the one shown)
    and judge each change against its workspace's protections."""
    copy = store.find(engine, name)
    frozen = store.checkpoint(engine, name, "shown by diff", cap, reuse=True, reviewed=True)["id"]
    found = applying.judged(copy.workspace, store.changes(engine, name, patch=True, checkpoint=frozen)["changes"],
                            copy.protected, review.Allowed(), preview=True)
    too_large = {c["path"]: c["new"] for c in found if (not c["refused"] or c.get("needs"))
                 and (c["new"] or {}).get("type") == "file"}
    return Shown(copy=copy, checkpoint=frozen, changes=tuple(found), over=tuple(limits.problems(name, too_large, cap)))


@dataclass(frozen=True, kw_only=True)
class Applied:
    """`apply`'s answer. `refused`: the changes that stayed in the copy; `needing`: those of them a
    per-path yes would let through; `skipped`: those answered no (-i)."""

    copy: store.Copy
    checkpoint: int
    refused: tuple[dict, ...]
    needing: tuple[str, ...]
    skipped: tuple[str, ...]
    written: int = 0          # written to the tree (none with a branch)
    already: int = 0          # there already
    branch: str = ""
    commit: str = ""
    committed: int = 0

    @property
    def remaining(self) -> list[str]:
        return sorted(self.skipped + self.needing)


Choose = Callable[[store.Copy, object, review.Allowed], tuple[object, review.Allowed, list[str]]]


def apply(engine: Engine, name: str, *, number: int | None = None, cap: limits.Limits = limits.Limits(),
          allowed: review.Allowed = review.Allowed(), branch: str = "", message: str = "Changes made in sandbox copy",
          choose: Choose | None = None, refusals: Callable[[tuple[dict, ...]], None] = lambda refused: None) -> Applied:
    """Write the checkpoint `diff` showed last (or `number`) to the host tree, all or nothing, or
    commit it on the new `branch`. `choose` (apply -i): given every change a yes could let
    through, returns (the export without those answered no, the yeses, the paths answered no).
    `refusals` hears the changes that stay in the copy before anything is written."""
    copy = store.find(engine, name)
    number = checkpoint_to_apply(engine, name, number, cap)
    with store.exported(engine, copy, number, cap, None if choose else allowed) as received:
        skipped: list[str] = []
        if choose:
            received, allowed, skipped = choose(copy, received, allowed)
        exported = applying.reviewed(copy.workspace, received, copy.protected, allowed)
        refused = tuple(c for c in exported.changes if c["refused"])
        refusals(refused)
        # work a per-path yes would let through stays in the copy (as diff judges them: a yes that
        # could not be honoured, a link over a directory, is no work left)
        could = {c["path"] for c in applying.judged(copy.workspace, list(exported.changes), copy.protected,
                                                    review.Allowed(), preview=True) if c["needs"]}
        done = Applied(copy=copy, checkpoint=number, refused=refused, skipped=tuple(skipped),
                       needing=tuple(c["path"] for c in refused if c["path"] in could))
        if branch:
            commit = branches.commit_to_branch(copy.workspace, exported, branch, message)
            return replace(done, branch=branch, commit=commit, committed=len(exported.applicable))
        written, already = forks_told(engine, name, lambda: applying.apply_to_tree(copy.workspace, exported))
    return replace(done, written=written, already=already)


def checkpoint_to_apply(engine: Engine, name: str, number: int | None, cap: limits.Limits) -> int:
    """The checkpoint apply writes: N if given, else the one `diff` showed last as long as the copy
    is still that tree (a rewind, or any change since, asks for a new diff: what was reviewed is
    no longer what the copy holds), else the copy as it is now, frozen into a checkpoint."""
    listed = store.checkpoints(engine, name)
    if number is not None:
        if number not in [c["id"] for c in listed]:
            raise NotFound(f"{name} has no checkpoint {number}; it has {', '.join(str(c['id']) for c in listed)}")
        return number
    shown = next((c for c in listed if c.get("reviewed")), None)
    now = store.checkpoint(engine, name, "frozen by apply", cap, reuse=True)
    if shown is None:
        return now["id"]
    if now.get("digest") != shown.get("digest"):
        raise PolicyError([Problem(
            file=f"copy {name}", path="checkpoint", expected=f"the copy as `sandbox diff` showed it (checkpoint {shown['id']})",
            found=f"it changed since (a rewind, or the agent's work): it is checkpoint {now['id']} now; nothing was written",
            hint=f"`sandbox diff {name}` to review what it holds now, then apply; or `sandbox apply {name} "
                 f"--checkpoint {shown['id']}` to write what was reviewed")])
    return shown["id"]


def forks_told(engine: Engine, name: str, write):
    """write(); a conflict of a fork says where the work it shares with its origin can come from."""
    try:
        return write()
    except CopyConflict as exc:
        made = fork.origin(engine, name)
        if not made or not exc.conflicts:
            raise
        of = made.rpartition("@")[0]
        raise CopyConflict(f"{exc}\n    {name} is a fork of {made} (`sandbox fork`): an `apply` of {of}, or of "
                           f"another fork of it, may have written these paths\n    hint: `sandbox diff {name}` and "
                           f"choose, or `sandbox apply {name} --to BRANCH` to commit its changes on a new branch "
                           "and merge that with git", exc.conflicts) from None


@dataclass(frozen=True, kw_only=True)
class Discarded:
    """`discard`'s answer: whether the copy went, and what it held that the host tree lacks
    (`unapplied`; None: the copy could not be read, `why` says so)."""

    copy: store.Copy
    dropped: bool
    unapplied: int | None
    why: str = ""

    @property
    def lost(self) -> str:
        if self.why:
            return f"changes that could not be counted ({self.why})"
        return f"{self.unapplied} changes not applied to {self.copy.workspace}" if self.unapplied else ""

    @property
    def what(self) -> str:
        return self.copy.name + (f" and the {self.lost}" if self.lost else
                                 " (nothing in it that apply could still write to the host tree)")


def discard(engine: Engine, name: str, *, yes: bool = False, dry_run: bool = False,
            confirm: Callable[[str], bool] | None = None) -> Discarded:
    """Drop the copy `name` and its checkpoints (the host tree is not touched): at once with `yes`
    or when nothing would be lost; else after `confirm(question)` says yes (no: kept); with no one
    to ask, refused (PolicyError) while it holds work the host tree lacks. `dry_run`: drop nothing."""
    copy = store.find(engine, name)
    try:
        held = Discarded(copy=copy, dropped=False, unapplied=sandboxes.unapplied(engine, copy))
    except (SandboxError, OSError) as exc:   # a broken copy can still be dropped
        held = Discarded(copy=copy, dropped=False, unapplied=None,
                         why=visible((str(exc).strip().splitlines() or [type(exc).__name__])[0], keep_lines=False))
    if dry_run:
        return held
    if confirm is not None and not yes:
        if not confirm(f"Discard the copy {held.what}?"):
            return held
    elif held.lost and not yes:
        raise PolicyError([Problem(file="command line", path="--yes", expected=f"a yes to drop {held.lost}",
                                   found="no terminal to ask on", hint=f"`sandbox apply {name}` first, or "
                                   f"`sandbox discard {name} --yes` to lose them; nothing was dropped")])
    store.discard(engine, name)
    return replace(held, dropped=True)
