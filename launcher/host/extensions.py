"""Each running session's end as `sandbox extend` moved it, kept on the host where the agent cannot
write, for `sandbox ls` (a container's labels cannot change once it runs). The running sandbox
learns its new end from a root-owned file inside (lifetime.END_FILE), not from here."""

from __future__ import annotations


from launcher.host import host


def _path(name: str) -> str:
    return host.state_json_path("sessions", name)


def save(name: str, container: str, end: int) -> None:
    """Record that the container `container` (its id) of the sandbox `name` now ends at `end`."""
    host.write_state_json(_path(name), {"container": container, "end": end})


def end_of(name: str, container: str) -> int | None:
    """The end `sandbox extend` gave this container of `name` (epoch seconds), or None: never
    extended, or the record is of an earlier container of the same name."""
    found = host.read_state_json(_path(name))
    try:
        return int(found["end"]) if found["container"] == container else None
    except (ValueError, KeyError, TypeError):
        return None


def forget(name: str) -> None:
    host.drop_state(_path(name))
