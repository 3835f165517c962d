"""Read-only files in the launcher's state directory that a plan binds from: the placeholders of
missing protected files (workspaces.py) and the CA store (trustfiles.py). Their paths and texts are
decided with the host facts and compiling writes none of them: `write` is the launch's
(session.prepare) and the output step's of a command that writes files for another tool."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StateFile:
    path: str
    text: str
    folder_mode: int = 0o700   # of its directory, when it has to be made
    # A copy of the launcher's own package file at this path (the gVisor seccomp profile): files for
    # another tool name the copy, which sits where they name the launcher's state, not the package.
    stands_for: str = ""


def write(files) -> None:
    """Each file not there yet, atomically, read-only (read by the agent's uid inside, written by no one)."""
    for file in files:
        if os.path.isfile(file.path):
            continue
        os.makedirs(os.path.dirname(file.path), mode=file.folder_mode, exist_ok=True)
        temp = f"{file.path}.{os.getpid()}"
        with open(temp, "w") as out:
            out.write(file.text)
        os.chmod(temp, 0o444)
        os.replace(temp, file.path)
