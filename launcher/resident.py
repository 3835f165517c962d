"""The resident helper's ground rules, shared by the `sandbox` client (launcher/__main__.py), the
helper itself (launcher/cli/helper.py) and `sandbox doctor`: where its socket is, who may answer
and ask there, which build it is, and the few messages they exchange. Standard library only: the
client imports this before anything else, on every command.

The helper saves a command the interpreter's start and the launcher's imports, nothing else: it
forks per request, and the child runs the same command with the client's own arguments, working
directory, environment and descriptors (the whole pipeline and the probe, every time).
Nothing here reads the environment: the callers pass what they read. Only what an absent helper
needs is imported at the top (os, stat, sys: already loaded at the interpreter's start); the rest
when a helper is there, and the client's side only modules written in C (`_socket`, not `socket`:
7 ms; its own request form, not `json`: 8 ms with `re`; sha256 without `hashlib`: 3 ms)."""

from __future__ import annotations

import os
import stat
import sys

SOCKET = "helper.sock"
# client -> helper: the request (a length and its fields, the descriptors with it), then "S<signal>\n"
# lines; helper -> client: "H<pid> <build>\n" first, then "X<code>\n" once the command ended, or
# "R<why>\n" before it began: the client runs the command in-process instead.
LIMIT = 8 << 20   # bytes of a request at most (an environment and argv)
FORM = "sandbox-request-2"   # the request's first field: a helper refuses another form (an older client's)


class Unusable(Exception):
    """The helper cannot take this command: the client runs it in-process."""


def runtime_dir(xdg_runtime_dir: str | None, uid: int) -> str:
    """$XDG_RUNTIME_DIR/sandbox (the user's, by the session manager), else /tmp/sandbox-helper-UID."""
    if xdg_runtime_dir and os.path.isabs(xdg_runtime_dir):
        return os.path.join(xdg_runtime_dir, "sandbox")
    return f"/tmp/sandbox-helper-{uid}"


def checked_dir(where: str, uid: int) -> str:
    """`where` if it is a real directory of `uid`'s that no one else may enter (lstat: no symlink)."""
    try:
        found = os.lstat(where)
    except FileNotFoundError:
        raise Unusable(f"{where} does not exist") from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid or found.st_mode & 0o077:
        raise Unusable(f"{where} is not a directory of uid {uid}'s of mode 700")
    return where


def peer(sock) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a unix socket (SO_PEERCRED)."""
    import _socket

    found = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return tuple(int.from_bytes(found[at:at + 4], sys.byteorder, signed=True) for at in (0, 4, 8))


def connect(where: str, uid: int, timeout: float = 2.0):
    """A connection to the helper in `where` (checked_dir) answered by a process of `uid`, and its pid.
    The socket is `_socket`'s (no context manager: close it)."""
    path = os.path.join(checked_dir(where, uid), SOCKET)
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        raise Unusable("no helper is running") from None
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != uid:
        raise Unusable(f"{path} is not a socket of uid {uid}'s")
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        pid, their_uid, _ = peer(sock)
        if their_uid != uid:
            raise Unusable(f"{path} is answered by uid {their_uid}, not {uid}")
    except OSError as exc:
        sock.close()
        raise Unusable(f"{path} does not answer: {exc.strerror or exc}") from None
    except Unusable:
        sock.close()
        raise
    return sock, pid


def _sha256():
    try:
        from _sha2 import sha256   # Python 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:   # an interpreter built without them
            from hashlib import sha256
    return sha256


