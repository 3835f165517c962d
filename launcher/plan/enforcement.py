"""What enforces a policy field or a protection: the component and mechanism, and the probe checks
that prove it. The words of `sandbox explain` and of every target's loss report."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Component(enum.Enum):
    GVISOR = "gVisor (user-space kernel)"
    NAMESPACE = "kernel namespace"
    CGROUP = "cgroup"
    SECCOMP = "seccomp"
    CAPABILITIES = "capability set"
    MOUNT = "mount flag"
    PROCESS = "process credentials"
    PROXY = "proxy"
    LAUNCHER = "launcher only"
    NOTHING = "nothing"


@dataclass(frozen=True, kw_only=True)
class Enforcement:
    mechanism: str
    component: Component
    checks: tuple[str, ...]       # probe check ids (images/probe/CONTRACT.md) that prove it
    note: str = ""
