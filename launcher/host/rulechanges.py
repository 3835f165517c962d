"""The allow rules `sandbox egress` changed in a running `up` sandbox, kept on the host where the
agent cannot write (a container's labels cannot change once it runs): the rules added (widening
the base, as `up --allow` does) and removed (after every layer), the effective digest now in force,
and each change with its time and reason. `up` attaching again compiles with them, so the probe
proves the rules in force, not the ones the sandbox started with."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.host import host


@dataclass(frozen=True, kw_only=True)
class RuleChanges:
    container: str                 # the container's id: a later sandbox of the same name has none
    added: tuple = ()              # allow entries (a host string, or a mapping with http:), as --allow takes them
    removed: tuple[str, ...] = ()  # HOST or HOST:PORT: rules of the effective policy taken out
    digest: str = ""               # the effective digest of the policy now in force
    changes: tuple[dict, ...] = ()  # {"time", "action" (allow|deny), "rule", "reason"}, oldest first


def _path(name: str) -> str:
    return host.state_json_path("egress-rules", name)


def save(name: str, changes: RuleChanges) -> None:
    host.write_state_json(_path(name), {"container": changes.container, "added": list(changes.added),
                                        "removed": list(changes.removed), "digest": changes.digest,
                                        "changes": list(changes.changes)})


def load(name: str, container: str) -> RuleChanges | None:
    """The changes made to this container of `name`, or None: none, or they were an earlier container's."""
    found = host.read_state_json(_path(name))
    try:
        if found["container"] != container:
            return None
        return RuleChanges(container=container, added=tuple(found["added"]), removed=tuple(found["removed"]),
                           digest=str(found["digest"]), changes=tuple(found["changes"]))
    except (ValueError, KeyError, TypeError):
        return None


def locked(name: str):
    """Held from reading the changes to saving them: two `sandbox egress` on one sandbox take turns,
    so neither's change is lost."""
    return host.locked(_path(name) + ".lock")


def forget(name: str) -> None:
    host.drop_state(_path(name))
    host.drop_state(_path(name) + ".lock")
