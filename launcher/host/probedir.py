"""The probe's files in a directory of the launcher's own on this host, bound read-only into a
sandbox instead of the shared probe volume when the engine is a daemon on this host (it then
mounts this very directory): the launcher reads them itself, by digest, before every start
(launcher/engine/probefiles.py), which costs a few ms where the engine's archive API costs ~50.
Anyone with the engine can write the shared volume; this directory is the user's, like the
launcher's own files, and is checked every time all the same."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import struct

from launcher.host import host

# The engine's own daemons: a unix socket answered by one of them (SO_PEERCRED's pid) is an engine
# that resolves a bind's source on this host's filesystem. A socket forwarded from a machine or a
# VM (ssh, socat, gvproxy) or handed over by systemd answers as another process: the shared volume.
ENGINE_DAEMONS = frozenset({"dockerd", "podman"})


def path(tag: str) -> str:
    """$XDG_STATE_HOME/sandbox/probe/TAG (the probe image's tag: its context's digest), real."""
    return os.path.join(os.path.realpath(host.state_dir()), "probe", tag)


def remove_stale(current: str) -> list[str]:
    """Remove the probe directories of other probe versions than `current` (a sandbox still bound
    to one keeps its files: the mount holds them), and half-written ones whose writer is gone.
    Returns what it removed, as "probe files TAG"."""
    top = os.path.dirname(path(current))
    try:
        names = sorted(os.listdir(top))
    except OSError:   # none yet
        return []
    removed = []
    for name in names:
        if name.endswith(".tmp"):   # fill()'s TAG.PID.HEX.tmp
            parts = name.split(".")
            if len(parts) == 4 and parts[1].isdigit() and host.pid_alive(int(parts[1])):
                continue
        elif name == current:
            continue
        _remove(os.path.join(top, name))
        removed.append(f"probe files {name}")
    return removed


def engine_is_local(socket_path: str | None) -> bool:
    """Whether the engine at this unix socket is an engine daemon on this host (no socket: no)."""
    if not socket_path:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(socket_path)
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        if pid <= 0:   # a peer in another pid namespace
            return False
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() in ENGINE_DAEMONS
    except OSError:
        return False


def read(where: str, modes: dict[str, int], dir_mode: int) -> tuple[list[str], dict[str, bytes] | None]:
    """(what is wrong, name -> content): the directory must be a real directory of the user's of
    mode `dir_mode` holding exactly `modes`' files, each a regular file of the user's of its mode
    (None: the directory itself is not that, and nothing was read)."""
    uid = os.geteuid()
    try:
        top = os.lstat(where)
    except FileNotFoundError:
        return [f"{where} is missing"], None
    except OSError as exc:
        return [f"{where} cannot be read: {exc.strerror}"], None
    if not stat.S_ISDIR(top.st_mode) or top.st_uid != uid or stat.S_IMODE(top.st_mode) != dir_mode:
        return [f"{where} is not a directory of this user's of mode {dir_mode:o}"], None
    said, found = [], {}
    try:
        names = sorted(os.listdir(where))
    except OSError as exc:
        return [f"{where} cannot be listed: {exc.strerror}"], None
    said += [f"the probe directory holds {n!r}, which the launcher did not put there" for n in names if n not in modes]
    for name, mode in modes.items():
        if name not in names:
            continue   # the caller says what is missing
        try:
            fd = os.open(os.path.join(where, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            said.append(f"probe file {name} cannot be opened: {exc.strerror}")
            continue
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or stat.S_IMODE(info.st_mode) != mode:
                said.append(f"probe file {name} is not a regular file of this user's of mode {mode:o}")
                continue
            found[name] = file.read()
    return said, found


def fill(where: str, files: dict[str, tuple[bytes, int]], dir_mode: int) -> None:
    """Make `where` hold exactly `files` (name -> (content, mode)), whole or not at all: written in a
    directory beside it and renamed into place; what was there before is removed."""
    parent = os.path.dirname(where)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    temp = f"{where}.{os.getpid()}.{os.urandom(3).hex()}.tmp"
    os.mkdir(temp, 0o700)
    try:
        for name, (data, mode) in files.items():
            with open(os.open(os.path.join(temp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(data)
            os.chmod(os.path.join(temp, name), mode)
        os.chmod(temp, dir_mode)
        if os.path.lexists(where):
            _remove(where)
        os.rename(temp, where)
    except BaseException:
        _remove(temp)
        raise


def _remove(where: str) -> None:
    """Remove a directory of ours whose mode keeps it from being changed (or anything else there)."""
    if os.path.isdir(where) and not os.path.islink(where):
        os.chmod(where, 0o700)
        shutil.rmtree(where, ignore_errors=True)
    elif os.path.lexists(where):
        os.unlink(where)
