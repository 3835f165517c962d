"""`sandbox doctor`: is this host fit to run sandboxes? Each finding is ok, warn or fail with a
one-line fix; the engine's own view (`docker info`, `docker version`) is the source of truth."""

from __future__ import annotations

import enum
import os
import re
import shutil
from dataclasses import dataclass
from typing import Callable

from launcher.engine import dialects
from launcher.host import engineid
from launcher.plan import runtimes
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


def escape_fixes(version: dict, info: dict) -> list[Finding]:
    engine = engineid.identify(version, info)
    out = []
    for name in dialects.of(engine.kind).judged(engine):   # the engine itself and what runs its containers
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


def engine_findings(info: dict, version: dict, present: Callable[[str], bool] | None = None,
                    libpod: dict | None = None) -> list[Finding]:
    """The findings about one engine from its /info and /version (and podman's /libpod/info);
    `present(path)` says whether a runtime binary the engine lists is installed (None: the engine
    is not on this host)."""
    engine = engineid.identify(version, info)
    out = [Finding(status=Status.OK, check="engine", detail=f"reachable: {engine.label} "
                   f"(API {version.get('ApiVersion', '?')}), {info.get('OperatingSystem', '?')}, kernel {info.get('KernelVersion', '?')}")]
    out += escape_fixes(version, info)
    out.append(runtime_finding(info, engine, present))
    out.append(Finding(status=Status.OK, check="seccomp", detail="available (the engine's default profile)") if engine.seccomp
               else Finding(status=Status.FAIL, check="seccomp", detail="not available: no system-call filter",
                            fix="use a kernel and engine built with seccomp (the probe's seccomp checks fail without it)"))
    out.append(cgroup_finding(info, version, libpod))
    dialect = dialects.of(engine.kind)
    if engine.rootless:
        out.append(Finding(status=Status.OK, check="rootless", detail="the engine runs rootless: its root is not host root"))
    else:
        out.append(Finding(status=Status.OK, check="rootless", detail="rootful engine (the agent still never runs as root)",
                           fix=dialect.rootful_fix))
    if engine.userns or engine.rootless:
        out.append(Finding(status=Status.OK, check="userns-remap", detail="on: container ids map to unprivileged host ids"
                           if engine.userns else "rootless: container ids map into the user's subordinate ids"))
    else:
        out.append(Finding(status=Status.WARN, check="userns-remap", detail=dialect.userns_off, fix=dialect.userns_fix))
    kernel = version_tuple(str(info.get("KernelVersion") or "0"))
    out.append(Finding(status=Status.OK, check="copy mode", detail=f"kernel {info.get('KernelVersion')}: overlay with "
                       "userxattr works") if kernel >= (5, 11) else
               Finding(status=Status.WARN, check="copy mode", detail=f"kernel {info.get('KernelVersion', '?')}: its "
                       "overlay has no userxattr (Linux 5.11)", fix="use --workspace-mode bind, or a newer kernel"))
    out.append(Finding(status=Status.OK, check="lsm", detail=f"{' and '.join(engine.lsm)} confine containers") if engine.lsm else
               Finding(status=Status.WARN, check="lsm", detail="neither AppArmor nor SELinux confines containers",
                       fix="enable AppArmor (Debian, Ubuntu) or SELinux (Fedora, RHEL) for one more layer"))
    return out


def cgroup_finding(info: dict, version: dict, libpod: dict | None) -> Finding:
    """Can the engine hold the policy's limits? Docker's /info flags say so; podman's say true even
    where it ignores every limit (rootless on cgroup v1: "Resource limits are not supported and
    ignored"), so for podman the controllers its /libpod/info lists decide (engineid.facts); the
    engine's dialect words the row."""
    facts = engineid.facts(version, info, libpod)
    where = f"v{facts.cgroup_version or '1'} ({info.get('CgroupDriver', '?')} driver)"
    ignored, fix, works = dialects.of(facts.kind).limits_words(facts.rootless, bool(libpod))
    if facts.unenforced:
        return Finding(status=Status.FAIL, check="cgroups", detail=f"{where}: the engine would ignore "
                       f"{', '.join(facts.unenforced)}" + ignored, fix=fix)
    return Finding(status=Status.OK, check="cgroups", detail=f"{where}; pids, memory and cpu limits work" + works)


def runtime_finding(info: dict, engine: engineid.EngineIdentity, present: Callable[[str], bool] | None) -> Finding:
    """The engine's OCI runtimes: which are installed (podman lists every one containers.conf names),
    and whether the default one, which runs every `runtime: runc` sandbox, is among them."""
    listed = sorted(runtimes.registered(info))
    absent = runtimes.not_installed(info, present) if present else ()
    there = [n for n in listed if n not in absent]
    detail = f"{engine.runtime} (default)" + "".join(f", {n}" for n in there if n != engine.runtime)
    detail += f"; listed but not installed: {', '.join(absent)}" if absent else ""
    detail += "" if present else " (a remote engine: paths not checked)"
    if engine.runtime in absent:
        return Finding(status=Status.FAIL, check="runtimes", detail=detail, fix=f"install {engine.runtime}, or set "
                       "another default runtime (containers.conf `runtime`, daemon.json `default-runtime`)")
    return Finding(status=Status.OK, check="runtimes", detail=detail)


