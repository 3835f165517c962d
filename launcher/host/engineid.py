"""Which engine answers the Engine API: Docker, or podman through its Docker-compatible service.
Both answer `GET /version` with a `Version` — podman with its own ("4.3.1"), which read as Docker's
would be judged against Docker's advisories — so the identity is taken from the components the
answer lists (podman names one "Podman Engine", and its OCI runtime "OCI Runtime (crun)")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

# The cgroup controller behind each limit a policy sets (limits.cpus is a CFS quota: "cpu").
LIMIT_CONTROLLERS = (("limits.memory", "memory"), ("limits.pids", "pids"), ("limits.cpus", "cpu"))

DOCKER, PODMAN = "docker", "podman"
_RUNTIME = re.compile(r"oci runtime \((?P<name>[^)]+)\)")
_VERSION = re.compile(r"\bversion:?\s+v?(?P<version>[0-9][^\s,]*)")


@dataclass(frozen=True, kw_only=True)
class EngineIdentity:
    kind: str                                 # DOCKER or PODMAN
    version: str                              # the engine's own version ("" when not reported)
    api_version: str
    runtime: str                              # the default OCI runtime's name (runc, crun, runsc…)
    components: Mapping[str, str] = field(default_factory=dict)   # engine, runc, crun, containerd, conmon → version
    runtime_package: str = ""                 # the distribution's package version of runc, when reported
    rootless: bool = False                    # the engine runs as an unprivileged user
    seccomp: bool = False                     # it has a system-call filter for its containers
    lsm: tuple[str, ...] = ()                 # apparmor, selinux: the ones that confine its containers
    userns: bool = False                      # Docker's userns-remap (podman's API does not report containers.conf's userns)

    @property
    def label(self) -> str:
        return f"{'Podman' if self.kind == PODMAN else 'Docker'} {self.version or '?'}"

    @property
    def summary(self) -> str:
        """One line: "Docker 20.10.24, runc 1.1.5 (default runtime), rootful, seccomp, no AppArmor/SELinux, no userns-remap"."""
        runtime = f"{self.runtime} {self.components.get(self.runtime, '')}".strip()
        return ", ".join((self.label, f"{runtime} (default runtime)", "rootless" if self.rootless else "rootful",
                          "seccomp" if self.seccomp else "NO seccomp", " and ".join(self.lsm) or "no AppArmor/SELinux",
                          "userns-remap" if self.userns else "userns: rootless" if self.rootless else
                          "userns: not reported" if self.kind == PODMAN else "no userns-remap"))


@dataclass(frozen=True, kw_only=True)
class Sighting:
    """An engine found on this host (launcher/engine/hostengines.py looks; doctor judges): where, and its answers."""

    address: str          # unix:///var/run/docker.sock, tcp://…
    source: str           # why it was looked at: DOCKER_HOST, the default socket, a docker context, podman's socket
    used: bool            # the one `sandbox` connects to
    local: bool           # a unix socket on this host: the runtime paths its /info lists can be checked here
    version: Mapping = field(default_factory=dict)    # GET /version ({} when it did not answer)
    info: Mapping = field(default_factory=dict)       # GET /info
    libpod: Mapping = field(default_factory=dict)     # podman's GET /libpod/info ({} for Docker)
    error: str = ""       # why it did not answer


def _plain(text: str) -> str:
    """"runc version 1.1.5+ds1\\ncommit: …" (podman's component text) → "1.1.5+ds1"; a bare version stays."""
    match = _VERSION.search(text or "")
    return match.group("version") if match else (text or "").strip().split("\n")[0]


def identify(version: dict, info: dict) -> EngineIdentity:
    """The identity from `GET /version` and `GET /info` (either may be {})."""
    components: dict[str, str] = {}
    kind, package = DOCKER, (info.get("RuncCommit") or {}).get("ID", "")
    for item in version.get("Components") or []:
        name, text = (item.get("Name") or "").strip().lower(), item.get("Version") or ""
        runtime = _RUNTIME.fullmatch(name)
        if name == "podman engine":
            kind, name = PODMAN, "engine"
        elif runtime:
            name = runtime.group("name")
            commit = re.search(r"^commit:\s*(\S+)", text, re.M)   # podman: the package version, where a distro built it
            package = package or (commit.group(1) if commit and "+" in commit.group(1) else "")
        components[name] = _plain(text)
    components["engine"] = version.get("Version") or components.get("engine", "")
    options = " ".join(info.get("SecurityOptions") or [])
    return EngineIdentity(kind=kind, version=components["engine"], api_version=version.get("ApiVersion", ""),
                          runtime=info.get("DefaultRuntime") or "runc", components=components, runtime_package=package,
                          rootless=bool(info.get("Rootless")) or "name=rootless" in options,   # podman says both
                          seccomp="name=seccomp" in options, lsm=tuple(n for n in ("apparmor", "selinux") if f"name={n}" in options),
                          userns="name=userns" in options)


@dataclass(frozen=True, kw_only=True)
class EngineFacts:
    """What the compiler must know of the engine that runs the plan. The defaults are what the
    launcher assumes where no engine was asked (`sandbox compile`): a rootful engine, ids not
    remapped, every limit enforced."""

    kind: str = DOCKER
    rootless: bool = False            # the engine runs as an unprivileged user (podman, Docker rootless)
    userns_remap: bool = False        # a rootful engine that maps container ids (dockerd --userns-remap)
    uid_map: tuple[tuple[int, int, int], ...] = ()   # (inside, outside, count), when the engine reports it
    gid_map: tuple[tuple[int, int, int], ...] = ()
    cgroup_version: str = ""
    unenforced: tuple[str, ...] = ()  # the limits (LIMIT_CONTROLLERS' fields) the engine would ignore

    @property
    def remapped(self) -> bool:
        """Uid 0 inside is not root outside: the probe's identity.userns is asked for."""
        return self.rootless or self.userns_remap

    @staticmethod
    def inside(outside: int, id_map: tuple[tuple[int, int, int], ...]) -> int | None:
        """The id inside that `outside` (a host id) is, under `id_map`; None where it is not mapped."""
        return next((first + outside - start for first, start, count in id_map if start <= outside < start + count), None)

    @property
    def label(self) -> str:
        how = "rootless" if self.rootless else "userns-remap" if self.userns_remap else "rootful"
        return f"{'podman' if self.kind == PODMAN else 'Docker'} ({how}, cgroup v{self.cgroup_version or '?'})"


def asked(engine) -> EngineFacts:
    """The facts of a connected engine (a launcher.engine.engineproto.Engine): /version and /info, and
    its own information where its dialect has some (podman's /libpod/info)."""
    return facts(engine.version(), engine.info(), engine.dialect.own_info(engine))


def _id_map(entries) -> tuple[tuple[int, int, int], ...]:
    return tuple((int(e["container_id"]), int(e["host_id"]), int(e["size"])) for e in entries or ())


def facts(version: dict, info: dict, libpod: dict | None = None) -> EngineFacts:
    """The engine's facts from `GET /version`, `GET /info` and, for podman, `GET /libpod/info`
    (podman's own document). podman's compatible /info says MemoryLimit and PidsLimit are true even
    rootless on cgroup v1, where it ignores them ("Resource limits are not supported and ignored on
    cgroups V1 rootless systems"): what it can apply is the controllers libpod's host lists."""
    kind = identify(version, info).kind
    options = " ".join(info.get("SecurityOptions") or ())
    host = (libpod or {}).get("host") or {}
    security, maps = host.get("security") or {}, host.get("idMappings") or {}
    rootless = bool(security.get("rootless", info.get("Rootless"))) or "name=rootless" in options
    if kind == PODMAN and "cgroupControllers" in host:
        controllers = set(host.get("cgroupControllers") or ())
        unenforced = tuple(f for f, c in LIMIT_CONTROLLERS if c not in controllers)
    elif kind == PODMAN and rootless:   # not told what it can apply: nothing, rather than what it claims
        unenforced = tuple(f for f, _ in LIMIT_CONTROLLERS)
    else:   # Docker: its flags follow the controllers it can use (rootless on cgroup v1: the driver "none")
        flags = {"memory": "MemoryLimit", "pids": "PidsLimit", "cpu": "CpuCfsQuota"}
        none = info.get("CgroupDriver") == "none"
        unenforced = tuple(f for f, c in LIMIT_CONTROLLERS if none or info.get(flags[c]) is False)
    return EngineFacts(kind=kind, rootless=rootless, userns_remap="name=userns" in options,
                       uid_map=_id_map(maps.get("uidmap")), gid_map=_id_map(maps.get("gidmap")),
                       cgroup_version=str(host.get("cgroupVersion") or info.get("CgroupVersion") or "").lstrip("v"),
                       unenforced=unenforced)
