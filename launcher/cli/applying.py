"""`sandbox apply -i`: the yes or no per path, asked on the terminal before anything is written
(launcher.usecases.copywork.apply's `choose`). The command itself is in copies.py."""

from __future__ import annotations


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
