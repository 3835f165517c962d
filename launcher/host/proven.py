"""When each long-lived sandbox was last proven (its start, or a re-probe when `up` attached to
it again), kept on the host where the agent cannot write: `sandbox exec` says it."""

from __future__ import annotations

import time

from launcher.host import host


def _path(name: str) -> str:
    return host.state_json_path("proven", name)


def save(name: str, checks: int, how: str) -> None:
    """Record that `name` passed `checks` probe checks now (`how`: "at its start", "on attach")."""
    host.write_state_json(_path(name), {"at": time.time(), "checks": checks, "how": how})


def last(name: str) -> dict | None:
    """The last proof of `name` on this host: {"at": epoch seconds, "checks", "how"}, or None."""
    found = host.read_state_json(_path(name))
    try:
        return {"at": float(found["at"]), "checks": int(found["checks"]), "how": str(found["how"])}
    except (ValueError, KeyError, TypeError):
        return None


def said(name: str, now: float | None = None) -> str:
    """One line on when `name` was last proven, for `sandbox exec`."""
    found = last(name)
    if found is None:
        return f"{name} has no record of a proof on this host (started by another user or launcher?)"
    ago = max(0, int((time.time() if now is None else now) - found["at"]))
    when = f"{ago} s" if ago < 120 else f"{ago // 60} min" if ago < 7200 else f"{ago // 3600} h"
    return (f"{name} was last proven {when} ago ({found['checks']} checks, {found['how']}); "
            "`sandbox up` on its workspace proves it again")


def forget(name: str) -> None:
    host.drop_state(_path(name))
