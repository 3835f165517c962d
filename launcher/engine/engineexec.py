"""The Engine's exec calls (a part of launcher/engine/engine.py's Engine): a command in a running
container on a stream, on a socket or on a terminal, and what became of it."""

from __future__ import annotations

from typing import Iterator

from launcher.engine.engineapi import mapped, path_of
from launcher.engine.execsocket import ExecSocket


class Execs:
    """Mixed into Engine: its client (the SDK's), _json, _post and http do the asking."""

    def exec_stream(self, ref: str, argv: list[str], user: str = "") -> tuple[str, Iterator]:
        with mapped(f"running a command in {ref}"):
            exec_id = self.client.api.exec_create(ref, argv, stdout=True, stderr=True, user=user)["Id"]
            return exec_id, self.client.api.exec_start(exec_id, stream=True, demux=True)

    def exec_socket(self, ref: str, argv: list[str], user: str) -> tuple[str, "ExecSocket"]:
        """Start `argv` in the running container `ref` as `user`, unprivileged, with no terminal, on a socket.
        Output written before it was sent anything may stay in the SDK's buffer and be lost."""
        with mapped(f"starting a relay in {ref}"):
            exec_id = self.client.api.exec_create(ref, argv, stdin=True, stdout=True, stderr=True, tty=False,
                                                  privileged=False, user=user)["Id"]
            return exec_id, ExecSocket(self.client.api.exec_start(exec_id, socket=True))

    def exec_tty(self, ref: str, argv: list[str], size: tuple[int, int] = (0, 0)) -> tuple[str, ExecSocket]:
        """`argv` in the running container `ref` on a terminal of `size` (rows, columns), as `docker exec -it`
        runs it (the container's user, directory and environment); the terminal's bytes on a socket."""
        exec_id = self._json(f"starting {argv[0]} in {ref}", "POST", path_of("/containers/{}/exec", ref), body={
            "Cmd": argv, "Tty": True, "AttachStdin": True, "AttachStdout": True, "AttachStderr": True,
            **({"ConsoleSize": list(size)} if all(size) else {})})["Id"]
        with mapped(f"starting {argv[0]} in {ref}"):
            return exec_id, self.http.exec_tty(exec_id)

    def exec_resize(self, exec_id: str, rows: int, columns: int) -> None:   # the terminal of an exec_tty
        self._post("resizing a terminal", "/exec/{}/resize", exec_id, {"h": rows, "w": columns})

    def exec_running(self, exec_id: str) -> bool:
        return bool(self._json("inspecting a relay", "GET", path_of("/exec/{}/json", exec_id))["Running"])

    def exec_exit_code(self, exec_id: str) -> int:
        return int(self._json("reading the exit code", "GET", path_of("/exec/{}/json", exec_id))["ExitCode"] or 0)