def build(version: str) -> str:
    """This copy's build: the version, the interpreter, and each file of the installed package
    (path, size, modification time; compiled code beside it left out), as a short digest. A helper
    of another build is stale: the client does not use it."""
    top = os.path.dirname(os.path.abspath(__file__))
    # the interpreter by what it is (the same one is `python`, `python3` and the console script's)
    digest = _sha256()(f"{version}\0{os.path.realpath(sys.executable)}\0{sys.prefix}\0{sys.version}\0{top}".encode())
    folders = [top]
    while folders:
        with os.scandir(folders.pop()) as found:
            for entry in sorted(found, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        folders.append(entry.path)
                elif not entry.name.endswith((".pyc", ".tmp")):
                    info = entry.stat(follow_symlinks=False)
                    digest.update(f"{entry.path[len(top):]}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return f"{version}+{digest.hexdigest()[:16]}"


def read_line(sock, buffer: bytearray) -> bytes:
    """The next line from the socket (without its newline); b"" at its end."""
    while b"\n" not in buffer:
        chunk = sock.recv(4096)
        if not chunk:
            return b""
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def hello_line(pid: int, build: str) -> bytes:
    return f"H{pid} {build}\n".encode()


def hello(sock, buffer: bytearray) -> dict:
    """The helper's first word: {"pid", "build"} (an older helper's, in JSON: a build of its own)."""
    line = read_line(sock, buffer)
    if not line.startswith(b"H"):
        raise Unusable("the helper did not say hello")
    pid, _, said = line[1:].decode(errors="replace").partition(" ")
    if not pid.isdigit():
        return {"pid": 0, "build": "(an older build)"}
    return {"pid": int(pid), "build": said}


def send_request(sock, request: dict, fds: list[int]) -> None:
    import _socket

    data = encode_request(request)
    sock.sendmsg([len(data).to_bytes(4, "big") + data],
                 [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])


def encode_request(request: dict) -> bytes:
    """The request's fields separated by NULs (no argument, variable or path holds one), each
    string as the bytes it came as (os.fsencode: an undecodable byte of the environment is kept)."""
    limits = " ".join(f"{name}={soft},{hard}" for name, (soft, hard) in request["limits"].items())
    fields = [FORM, repr(float(request["started"])), str(request["umask"]), str(request["gid"]),
              " ".join(map(str, request["groups"])), limits, request["cwd"], str(len(request["argv"])),
              *request["argv"], *(f"{name}={value}" for name, value in request["env"].items())]
    return b"\0".join(map(os.fsencode, fields))


def decode_request(data: bytes) -> dict:
    parts = [os.fsdecode(part) for part in data.split(b"\0")]
    if len(parts) < 8 or parts[0] != FORM:
        raise Unusable("a request of another form (a client of another build)")
    try:
        count = int(parts[7])
        request = {
            "started": float(parts[1]), "umask": int(parts[2]), "gid": int(parts[3]),
            "groups": [int(group) for group in parts[4].split()],
            "limits": {name: [int(soft), int(hard)] for name, _, pair in (item.partition("=") for item in parts[5].split())
                       for soft, hard in [pair.split(",")]},
            "cwd": parts[6], "argv": parts[8:8 + count],
            "env": dict(entry.split("=", 1) for entry in parts[8 + count:])}
    except ValueError:
        raise Unusable("a malformed request") from None
    if count < 0 or len(request["argv"]) != count:
        raise Unusable("a malformed request")
    return request


def receive_request(sock) -> tuple[dict, list[int]]:
    """The client's request and the descriptors sent with it (stdin, stdout, stderr)."""
    import socket

    head, fds, _, _ = socket.recv_fds(sock, 4 + LIMIT, 3)
    if len(head) < 4:
        raise Unusable("no request")
    size = int.from_bytes(head[:4], "big")
    if size > LIMIT:
        raise Unusable("the request is too large")
    data = bytearray(head[4:])
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise Unusable("the request ended early")
        data += chunk
    return decode_request(bytes(data)), fds


class State:
    """What `sandbox helper status` and `sandbox doctor` say about the helper. (Not a dataclass:
    `dataclasses` imports `inspect`, ~10 ms the client must not pay.)"""
    __slots__ = ("socket", "running", "pid", "build", "current", "problem")

    def __init__(self, *, socket: str, running: bool = False, pid: int = 0, build: str = "", current: str = "",
                 problem: str = ""):
        self.socket, self.running, self.pid = socket, running, pid
        self.build, self.current = build, current    # the helper's, this copy's
        self.problem = problem                       # why it is not used (absent, refused), when not running

    @property
    def stale(self) -> bool:
        return self.running and self.build != self.current


def state(where: str, uid: int, version: str) -> State:
    path, current = os.path.join(where, SOCKET), build(version)
    try:
        sock, pid = connect(where, uid)
    except Unusable as exc:
        return State(socket=path, current=current, problem=str(exc))
    try:
        said = hello(sock, bytearray())
    except (OSError, ValueError, Unusable) as exc:
        return State(socket=path, current=current, problem=f"the helper did not say hello: {exc}")
    finally:
        sock.close()
    return State(socket=path, running=True, pid=pid, build=str(said.get("build", "")), current=current)
