"""`sandbox apply`'s steps before anything is written: the checkpoint it writes, the yes or no per
path of `apply -i`, and what a fork's conflict says. The command itself is in copies.py."""

from __future__ import annotations


def forks_told(eng, name: str, write):
    """write(); a conflict of a fork says where the work it shares with its origin can come from."""
    from launcher.copies import fork
    from launcher.errors import CopyConflict

    try:
        return write()
    except CopyConflict as exc:
        made = fork.origin(eng, name)
        if not made or not exc.conflicts:
            raise
        of = made.rpartition("@")[0]
        raise CopyConflict(f"{exc}\n    {name} is a fork of {made} (`sandbox fork`): an `apply` of {of}, or of "
                           f"another fork of it, may have written these paths\n    hint: `sandbox diff {name}` and "
                           f"choose, or `sandbox apply {name} --to BRANCH` to commit its changes on a new branch "
                           "and merge that with git", exc.conflicts) from None


def ask(copy, received, allowed):
    """apply -i: a yes or no per path apply would write or a yes would let through (as diff judges
    them), asked on the terminal before anything is written; q leaves that path and the rest in the
    copy. Ctrl-C or the end of input (Ctrl-D) writes nothing. (the export without the paths
    answered no, the yeses given with those answered yes, the paths answered no.)"""
    from dataclasses import replace

    from launcher.cli.output import marker, question, status
    from launcher.copies import apply, review
    from launcher.errors import PolicyError, Problem

    candidates = review.asked(apply.judged(copy.workspace, list(received.changes), copy.protected, allowed,
                                           preview=True))
    if candidates:
        status(f"{len(candidates)} changes to answer (y: write it, n: leave it in the copy, q: leave it and the "
               "rest; Ctrl-C or Ctrl-D: write nothing)")
    mark, yes, no = marker(err=True), [], []
    for index, change in enumerate(candidates):
        try:
            answer = question(f"{review.stat_line(change, mark)}\n  write it?", "ynq")
        except KeyboardInterrupt:
            status("interrupted: nothing was written")
            raise
        if answer is None:
            raise PolicyError([Problem(file="command line", path="-i", expected=f"an answer for {len(candidates)} "
                                       "changes", found=f"the end of input at change {index + 1}; nothing was written",
                                       hint="answer q to write what was answered yes and leave the rest")])
        if answer == "q":
            no += candidates[index:]
            status(f"q: this change and the {len(candidates) - index - 1} after it stay in the copy")
            break
        (yes if answer == "y" else no).append(change)
    skipped = {c["path"] for c in no}
    kept = replace(received, changes=tuple(c for c in received.changes if c["path"] not in skipped))
    return kept, allowed.adding(yes), sorted(skipped)


def to_apply(eng, name: str, number: int | None, cap) -> int:
    """The checkpoint apply writes: N if given, else the one `diff` showed last as long as the copy
    is still that tree (a rewind, or any change since, asks for a new diff: what was reviewed is
    no longer what the copy holds), else the copy as it is now, frozen into a checkpoint."""
    from launcher.copies import store
    from launcher.errors import NotFound, PolicyError, Problem

    listed = store.checkpoints(eng, name)
    if number is not None:
        if number not in [c["id"] for c in listed]:
            raise NotFound(f"{name} has no checkpoint {number}; it has {', '.join(str(c['id']) for c in listed)}")
        return number
    shown = next((c for c in listed if c.get("reviewed")), None)
    now = store.checkpoint(eng, name, "frozen by apply", cap, reuse=True)
    if shown is None:
        return now["id"]
    if now.get("digest") != shown.get("digest"):
        raise PolicyError([Problem(
            file=f"copy {name}", path="checkpoint", expected=f"the copy as `sandbox diff` showed it (checkpoint {shown['id']})",
            found=f"it changed since (a rewind, or the agent's work): it is checkpoint {now['id']} now; nothing was written",
            hint=f"`sandbox diff {name}` to review what it holds now, then apply; or `sandbox apply {name} "
                 f"--checkpoint {shown['id']}` to write what was reviewed")])
    return shown["id"]
