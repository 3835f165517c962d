"""Reading one host file safely: a regular file only (never a FIFO or device a repository could
plant to hang us), bounded; and the repository's own policy layer, `.sandbox.yaml`."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from launcher.errors import PolicyError, Problem
from launcher.host.hostpaths import kind_of
from launcher.host.imagebuild import approval_appendix
from launcher.policy.yamlsafe import load_yaml

LAYER_MAX_BYTES = 256 * 1024 + 1   # one byte more than the YAML loader accepts, so it reports the size


@dataclass(frozen=True, kw_only=True)
class LayerFile:
    path: str
    data: bytes
    covers: bytes = b""   # a repository policy's: what its build: reads (imagebuild.approval_appendix)

    @property
    def approval(self) -> bytes:
        """The bytes an approval or a --trust-repo-policy pin is of: the file, then what it covers."""
        return self.data + self.covers


def read_regular(path: str, *, required: bool, follow: bool, limit: int = LAYER_MAX_BYTES) -> bytes | None:
    """The bytes of a regular file (never a FIFO or device: a repository could plant one to hang us)."""
    def refuse(found: str, hint: str = "") -> PolicyError:
        return PolicyError([Problem(file=path, path="", expected="a readable regular file", found=found, hint=hint)])

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if required:
            raise refuse("no such file", "fix the path, or unset the variable that names it") from None
        return None
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise refuse("a symbolic link", "a repository policy must be the file itself") from None
        raise refuse(exc.strerror or str(exc)) from None
    except ValueError:   # a NUL byte, which YAML can carry ("\0") and no path can
        raise refuse("a NUL byte in the path") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refuse(kind_of(os.fstat(fd).st_mode))
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def repo_policy_file(workspace: str) -> LayerFile | None:
    """`.sandbox.yaml` at the workspace root, never through a symlink, with what an approval of it
    covers besides itself (the build recipe its `build:` names)."""
    path = os.path.join(workspace, ".sandbox.yaml")
    if os.path.isdir(path) and not os.path.islink(path):
        # The empty mount point Docker makes while a sandbox protects the missing file: no policy.
        return None
    data = read_regular(path, required=False, follow=False)
    if data is None:
        return None
    try:
        raw = load_yaml(data, path)
    except PolicyError:   # refused where the layer is parsed, with the whole story
        raw = None
    build = raw.get("build") if isinstance(raw, dict) else None
    return LayerFile(path=path, data=data, covers=approval_appendix(build, workspace))
