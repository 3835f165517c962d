"""Why the engine did not answer, in words a person can act on: the address tried (DOCKER_HOST's or
the default socket), what the socket said under the SDK's wrappers, and what to do about it."""

from __future__ import annotations

import grp
import os
import pwd
import socket
from contextlib import suppress

from launcher.errors import EngineError
from launcher.host import host

START = "start it (for example `sudo dockerd &` or `systemctl start docker`) and check `docker info`"
# The socket's own errors that mean nobody is there, as said in the message.
_NOBODY = ((FileNotFoundError, "no such socket file"), (ConnectionRefusedError, "connection refused"),
           (socket.gaierror, "the host name does not resolve"), (TimeoutError, "no answer in time"))


def cause(exc: BaseException) -> BaseException:
    """The socket's own error under the SDK's, requests' and urllib3's wrappers (their causes,
    contexts and `reason`s), else `exc` itself."""
    seen, todo = set(), [exc]
    while todo:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (PermissionError, *(kind for kind, _ in _NOBODY))):
            return item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None)]
    return exc


def unreachable(exc: BaseException, default: str) -> EngineError:
    """`exc`, raised connecting to the engine (DOCKER_HOST, else the socket `default`), as an EngineError."""
    address, named = host.engine_address(default)
    found = cause(exc)
    reason = next((words for kind, words in _NOBODY if isinstance(found, kind)), "")
    if isinstance(found, PermissionError) and address.startswith("unix://"):
        said, hint = _denied(address[len("unix://"):], "DOCKER_HOST" if named else "the default socket")
    elif reason and named:
        said = f": DOCKER_HOST is set to {address} and nothing answers there ({reason})"
        hint = f"unset DOCKER_HOST to use the default socket {default}, or start the engine that should answer there"
    elif reason:
        said, hint = f": nothing answers at {default} (the default socket; DOCKER_HOST is unset): {reason}", START
    else:
        said, hint = (f" at DOCKER_HOST={address}" if named else "") + f" ({exc.__class__.__name__}: {exc})", START
    return EngineError(f"cannot reach the Docker engine{said}", hint)


def _denied(path: str, source: str) -> tuple[str, str]:
    """Permission denied on the socket: whose it is, and the ways in."""
    user, join, whose = _name(pwd.getpwuid, os.geteuid()), "", ""
    with suppress(OSError):   # else a directory on the way that this user may not search
        info = os.stat(path)
        group = _name(grp.getgrgid, info.st_gid)
        whose = f", owner {_name(pwd.getpwuid, info.st_uid)}, group {group}, mode {info.st_mode & 0o7777:04o}"
        # Offered only for a group that is not root's and may use the socket; it is as good as root.
        if info.st_gid != 0 and info.st_mode & 0o060 == 0o060:
            join = f"add {user} to group {group} (`sudo usermod -aG {group} {user}`, then log in again; " \
                   "that group is as good as root), "
    return (f": permission denied on its socket {path} ({source}{whose}); user {user} may not use it",
            f"{join}run sandbox with sudo, or use a rootless engine (DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock)")


def _name(lookup, number: int) -> str:
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)
