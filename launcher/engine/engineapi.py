"""The Docker Engine API over HTTP, for engine.py only. Two transports with one interface: `Unix`
speaks HTTP/1.1 on the engine's unix socket with the standard library (a launch no longer imports
the SDK, whose `requests` and `urllib3` cost ~0.25 s per run); `Sdk` sends the same requests through
the docker SDK, for what `Unix` does not speak (tcp://, ssh://, TLS). `mapped`: both ways' errors as ours."""

from __future__ import annotations

import json
import socket
import sys
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import quote, urlencode

from launcher.engine.execsocket import ExecSocket
from launcher.errors import EngineError, NotFound

Body = bytes | Iterator[bytes] | None


@contextmanager
def mapped(action: str) -> Iterator[None]:
    """The SDK's errors (when it is loaded) and the socket's, as ours."""
    try:
        yield
    except OSError as exc:   # requests' errors are OSErrors too
        raise EngineError(f"{action}: {exc}") from None
    except Exception as exc:
        sdk = sys.modules.get("docker.errors")
        if sdk is None or not isinstance(exc, sdk.DockerException):
            raise
        if isinstance(exc, sdk.NotFound):
            raise NotFound(f"{action}: {exc.explanation or exc}") from None
        message = exc.explanation if isinstance(exc, sdk.APIError) else None
        raise EngineError(f"{action}: {message or exc}") from None


class Answer:
    """One response: its status, headers and body (read whole, or as it comes)."""

    def __init__(self, status: int, headers: dict[str, str], stream: Iterator[bytes], *conns):
        self.status, self.headers, self._stream, self.connections = status, headers, _closing(stream, *conns), conns

    def chunks(self) -> Iterator[bytes]:
        return self._stream

    def read(self) -> bytes:
        return b"".join(self._stream)

    def close(self) -> None:
        """Drop what is left of the body, and the connection (also when none of it was read)."""
        self._stream.close()
        for conn in self.connections:
            conn.close()

    def json(self):
        data = self.read()
        return json.loads(data) if data else None


# Attached before the start, as `docker run` attaches: the stream alone. With logs=true as well the
# engine replays the log after it has joined the stream, and a container started meanwhile has its
# first lines in both (a probe report with checks twice).
ATTACH = {"logs": False, "stream": True, "stdout": True, "stderr": True}


class Attachment:
    """An attached container's output, (stdout, stderr) pairs as they come; and its stdin, when it
    was attached with it and this transport can write there (`writable`)."""

    def __init__(self, chunks: Iterator[tuple[bytes | None, bytes | None]], send=None):
        self._chunks, self._send = chunks, send

    def __iter__(self) -> "Attachment":
        return self

    def __next__(self) -> tuple[bytes | None, bytes | None]:
        return next(self._chunks)

    @property
    def writable(self) -> bool:
        return self._send is not None

    def write(self, data: bytes) -> None:
        if self._send is None:
            raise EngineError("writing to a container's stdin: it was not attached with it")
        with mapped("writing to a container's stdin"):
            self._send(data)


def params_of(params: dict | None) -> str:
    """A query string: booleans as 1/0, lists and dicts as JSON (the engine's `filters`)."""
    if not params:
        return ""
    flat = {k: (int(v) if isinstance(v, bool) else json.dumps(v) if isinstance(v, (dict, list)) else v)
            for k, v in params.items() if v is not None}
    return "?" + urlencode(flat)


def path_of(template: str, *args: str) -> str:
    """`template` with its {} filled in, quoted as the SDK quotes them (an image's / and : kept)."""
    return template.format(*(quote(a, safe="/:") for a in args))


def failed(action: str, answer: Answer) -> EngineError:
    """The engine's own message, mapped: 404 is NotFound, anything else an EngineError."""
    try:
        message = (answer.json() or {}).get("message", "")
    except (ValueError, AttributeError):
        message = ""
    text = f"{action}: {message or f'HTTP {answer.status}'}"
    # podman answers 500 "… does not exist in database: no such container" for one removed meanwhile
    return NotFound(text) if answer.status == 404 or message.endswith("no such container") else EngineError(text)


# podman's own API (/libpod/…) is versioned by podman's releases, not Docker's: the bodies here are
# its 4.0 forms (a network create under a Docker API version gets the CNI-era answer, or a refusal).
LIBPOD_API = "4.0.0"


def versioned(path: str, version: str) -> str:
    """`path` under the API version it speaks: podman's own for /libpod/, else the engine's (if known)."""
    if path.startswith("/libpod/"):
        return f"/v{LIBPOD_API}{path}"
    return f"/v{version}{path}" if version else path


