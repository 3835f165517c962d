"""The seccomp profile of a sandbox whose engine takes one only as a file (its dialect's
seccomp_default names the default it is built from), as a state file. podman's compat and libpod
APIs take a profile only as a path on the server (a local engine: this host), and podman's own
default lets a process without CAP_SYS_ADMIN make namespaces (`unshare -U` succeeds), which Docker's
default refuses. So the profile is podman's default with the namespace calls allowed only as
Docker's (and containerd's) default allows them: with CAP_SYS_ADMIN, or clone without a namespace flag."""

from __future__ import annotations

import hashlib
import json
import os

from launcher.host import host
from launcher.host.statefiles import StateFile
from launcher.plan.runtimes import GVISOR_SECCOMP, GVISOR_SECCOMP_FILE

NAMESPACE_CALLS = ("clone", "clone3", "unshare", "setns")
CLONE_NAMESPACES = 0x7E020000   # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
_ADMIN = {"caps": ["CAP_SYS_ADMIN"]}


def docker_semantics(default: dict) -> dict:
    """An engine's default profile (podman's) with the namespace calls allowed only as Docker's default allows them."""
    profile = json.loads(json.dumps(default))
    for rule in profile["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("includes") and not rule.get("excludes"):
            rule["names"] = [n for n in rule["names"] if n not in NAMESPACE_CALLS]
    profile["syscalls"] += [
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "excludes": _ADMIN,
         "args": [{"index": 0, "value": CLONE_NAMESPACES, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38, "excludes": _ADMIN},   # ENOSYS: glibc falls back to clone
        {"names": list(NAMESPACE_CALLS), "action": "SCMP_ACT_ALLOW", "includes": _ADMIN},
    ]
    return profile


def engine_profile(default: str, engine: str) -> StateFile | None:
    """The state file of the profile for an engine's default profile's text (`engine`: its name,
    podman; None when that is not a profile: the compiler refuses the plan then)."""
    try:
        profile = json.loads(default)
        text = json.dumps(docker_semantics(profile), sort_keys=True, separators=(",", ":"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    name = f"{hashlib.sha256(text.encode()).hexdigest()[:16]}-{engine}.json"
    return StateFile(path=os.path.join(host.state_dir(), "seccomp", name), text=text, folder_mode=0o755)


def gvisor_profile() -> StateFile:
    """gVisor's seccomp profile (runtimes.GVISOR_SECCOMP) as a state file, for the files another
    tool starts a gVisor sandbox from: they name the launcher's state directory, never its package."""
    text = GVISOR_SECCOMP + "\n"
    name = f"{hashlib.sha256(text.encode()).hexdigest()[:16]}-gvisor.json"
    return StateFile(path=os.path.join(host.state_dir(), "seccomp", name), text=text, folder_mode=0o755,
                     stands_for=GVISOR_SECCOMP_FILE)
