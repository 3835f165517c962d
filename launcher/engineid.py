"""Which engine answers the Engine API: Docker, or podman through its Docker-compatible service.
Both answer `GET /version` with a `Version` — podman with its own ("4.3.1"), which read as Docker's
would be judged against Docker's advisories — so the identity is taken from the components the
answer lists (podman names one "Podman Engine", and its OCI runtime "OCI Runtime (crun)")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

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

    @property
    def label(self) -> str:
        return f"{'Podman' if self.kind == PODMAN else 'Docker'} {self.version or '?'}"


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
    return EngineIdentity(kind=kind, version=components["engine"], api_version=version.get("ApiVersion", ""),
                          runtime=info.get("DefaultRuntime") or "runc", components=components, runtime_package=package)
