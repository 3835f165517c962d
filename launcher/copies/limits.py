"""What the way back may cost the host: the size of one file `apply` carries, of all of them, and of
the disk a copy's changes take when a checkpoint copies them. File sizes are apparent sizes (a
sparse file counts its length, though it travels and lands sparse); the changes' size is on disk."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import PolicyError, Problem
from launcher.values import visible

HINT = ("raise the limit (`--max-file-size`, `--max-copy-size` of diff and apply), or remove the file in the copy "
        "and keep it out of the next runs (workspace.exclude)")


@dataclass(frozen=True, kw_only=True)
class Limits:
    file_bytes: int = 1 << 30      # one file apply writes (apparent size)
    copy_bytes: int = 8 << 30      # all files apply writes together; the copy's changes on disk at a checkpoint


def human(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{count} bytes"


def problems(name: str, files: dict[str, dict], limits: Limits) -> list[Problem]:
    """What `apply` refuses of `files` (path -> the new file's state, as the change list has it)."""
    found = [Problem(file=f"copy {name}", path=visible(path, keep_lines=False),
                     expected=f"a file of at most {human(limits.file_bytes)} (--max-file-size; apparent size)",
                     found=f"{human(new['size'])} ({new['size']} bytes)", hint=HINT)
             for path, new in sorted(files.items()) if new["size"] > limits.file_bytes]
    total = sum(new["size"] for new in files.values())
    if total > limits.copy_bytes:
        found.append(Problem(file=f"copy {name}", path="(all files apply writes)",
                             expected=f"at most {human(limits.copy_bytes)} together (--max-copy-size; apparent sizes)",
                             found=f"{human(total)} in {len(files)} files", hint=HINT))
    return found


def check(name: str, files: dict[str, dict], limits: Limits) -> None:
    """Raise PolicyError (nothing is written) when a file or all of them are over the limits."""
    found = problems(name, files, limits)
    if found:
        raise PolicyError(found)


def upper_refused(name: str, usage: int, limits: Limits) -> PolicyError:
    return PolicyError([Problem(
        file=f"copy {name}", path="checkpoint", expected=f"changes of at most {human(limits.copy_bytes)} on disk "
        "(--max-copy-size: a checkpoint copies them)", found=f"{human(usage)} ({usage} bytes); no checkpoint was taken, "
        "the changes stay in the copy", hint="the same command with --max-copy-size SIZE, a larger SIZE (`sandbox "
        f"checkpoint {name} --max-copy-size SIZE` after a run), or `sandbox discard {name}`")])
