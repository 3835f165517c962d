"""The OCI runtimes a policy can ask for (`runtime: runc | gvisor`): the engine's name for each,
what the probe expects of the kernel it runs on, and what the engine reports about them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from launcher.policy.model import NetworkMode, Runtime

# The names `sandbox doctor --fix` registers gVisor under in the engine (daemon.json "runtimes"),
# one per network mode: their runtime arguments are ours, and a `runsc` the administrator
# registered with other arguments stays as it is. Both pass --oci-seccomp: without it runsc
# ignores the container's seccomp profile (the agent could then unshare a user namespace).
GVISOR = {
    # gVisor's own network stack with loopback only, whatever the namespace holds. Debian's runsc
    # (0.0~20221219) cannot start a container with its default network mode on kernels >= 6.x:
    # it takes /proc/sys/net/core/rmem_default (per namespace since then) as the host's namespace.
    NetworkMode.NONE: ("sandbox-runsc", ("--network=none", "--oci-seccomp")),
    # The host kernel's network stack, inside the container's own namespace (the internal network
    # to the proxy, nothing else): the network half is as under runc, the rest stays gVisor's.
    NetworkMode.PROXY: ("sandbox-runsc-hostinet", ("--network=host", "--oci-seccomp")),
}

# The system-call filter of a gVisor sandbox (runsc applies it inside with --oci-seccomp). Not
# Docker's default profile: this runsc ignores a rule's errnoRet, so that profile's clone3 rule
# answers EPERM instead of ENOSYS and glibc then never falls back to clone: no thread could start
# (Python: "can't start new thread"; curl: "getaddrinfo() thread failed to start"). Everything is
# allowed that gVisor's own kernel serves (what it lacks answers ENOSYS, clone3 included), except
# what makes namespaces, mounts, keys, tracing, BPF and kernel modules, and clone with a
# namespace flag: refused with EPERM (the probe's seccomp.unshare proves it).
_DENIED = ("unshare setns mount umount2 pivot_root chroot fsopen fsmount fsconfig fspick move_mount open_tree "
           "mount_setattr keyctl add_key request_key bpf ptrace process_vm_readv process_vm_writev perf_event_open "
           "kexec_load kexec_file_load init_module finit_module delete_module create_module open_by_handle_at "
           "name_to_handle_at userfaultfd reboot swapon swapoff syslog acct settimeofday clock_settime adjtimex "
           "clock_adjtime quotactl lookup_dcookie vhangup iopl ioperm personality uselib nfsservctl").split()
_CLONE_NEW = (0x20000, 0x80, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000)
GVISOR_SECCOMP = json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
    {"names": _DENIED, "action": "SCMP_ACT_ERRNO"},
    *({"names": ["clone"], "action": "SCMP_ACT_ERRNO",   # flags (arg 0) with that namespace bit set
       "args": [{"index": 0, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]} for bit in _CLONE_NEW)]},
    separators=(",", ":"))
# The same profile as a file, for the targets another tool launches (the docker CLI and compose read
# a file): tests/test_runtimes.py keeps it equal to GVISOR_SECCOMP.
GVISOR_SECCOMP_FILE = str(Path(__file__).with_name("gvisor-seccomp.json"))


def security_opt(runtime: Runtime, profile_file: str = "") -> tuple[str, ...]:
    """HostConfig.SecurityOpt of a sandbox under `runtime` (Docker's default seccomp profile for runc).
    `profile_file`: its engine takes a profile only as a file on the server (podman): that file
    (seccompfiles: its default with Docker's namespace rules) for runc, the gVisor profile's file."""
    if profile_file:
        return ("no-new-privileges", f"seccomp={GVISOR_SECCOMP_FILE if runtime is Runtime.GVISOR else profile_file}")
    return ("no-new-privileges",) + ((f"seccomp={GVISOR_SECCOMP}",) if runtime is Runtime.GVISOR else ())


def as_file(option: str) -> str:
    """A SecurityOpt entry as the docker CLI and compose take it: an inline profile by its file."""
    return f"seccomp={GVISOR_SECCOMP_FILE}" if option == f"seccomp={GVISOR_SECCOMP}" else option


def engine_name(runtime: Runtime, mode: NetworkMode) -> str:
    """HostConfig.Runtime of a sandbox under `runtime` in network mode `mode`."""
    return GVISOR[mode][0] if runtime is Runtime.GVISOR else "runc"


# Under gVisor the host's pids cgroup counts the sandbox's host threads: gVisor's own (its Go
# runtime, and one per agent thread on the ptrace platform), not the agent's processes. Measured
# here: up to 609 for the selftest's shell matrix under runsc, where runc needs a handful; at the
# limit the whole sandbox ends (exit 2), it never gets past it. The policy's number is added to this.
GVISOR_THREADS = 4096


def host_pids(runtime: Runtime, pids: int) -> int:
    """The engine's PidsLimit for a policy's limits.pids under `runtime`."""
    return pids + GVISOR_THREADS if runtime is Runtime.GVISOR else pids


def kernel(runtime: Runtime) -> str:
    """The probe's `kernel=` expectation."""
    return "gvisor" if runtime is Runtime.GVISOR else "host"


def refusals(runtime: Runtime, capabilities: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(path, expected, found, hint) for what `runtime` cannot give the policy."""
    if runtime is Runtime.GVISOR and "NET_RAW" in capabilities:
        return [(f"capabilities[{capabilities.index('NET_RAW')}]", "a capability gVisor keeps", "NET_RAW",
                 "runsc drops NET_RAW from every container (raw sockets off without --net-raw), so the probe's "
                 "caps.bnd would fail: leave it out, or use runtime: runc")]
    return []


def registration(runsc: str) -> dict[str, dict]:
    """daemon.json "runtimes" entries for gVisor, with the runsc binary at `runsc`."""
    return {name: {"path": runsc, "runtimeArgs": list(args)} for name, args in GVISOR.values()}


def missing(info: dict, runtime: Runtime, mode: NetworkMode, present: Callable[[str], bool] | None = None) -> str:
    """The engine name a sandbox needs that the engine does not have registered (as registered,
    and installed where `present` can tell), or "" (runc is always there)."""
    if runtime is Runtime.RUNC:
        return ""
    name, args = GVISOR[mode]
    entry = registered(info, present).get(name)
    return "" if entry is not None and tuple(entry.get("runtimeArgs") or ()) == args else name


@dataclass(frozen=True, kw_only=True)
class RuntimeFact:
    """One runtime as the engine knows it (for `sandbox doctor` and the attestation record)."""

    runtime: str          # runc or gvisor (the policy's value)
    name: str             # the engine's name (HostConfig.Runtime)
    registered: bool
    path: str             # the binary the engine runs ("" when unknown)
    args: tuple[str, ...]
    version: str          # "" when unknown


def registered(info: dict, present: Callable[[str], bool] | None = None) -> dict[str, dict]:
    """`docker info` Runtimes: name -> {path, runtimeArgs}; with `present(path)`, only the installed
    ones (podman lists every runtime containers.conf names, installed or not: kata, krun, runj…)."""
    listed = dict(info.get("Runtimes") or {})
    return {n: e for n, e in listed.items() if present(str((e or {}).get("path", "")))} if present else listed


def not_installed(info: dict, present: Callable[[str], bool]) -> tuple[str, ...]:
    """The runtimes the engine lists whose binary is not there."""
    return tuple(sorted(set(registered(info)) - set(registered(info, present))))


def fact(info: dict, version: dict, runtime: Runtime, mode: NetworkMode = NetworkMode.NONE,
         run_version=None) -> RuntimeFact:
    """What the engine reports about `runtime` (for network mode `mode`): `info` and `version`
    are `docker info` and `docker version`; `run_version(path) -> str` asks a runsc binary its
    version (the engine does not report it)."""
    name = engine_name(runtime, mode)
    entry = registered(info).get(name)
    path = (entry or {}).get("path", "")
    args = tuple((entry or {}).get("runtimeArgs") or ())
    if runtime is Runtime.RUNC:
        text = runc_version(version)
    else:
        text = run_version(path) if (entry and run_version) else ""
    return RuntimeFact(runtime=runtime.value, name=name, registered=entry is not None, path=path, args=args, version=text)


def runc_version(version: dict) -> str:
    """runc's version as the engine lists it among its components (Docker: "runc", podman: "OCI
    Runtime (runc)"; "" if absent)."""
    from launcher.host import engineid

    return engineid.identify(version, {}).components.get("runc", "")


def binary_version(path: str) -> str:
    """The first line `PATH --version` prints (its stdout, else its stderr); OSError or
    subprocess.SubprocessError when it cannot be run."""
    import subprocess

    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def runsc_version(path: str) -> str:
    """runsc's version ("runsc version 0.0~20221219.0" -> "0.0~20221219.0"), "" when unknown."""
    import subprocess

    try:
        return binary_version(path).removeprefix("runsc version ").strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def describe(engine, runtime: Runtime, mode: NetworkMode = NetworkMode.NONE) -> RuntimeFact:
    """The runtime a sandbox under `runtime` (network mode `mode`) gets on this engine, with its
    version: for the attestation record (`engine` is a launcher.engine.engine.Engine)."""
    return fact(engine.info(), engine.version(), runtime, mode, runsc_version)
