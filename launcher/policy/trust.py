"""Trust on first use for a repository's `.sandbox.yaml`: approvals keyed by the workspace's real
path hold the SHA-256 and a copy of the approved bytes, and live outside every workspace."""

from __future__ import annotations

import enum
import hashlib
import json
import posixpath
import re
import shlex
from dataclasses import asdict, dataclass

from launcher.errors import PolicyError, Problem
from launcher.values import visible


@dataclass(frozen=True, kw_only=True)
class Approval:
    workspace: str
    sha256: str
    content: str          # the approved text, to show a diff when it changes
    approved_at: str


class Status(enum.Enum):
    APPROVED = "approved"      # this exact content was approved before
    PINNED = "pinned"          # --trust-repo-policy names this exact content
    NEW = "new"                # never approved for this workspace
    CHANGED = "changed"        # other content was approved; this is different


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalise_pin(text: str) -> str | None:
    """The hex digest from `--trust-repo-policy` (an optional `sha256:` prefix), or None if malformed."""
    digest = text.strip().lower().removeprefix("sha256:")
    return digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None


def parse_store(text: str, file: str) -> dict[str, Approval]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
        return {ws: Approval(**entry) for ws, entry in data["approvals"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise PolicyError([Problem(file=file, path="", expected="the trust store written by sandbox",
                                   found="unreadable content",
                                   hint="remove the file; every repository policy will be asked about again")]) from None


def dump_store(store: dict[str, Approval]) -> str:
    return json.dumps({"version": 1, "approvals": {ws: asdict(a) for ws, a in sorted(store.items())}}, indent=2) + "\n"


def approve(store: dict[str, Approval], workspace: str, data: bytes, now: str) -> dict[str, Approval]:
    return {**store, workspace: Approval(workspace=workspace, sha256=sha256(data), content=data.decode("utf-8"),
                                         approved_at=now)}


def status(store: dict[str, Approval], workspace: str, data: bytes, pin: str | None) -> Status:
    digest, previous = sha256(data), store.get(workspace)
    if pin is not None and pin == digest:
        return Status.PINNED
    if previous and previous.sha256 == digest:
        return Status.APPROVED
    return Status.CHANGED if previous else Status.NEW


def location_problem(store_path: str, workspace: str) -> Problem | None:
    """Approvals are never stored inside the workspace: the repository could write its own."""
    if store_path == workspace or store_path.startswith(workspace.rstrip("/") + "/"):
        return Problem(file=store_path, path="", expected="a trust store outside the workspace",
                       found=f"it is inside {workspace}", hint="set XDG_STATE_HOME to a directory outside the repository")
    return None


def review_text(path: str, data: bytes, previous: Approval | None, effect: str) -> str:
    """What the person sees before approving: the whole file, or the diff against the last approval."""
    text = data.decode("utf-8")
    head = [f"The repository policy {path} (sha256 {sha256(data)})"]
    if previous is None:
        head[0] += (" has not been approved on this machine. Its policy fields can only narrow the policy"
                    + ("; its defaults: choose defaults (see below)" if effect.count("its defaults:") else "") + ". Content:")
        body = [f"  | {line}" for line in text.splitlines()]
    else:
        head[0] += f" changed since you approved it ({previous.approved_at}). Changes:"
        import difflib  # here: only a changed file's diff needs it
        body = ["  " + line.rstrip("\n") for line in difflib.unified_diff(
            previous.content.splitlines(True), text.splitlines(True), "approved", "now", n=2)]
    return visible("\n".join(head + body + ["", "Applying it changes:", effect]))


def approve_command(path: str) -> str:
    return f"sandbox trust approve -w {shlex.quote(posixpath.dirname(path) or '.')}"


def refusal(path: str, data: bytes, state: Status, pin: str | None, flag: str = "--trust-repo-policy") -> PolicyError:
    digest = sha256(data)
    if pin is not None:
        return PolicyError([Problem(
            file=path, path="", expected=f"content with sha256 {pin} ({flag})", found=f"sha256 {digest}",
            hint="the file is not the one you pinned: review it, then pin the new digest")])
    what = "changed since it was approved" if state is Status.CHANGED else "not approved on this machine"
    return PolicyError([Problem(
        file=path, path="", expected="an approved repository policy", found=f"{what} (sha256 {digest})",
        hint=("non-interactive runs never ask: review it (sandbox check), then pass --trust-repo-policy "
              f"{digest}, approve it (`{approve_command(path)}`), or pass --ignore-repo-policy"))])


def declined(path: str) -> PolicyError:
    return PolicyError([Problem(file=path, path="", expected="an approved repository policy", found="not approved",
                                hint="nothing was applied or recorded; --ignore-repo-policy runs without it")])