def engine_rows(seen, present: Callable[[str], bool] | None = None) -> list[Finding]:
    """A row per engine found on this host (engineid.Sighting each): where, its identity and its
    verdict (what `engine_findings` finds there); which one `sandbox` uses, how to point it at
    another. Only the used engine's own findings can block; another's verdict is said, as a warning
    when it has a blocking problem."""
    answering = [s for s in seen if not s.error]
    used = next((s for s in seen if s.used), None)
    head = (f"{len(answering)} answering; `sandbox` uses {used.address} ({used.source})" if used else f"{len(answering)} answering")
    out = [Finding(status=Status.OK, check="engines", detail=head)]
    for s in seen:
        where = f"{s.address} ({s.source}{', in use' if s.used else ''})"
        if s.error and not s.used:     # the used one's failure is the `engine` finding's
            out.append(Finding(status=Status.WARN, check="engine found", detail=f"{where}: does not answer: {s.error}",
                               fix="check its permissions (or that its service runs), if you mean to use it"))
        if s.error:
            continue
        found = engine_findings(dict(s.info), dict(s.version), present if s.local else None, dict(s.libpod) or None)
        fails = [f for f in found if f.status is Status.FAIL]
        warns = sum(f.status is Status.WARN for f in found)
        verdict = (f"{len(fails)} blocking ({'; '.join(f'{f.check}: {f.detail}' for f in fails)})" if fails else "0 blocking")
        detail = f"{where}: {engineid.identify(dict(s.version), dict(s.info)).summary}; verdict: {verdict}, {warns} warning(s)"
        use, status = f"to use it: DOCKER_HOST={s.address} sandbox …", Status.WARN if fails and not s.used else Status.OK
        out.append(Finding(status=status, check="engine found", detail=detail if s.used or status is Status.WARN
                           else f"{detail}; {use}", fix="" if s.used else use))
    context = next((s for s in seen if s.source.startswith("docker context")), None)
    if context and used and context.address != used.address and not used.source.startswith("DOCKER_HOST"):
        out.append(Finding(status=Status.WARN, check="docker context", detail=f"the docker CLI uses {context.source} "
                           f"({context.address}); `sandbox` does not follow contexts and uses {used.address}",
                           fix=f"DOCKER_HOST={context.address} sandbox … (the docker CLI honours DOCKER_HOST too)"))
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
    return out + [helper_finding(helper_state())]


def helper_state():
    """The resident helper's state (launcher/resident.py): socket, pid, build, stale or not."""
    from launcher import resident
    from launcher.__version__ import __version__
    from launcher.host import host

    uid = os.geteuid()
    return resident.state(resident.runtime_dir(host.runtime_dir_env(), uid), uid, __version__)


def helper_finding(found) -> Finding:
    if not found.running:
        return Finding(status=Status.OK, check="helper", detail=f"not running ({found.problem}): every command runs "
                       "in-process", fix="" if "does not exist" in found.problem or "no helper" in found.problem
                       else f"`sandbox helper start` (or remove {os.path.dirname(found.socket)})")
    detail = f"pid {found.pid}, build {found.build}, socket {found.socket}"
    if found.stale:
        return Finding(status=Status.WARN, check="helper", detail=f"STALE: {detail}; this copy is {found.current}, "
                       "so commands run in-process", fix="`sandbox helper start` replaces it")
    return Finding(status=Status.OK, check="helper", detail=f"running: {detail}")


def run(connect: Callable, images_present: Callable | None = None, more: Callable | None = None,
        seen: Callable[[], tuple] | None = None, present: Callable[[str], bool] | None = None) -> list[Finding]:
    """Every finding; `connect` returns an Engine or raises EngineError; `more(info, kind, present)`
    adds findings of its own (gVisor's registration); `seen()` finds every engine on this host
    (engineid.Sighting each); `present(path)` says whether a runtime binary is installed here (used
    only for engines on this host's unix sockets)."""
    from launcher.engine import images
    from launcher.engine.unreachable import START
    from launcher.errors import EngineError

    sightings = seen() if seen else ()
    used = next((s for s in sightings if s.used), None)
    here = present if used is None or used.local else None
    try:
        engine = connect()
        info = engine.info()
        version = engine.version()
        kind = engineid.identify(version, info).kind
        found = engine_findings(info, version, here, dialects.of(kind).own_info(engine))
        found += more(info, kind, here) if more else []
    except EngineError as exc:
        first = str(exc).splitlines()[0]
        other = any(not s.used and not s.error for s in sightings)
        return [Finding(status=Status.FAIL, check="engine", detail=f"unreachable: {first}",
                        fix=(exc.hint or START) + (", or point DOCKER_HOST at an engine found below" if other else "")),
                *(engine_rows(sightings, present) if sightings else ()), *tool_findings()]
    found += engine_rows(sightings, present) if sightings else []
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
