"""An exec's stdin and output on the engine's hijacked connection, as a socket (no docker import:
engine.py makes it)."""

from __future__ import annotations

import socket
from contextlib import suppress


class ExecSocket:
    """The hijacked connection of an exec (Engine.exec_socket): its stdin one way, its stdout and
    stderr the other, in frames (8-byte header: stream, 0, 0, 0, big-endian length)."""

    def __init__(self, raw, reader=None):
        self._raw, self._sock = raw, getattr(raw, "_sock", raw)   # raw holds the HTTP response (TLS) alive
        self._sock.settimeout(None)   # the client's request timeout must not end an idle connection
        # `reader`: what read the response's head, holding any output that arrived with it
        self.send, self.recv, self._reader = self._sock.sendall, (reader.read1 if reader else self._sock.recv), reader

    def close_stdin(self) -> None:
        """EOF on its stdin: the engine closes that at a half-close (which TLS cannot do)."""
        import ssl

        if not isinstance(self._sock, ssl.SSLSocket):
            self._sock.shutdown(socket.SHUT_WR)

    def shutdown(self) -> None:
        """Both ways, waking a thread blocked on it (close() alone would not)."""
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._sock.close()
        self._raw.close()
        if self._reader is not None:
            self._reader.close()
