"""Host-side refusals: the host paths no sandbox may mount (sockets, runtime and credential paths,
`/` or $HOME, kernel and device filesystems). Pure, over the host facts."""

from __future__ import annotations

from launcher.errors import Problem
from launcher.host import HostFacts, PathFact

_REFUSED_SOURCES = ("/proc", "/sys", "/dev", "/boot")


def _related(a: str, b: str) -> bool:
    """True when one path is the other or contains it."""
    return a == b or a == "/" or b == "/" or a.startswith(b + "/") or b.startswith(a + "/")


def refuse_source(fact: PathFact, host: HostFacts, where: str, file: str) -> Problem | None:
    """Why a host path may not be mounted into a sandbox, or None."""
    def problem(found: str, hint: str) -> Problem:
        return Problem(file=file, path=where, expected="a host path safe to share", found=found, hint=hint)

    real = fact.real
    if fact.kind == "missing":
        return Problem(file=file, path=where, expected="an existing host path",
                       found=f"{real} does not exist", hint="create it first, or fix the path")
    if fact.kind == "socket":
        return problem(f"{real} is a socket", "a socket reaches a service outside the sandbox")
    if real == "/":
        return problem("/ (the whole host)", "mount only the directories the agent needs")
    if real == host.home:
        return problem(f"{real} (your home directory)", "mount a project directory instead")
    for path in host.runtime_sockets:
        if _related(real, path):
            return problem(f"{real}, which is or holds the container runtime path {path}",
                           "a container runtime socket in the sandbox is root on the host")
    for path in host.credential_paths:
        if _related(real, path):
            return problem(f"{real}, which is or holds the credential location {path}",
                           "credentials never enter the sandbox")
    for path in _REFUSED_SOURCES:
        if _related(real, path) and real != "/":
            return problem(f"{real} (kernel or device filesystem)", "devices cannot be mounted")
    if fact.sockets:
        return problem(f"{real}, which holds the socket {fact.sockets[0]}",
                       "a socket reaches a service outside the sandbox; remove it or mount a subdirectory")
    return None
