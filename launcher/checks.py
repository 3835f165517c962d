"""The probe's checks, in the order the probe reports them: one list that the probe script, the
explain table, the README and the tamper matrix are each tested against."""

from __future__ import annotations

# Every mode, in order; the proxy-only checks are reported after net.routes.
ALWAYS = (
    "identity.uid", "identity.gid", "identity.groups", "caps.process", "caps.bnd", "nnp", "seccomp.mode",
    "seccomp.unshare", "fs.root_ro", "fs.rofs", "fs.sysfs_ro", "mounts.inventory", "mounts.writable",
    "mounts.workspace", "fs.protected", "sockets.mounts", "sockets.runtime", "env.secrets", "env.runtime",
    "creds.files", "net.interfaces", "net.routes",
)
PROXY_ONLY = ("egress.proxy", "egress.denied", "egress.direct", "egress.dns")
LAST = ("limits.pids", "limits.memory", "proc.pid1", "dev.nodes")


def for_mode(mode: str) -> tuple[str, ...]:
    """The ids the probe reports for a sandbox in network mode `mode`, in order."""
    return ALWAYS + (PROXY_ONLY if mode == "proxy" else ()) + LAST


ALL = ALWAYS + PROXY_ONLY + LAST
