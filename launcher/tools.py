"""Short-lived root containers that do one job on our volumes for the launcher (copy mode's
copytool, the home volume's owner): our agent image, no network, read-only root, all
capabilities dropped but the few the job needs, only the mounts it names; never the agent's programs."""

from __future__ import annotations

import os

from launcher import labels as label
from launcher.engine import Engine
from launcher.errors import EngineError
from launcher.plan import ContainerSpec, Mount

TOOL_IMAGE = "sandbox/agent:bookworm"      # has python3, tar, cp, chown (images/agent)


def run_tool(engine: Engine, *, name: str, entrypoint: tuple[str, ...], argv: list[str], mounts: list[Mount],
             caps: tuple[str, ...], labels: dict[str, str], what: str) -> bytes:
    """Run the job as root in a fresh container NAME-tool-XXXXXX (always removed); its stdout, or
    EngineError with the end of its stderr when it fails."""
    name = f"{name}-tool-{os.urandom(3).hex()}"
    spec = ContainerSpec(
        name=name, image=TOOL_IMAGE, user="0:0", entrypoint=entrypoint,
        command=tuple(argv), env=(("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),), working_dir="/",
        mounts=tuple(mounts), network_mode="none", read_only_root=True, cap_drop=("ALL",), cap_add=caps,
        security_opt=("no-new-privileges",), pids_limit=256, memory_bytes=1 << 30, nano_cpus=None,
        labels=tuple(sorted({label.MANAGED: "1", label.KIND: "tool", label.SANDBOX: name,
                             label.OWNER_PID: str(os.getpid()), **labels}.items())), hostname="sandbox-tools")
    code, out, err = engine.run_collect(spec)
    if code != 0:
        tail = "\n    ".join(err.decode(errors="replace").strip().splitlines()[-5:])
        raise EngineError(f"{what} failed (exit {code}):\n    {tail}")
    return out
