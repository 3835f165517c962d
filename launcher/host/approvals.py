"""The approvals of repository policies on this machine (the trust store): list, record and
revoke them, each change under the store's lock so that no launcher's approval overwrites another."""

from __future__ import annotations

from datetime import datetime, timezone

from launcher.errors import PolicyError, Problem
from launcher.host import host
from launcher.policy import trust


def listed() -> tuple[str, list[trust.Approval]]:
    """(the store's path, its approvals by workspace)."""
    store_path, text = host.read_trust_store()
    return store_path, [a for _, a in sorted(trust.parse_store(text, store_path).items())]


def previous(workspace: str) -> trust.Approval | None:
    store_path, text = host.read_trust_store()
    return trust.parse_store(text, store_path).get(workspace)


def record(workspace: str, data: bytes) -> str:
    """Approve these bytes as `workspace`'s repository policy; the store's path."""
    store_path = host.trust_store_path()
    where = trust.location_problem(store_path, workspace)
    if where:
        raise PolicyError([where])
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # Re-read under the lock: another launcher may have approved something meanwhile.
    host.update_trust_store(lambda current: trust.dump_store(
        trust.approve(trust.parse_store(current, store_path), workspace, data, now)))
    return store_path


def revoke(workspace: str) -> trust.Approval:
    """Remove `workspace`'s approval; the one removed. PolicyError when there is none."""
    store_path = host.trust_store_path()
    removed: list[trust.Approval] = []

    def change(current: str) -> str:
        store = trust.parse_store(current, store_path)
        if workspace in store:
            removed.append(store.pop(workspace))
        return trust.dump_store(store)

    if previous(workspace) is not None:   # never create the store only to find nothing in it
        host.update_trust_store(change)
    if not removed:
        raise PolicyError([Problem(file=store_path, path=workspace, expected="an approval of this workspace's .sandbox.yaml",
                                   found="none recorded", hint="`sandbox trust list` shows the approved workspaces")])
    return removed[0]
