"""`sandbox doctor`: is this host fit to run sandboxes? Each finding is ok, warn or fail with a
one-line fix; the engine's own view (`docker info`, `docker version`) is the source of truth."""

from __future__ import annotations

import enum
import re
import shutil
from dataclasses import dataclass
from typing import Callable

from launcher import engineid
from launcher.style import BAD, GOOD, WARN, Mark, plain


class Status(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


_KIND = {Status.OK: GOOD, Status.WARN: WARN, Status.FAIL: BAD}


@dataclass(frozen=True, kw_only=True)
class Finding:
    status: Status
    check: str
    detail: str
    fix: str = ""


@dataclass(frozen=True, kw_only=True)
class KnownFix:
    component: str                      # docker, podman (the engines), runc, crun, containerd
    ids: str
    fixed: tuple[tuple[int, ...], ...]  # first fixed version of each maintained branch
    blocking: bool
    what: str


# Container escapes (and near misses) fixed upstream. A branch older than the newest listed fix and
# without a fix of its own counts as vulnerable (it was end of life when the fix came out).
KNOWN_FIXES = (
    KnownFix(component="runc", ids="CVE-2024-21626", fixed=((1, 1, 12),), blocking=True,
             what="leaked file descriptor lets a process start outside the container's root (\"Leaky Vessels\")"),
    KnownFix(component="runc", ids="CVE-2025-31133, CVE-2025-52565, CVE-2025-52881", fixed=((1, 2, 8), (1, 3, 3), (1, 4, 0)),
             blocking=False, what="mount races redirect masked paths and procfs writes (needs a crafted image or mounts)"),
    KnownFix(component="docker", ids="CVE-2019-14271", fixed=((19, 3, 1),), blocking=True,
             what="`docker cp` loads libraries from the container (host root)"),
    KnownFix(component="docker", ids="CVE-2024-41110", fixed=((23, 0, 15), (25, 0, 6), (26, 1, 5), (27, 1, 1)),
             blocking=False, what="authorization plugins can be bypassed (only matters with an AuthZ plugin)"),
    KnownFix(component="containerd", ids="CVE-2020-15257", fixed=((1, 3, 9), (1, 4, 3)), blocking=False,
             what="host-network containers reach containerd's shim API (sandboxes never use the host network)"),
    # podman's own: none blocks a sandbox (every capability dropped; only images built here run, and
    # only this project's Dockerfiles are built), each still worth the upgrade.
    KnownFix(component="podman", ids="CVE-2022-27649", fixed=((4, 0, 3),), blocking=False,
             what="containers start with non-empty inheritable capabilities (sandboxes drop every capability)"),
    KnownFix(component="podman", ids="CVE-2024-1753", fixed=((4, 9, 4), (5, 0, 1)), blocking=False,
             what="a Containerfile's RUN --mount=type=bind can write the host's / during `podman build`"),
    KnownFix(component="podman", ids="CVE-2024-9407, CVE-2024-9675", fixed=((5, 2, 5),), blocking=False,
             what="RUN --mount arguments of a build reach the host filesystem"),
    KnownFix(component="podman", ids="CVE-2026-55686", fixed=((5, 7, 1),), blocking=False,
             what="an image whose WORKDIR is a symlink can create directories or change ownership on the host"),
    KnownFix(component="crun", ids="CVE-2022-27650", fixed=((1, 4, 4),), blocking=False,
             what="containers start with non-empty inheritable capabilities (sandboxes drop every capability)"),
)
# Distribution builds that carry a fix without the upstream version number (package version -> ids).
BACKPORTS = {"1.1.5+ds1-1+deb12u1": ("CVE-2024-21626",)}   # Debian DSA-5615-1


def version_tuple(text: str) -> tuple[int, ...]:
    match = re.match(r"v?([0-9]+(?:\.[0-9]+)*)", text or "")
    return tuple(int(x) for x in match.group(1).split(".")) if match else ()


def vulnerable(version: tuple[int, ...], fixed: tuple[tuple[int, ...], ...]) -> bool:
    same = [f for f in fixed if f[:2] == version[:2]]
    return version < (same[0] if same else max(fixed))


def _judged(engine) -> tuple[str, ...]:
    """The components whose advisories apply: the engine itself and what runs its containers."""
    if engine.kind == engineid.PODMAN:
        return (engine.kind, *([r for r in ("runc", "crun") if r in engine.components] or [engine.runtime]))
    return (engine.kind, "runc", "containerd")


def escape_fixes(version: dict, info: dict) -> list[Finding]:
    engine = engineid.identify(version, info)
    out = []
    for name in _judged(engine):
        text = engine.components.get("engine" if name == engine.kind else name, "")
        number = version_tuple(text)
        if not number:
            out.append(Finding(status=Status.WARN, check=f"{name} version", detail="unknown",
                               fix=f"check the {name} version by hand against its security advisories"))
            continue
        open_ = [k for k in KNOWN_FIXES if k.component == name and vulnerable(number, k.fixed)
                 and k.ids not in BACKPORTS.get(engine.runtime_package, ())]
        if not open_:
            out.append(Finding(status=Status.OK, check=f"{name} version", detail=f"{text}: no known escape left open"))
        for fix in open_:
            distro = "+" in text or "~" in text
            status = Status.FAIL if fix.blocking and not distro else Status.WARN
            hint = "a distribution build may carry the fix as a backport: check its advisory, else " if distro else ""
            out.append(Finding(status=status, check=f"{name} version", detail=f"{text}: {fix.ids}: {fix.what}",
                               fix=f"{hint}upgrade {name} to {' / '.join('.'.join(map(str, v)) for v in fix.fixed)} or later"))
    return out


def engine_findings(info: dict, version: dict) -> list[Finding]:
    options = " ".join(info.get("SecurityOptions") or [])
    engine = engineid.identify(version, info)
    out = [Finding(status=Status.OK, check="engine", detail=f"reachable: {engine.label} "
                   f"(API {version.get('ApiVersion', '?')}), {info.get('OperatingSystem', '?')}, kernel {info.get('KernelVersion', '?')}")]
    out += escape_fixes(version, info)
    out.append(Finding(status=Status.OK, check="seccomp", detail="available (the engine's default profile)") if "name=seccomp" in options
               else Finding(status=Status.FAIL, check="seccomp", detail="not available: no system-call filter",
                            fix="use a kernel and engine built with seccomp (the probe's seccomp checks fail without it)"))
    cgroup = str(info.get("CgroupVersion") or "1")
    missing = [n for n in ("MemoryLimit", "PidsLimit") if info.get(n) is False]
    out.append(Finding(status=Status.FAIL if missing else Status.OK, check="cgroups",
                       detail=f"v{cgroup} ({info.get('CgroupDriver', '?')} driver)" + (f"; no {', '.join(missing)}" if missing else
                                                                                   "; pids and memory limits work"),
                       fix="enable the memory and pids cgroup controllers (kernel command line)" if missing else ""))
    if "name=rootless" in options:
        out.append(Finding(status=Status.OK, check="rootless", detail="the engine runs rootless: its root is not host root"))
    else:
        out.append(Finding(status=Status.OK, check="rootless", detail="rootful engine (the agent still never runs as root)",
                           fix="optional: rootless podman (run it as an unprivileged user) adds a layer"
                           if engine.kind == engineid.PODMAN else
                           "optional: rootless Docker adds a layer (dockerd-rootless-setuptool.sh install)"))
    out.append(Finding(status=Status.OK, check="userns-remap", detail="on: container ids map to unprivileged host ids")
               if "name=userns" in options else
               Finding(status=Status.WARN, check="userns-remap", detail="off: uid 1000 inside is uid 1000 on the host",
                       fix='userns = "auto" in containers.conf (or rootless podman) maps container ids away from host ids'
                       if engine.kind == engineid.PODMAN else
                       "dockerd --userns-remap=default (or rootless mode) maps container ids away from host ids"))
    kernel = version_tuple(str(info.get("KernelVersion") or "0"))
    out.append(Finding(status=Status.OK, check="copy mode", detail=f"kernel {info.get('KernelVersion')}: overlay with "
                       "userxattr works") if kernel >= (5, 11) else
               Finding(status=Status.WARN, check="copy mode", detail=f"kernel {info.get('KernelVersion', '?')}: its "
                       "overlay has no userxattr (Linux 5.11)", fix="use --workspace-mode bind, or a newer kernel"))
    lsm = [n for n in ("apparmor", "selinux") if f"name={n}" in options]
    out.append(Finding(status=Status.OK, check="lsm", detail=f"{' and '.join(lsm)} confine containers") if lsm else
               Finding(status=Status.WARN, check="lsm", detail="neither AppArmor nor SELinux confines containers",
                       fix="enable AppArmor (Debian, Ubuntu) or SELinux (Fedora, RHEL) for one more layer"))
    return out


def image_findings(present: Callable[[str], bool], base: str, bundled: tuple[str, ...]) -> list[Finding]:
    missing = [tag for tag in bundled if not present(tag)]
    out = [Finding(status=Status.WARN if missing else Status.OK, check="images",
                   detail=f"missing: {', '.join(missing)} (built on first use, ~30 s)" if missing else "bundled images present",
                   fix="sandbox images build" if missing else "")]
    has_base, tool = present(base), shutil.which("debootstrap")
    if has_base:
        out.append(Finding(status=Status.OK, check="base image", detail=f"{base} present"))
    else:
        out.append(Finding(status=Status.OK if tool else Status.WARN, check="base image",
                           detail=f"{base} missing; " + ("debootstrap can make it offline" if tool else "no debootstrap to make it offline"),
                           fix="" if tool else "apt-get install debootstrap (or make sure `docker pull` works)"))
    return out


def tool_findings() -> list[Finding]:
    out = [Finding(status=Status.OK, check="debootstrap", detail="available for `sandbox images bootstrap`")
           if shutil.which("debootstrap") else
           Finding(status=Status.OK, check="debootstrap", detail="not installed (needed only where no registry answers)",
                   fix="apt-get install debootstrap")]
    if not shutil.which("docker"):
        out.append(Finding(status=Status.WARN, check="docker cli", detail="missing: `sandbox up` cannot open a shell",
                           fix="install the docker client (Debian: docker.io or docker-cli)"))
    return out


def run(connect: Callable, images_present: Callable | None = None,
        more: Callable[[dict], list[Finding]] | None = None) -> list[Finding]:
    """Every finding; `connect` returns an Engine or raises EngineError; `more(docker info)`
    adds findings of its own (gVisor's registration)."""
    from launcher import images
    from launcher.errors import EngineError

    try:
        engine = connect()
        info = engine.info()
        found = engine_findings(info, engine.version()) + (more(info) if more else [])
    except EngineError as exc:
        first = str(exc).splitlines()[0]
        return [Finding(status=Status.FAIL, check="engine", detail=f"unreachable: {first}",
                        fix="start it (`sudo dockerd &` or `systemctl start docker`) and check `docker info`"), *tool_findings()]
    bundled = (images.probe_image().tag, images.proxy_image().tag, images.AGENT_IMAGE)
    found += image_findings(images_present or engine.image_exists, images.BASE_IMAGE, bundled)
    return found + tool_findings()


def render(findings: list[Finding], mark: Mark = plain) -> str:
    lines = []
    for f in findings:
        word = mark(f.status.value, _KIND[f.status]) + " " * (4 - len(f.status.value))
        lines.append(f"{word}  {f.check:18}  {f.detail}")
        if f.fix and f.status is not Status.OK:
            lines.append(f"{'':4}  {'':18}  fix: {f.fix}")
    fails = sum(f.status is Status.FAIL for f in findings)
    warns = sum(f.status is Status.WARN for f in findings)
    lines.append(f"\n{fails} blocking problem(s), {warns} warning(s)")
    return "\n".join(lines)