class Unix:
    """HTTP/1.1 on a unix socket, one connection per request: nothing shared between the
    launcher's threads, and a connect costs microseconds."""

    def __init__(self, path: str, timeout: float = 300):
        self.path, self.timeout, self.version = path, timeout, ""

    def call(self, method: str, path: str, params: dict | None = None, body=None, *, raw: Body = None,
             timeout: float | None = -1, upgrade: bool = False) -> Answer:
        """Send one request (`body` as JSON, or `raw` bytes or chunks as a tar) and read the answer's
        head; its body is read as asked, and the connection closes when it ends (or at close()).
        `timeout` None waits for ever (a wait, an attach)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout if timeout == -1 else timeout)
            sock.connect(self.path)
            head = [f"{method} {versioned(path, self.version)}{params_of(params)} HTTP/1.1", "Host: docker", "User-Agent: sandbox"]
            head += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
            if body is not None:
                raw = json.dumps(body).encode()
                head.append("Content-Type: application/json")
            elif raw is not None:
                head.append("Content-Type: application/x-tar")
            if isinstance(raw, bytes):
                sock.sendall("\r\n".join(head + [f"Content-Length: {len(raw)}"]).encode() + b"\r\n\r\n" + raw)
            elif raw is None:
                sock.sendall("\r\n".join(head + ["Content-Length: 0"] * (method == "POST")).encode() + b"\r\n\r\n")
            else:
                sock.sendall("\r\n".join(head + ["Transfer-Encoding: chunked"]).encode() + b"\r\n\r\n")
                for chunk in raw:
                    if chunk:
                        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sock.sendall(b"0\r\n\r\n")
            reader = sock.makefile("rb")
            status_line = reader.readline(65536).decode("latin-1")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise EngineError(f"the engine at {self.path} answered {status_line.strip()!r}, not HTTP")
            headers = {}
            while (line := reader.readline(65536)) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
        except BaseException:
            sock.close()
            raise
        status = int(parts[1])
        return Answer(status, headers, _body(reader, headers, method, status), reader, sock)

    def attach(self, ref: str, stdin: bool = False) -> Attachment:
        answer = self.call("POST", path_of("/containers/{}/attach", ref), upgrade=True, timeout=None,
                           params={**ATTACH, "stdin": stdin})
        if answer.status not in (101, 200):
            raise failed(f"attaching to {ref}", answer)
        return Attachment(frames(answer.chunks()), answer.connections[1].sendall if stdin else None)

    def exec_tty(self, exec_id: str) -> ExecSocket:
        """Start the exec `exec_id` (made with a terminal) on a hijacked connection; what came with
        the answer's head stays in the reader that read it (the shell's first prompt)."""
        answer = self.call("POST", path_of("/exec/{}/start", exec_id), body={"Detach": False, "Tty": True},
                           upgrade=True, timeout=None)
        if answer.status not in (101, 200):
            raise failed(f"starting exec {exec_id}", answer)
        reader, sock = answer.connections
        return ExecSocket(sock, reader)


class Sdk:
    """The same requests through the docker SDK's session (its transports: tcp, ssh, TLS)."""

    def __init__(self, client):
        self.client, self.api = client, client.api
        self.version = self.api.api_version

    def call(self, method: str, path: str, params: dict | None = None, body=None, *, raw: Body = None,
             timeout: float | None = -1, upgrade: bool = False) -> Answer:
        api = self.api
        answer = api.request(method, f"{api.base_url}{versioned(path, self.version)}{params_of(params)}", json=body,
                             data=raw, stream=True, timeout=api.timeout if timeout == -1 else timeout)
        headers = {name.lower(): value for name, value in answer.headers.items()}
        return Answer(answer.status_code, headers, answer.iter_content(1 << 16), answer)

    def attach(self, ref: str, stdin: bool = False) -> Attachment:
        if not stdin:
            return Attachment(iter(self.api.attach(ref, **ATTACH, demux=True)))
        # the SDK's raw socket: a socket (unix, TLS), a channel (ssh) or a SocketIO (tcp)
        sock = self.api.attach_socket(ref, params={**ATTACH, "stdin": True})
        return Attachment(frames(_received(sock)), lambda data: _send_all(sock, data))

    def exec_tty(self, exec_id: str) -> ExecSocket:
        # The SDK's socket: output that came with the answer's head is lost (the shell draws its
        # prompt again at the first key).
        return ExecSocket(self.api.exec_start(exec_id, tty=True, socket=True))


def _received(sock) -> Iterator[bytes]:
    read = sock.recv if hasattr(sock, "recv") else sock.read
    while data := read(1 << 16):
        yield data


def _send_all(sock, data: bytes) -> None:
    # http's SocketIO is the socket's reading side (mode rb): write on the socket it wraps
    getattr(sock, "_sock", sock).sendall(data)


def _closing(chunks: Iterator[bytes], *conns) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:
        for conn in conns:
            conn.close()


def _body(reader, headers: dict[str, str], method: str, status: int) -> Iterator[bytes]:
    if method == "HEAD" or status in (204, 304):
        return
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while size := int(reader.readline(1024).split(b";")[0].strip() or b"0", 16):
            yield reader.read(size)
            reader.readline(1024)
        return
    if "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0 and (chunk := reader.read(min(left, 1 << 16))):
            left -= len(chunk)
            yield chunk
        return
    while chunk := reader.read1(1 << 16):   # to the end: a hijacked stream, or Connection: close
        yield chunk


class Frames:
    """The engine's multiplexed stream, parsed: feed bytes, take (stream, payload) pairs (1 stdout,
    2 stderr; 8-byte header: stream, three zeros, big-endian length)."""

    def __init__(self):
        self.buffer = b""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer, at, found = self.buffer + data, 0, []
        # an offset, not a cut per frame: many small frames in one chunk stay linear
        while len(buffer) - at >= 8:
            size = int.from_bytes(buffer[at + 4:at + 8], "big")
            if len(buffer) - at < 8 + size:
                break
            found.append((buffer[at], buffer[at + 8:at + 8 + size]))
            at += 8 + size
        self.buffer = buffer[at:]
        return found


def frames(stream: Iterator[bytes]) -> Iterator[tuple[bytes | None, bytes | None]]:
    """An attached container's output as (stdout, stderr) pairs, one per frame."""
    parser = Frames()
    for chunk in stream:
        for kind, data in parser.feed(chunk):
            yield (data, None) if kind != 2 else (None, data)
