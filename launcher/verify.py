"""Reading the probe's report, and comparing `docker inspect` of the created container with the plan."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan import PROBE_END, ContainerSpec, MountKind


@dataclass(frozen=True, kw_only=True)
class Check:
    id: str
    ok: bool
    expected: str
    observed: str


@dataclass(frozen=True, kw_only=True)
class ProbeReport:
    checks: tuple[Check, ...]
    finished: bool       # the probe printed its PROBE-END line
    verdict_ok: bool     # ... and that line said ok

    @property
    def ok(self) -> bool:
        # Fail closed: a crash, a cut-off report or a single failed check is a failure.
        return self.finished and self.verdict_ok and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


def parse_probe(lines: list[str]) -> ProbeReport:
    checks, finished, verdict = [], False, False
    for line in lines:
        fields = line.rstrip("\r").split("\t")
        if fields[0] == "PROBE" and len(fields) == 5:
            checks.append(Check(id=fields[1], ok=fields[2] == "pass", expected=fields[3], observed=fields[4]))
        elif fields[0] == PROBE_END:
            finished, verdict = True, len(fields) > 1 and fields[1] == "ok"
            break
    return ProbeReport(checks=tuple(checks), finished=finished, verdict_ok=verdict)


def compare_inspect(spec: ContainerSpec, attrs: dict, image_env: list[str]) -> list[str]:
    """Differences between the plan and what the engine actually created (empty: they agree)."""
    host, config = attrs.get("HostConfig") or {}, attrs.get("Config") or {}
    diffs: list[str] = []

    def want(field: str, expected, found) -> None:
        if expected != found:
            diffs.append(f"{field}: expected {expected!r}, found {found!r}")

    want("Privileged", False, host.get("Privileged"))
    want("CapDrop", sorted(spec.cap_drop), sorted(host.get("CapDrop") or []))
    want("CapAdd", sorted(spec.cap_add), sorted(host.get("CapAdd") or []))
    want("ReadonlyRootfs", spec.read_only_root, host.get("ReadonlyRootfs"))
    options = host.get("SecurityOpt") or []
    want("SecurityOpt", sorted(spec.security_opt), sorted(options))
    for weak in ("seccomp=unconfined", "seccomp:unconfined", "apparmor=unconfined", "apparmor:unconfined"):
        if weak in options:
            diffs.append(f"SecurityOpt: {weak} must not be set")
    want("NetworkMode", spec.network_mode, host.get("NetworkMode"))
    for field in ("PidMode", "UTSMode", "UsernsMode"):
        want(field, spec.pid_mode if field == "PidMode" else "", host.get(field) or "")
    if host.get("IpcMode") == "host":
        diffs.append("IpcMode: expected a private namespace, found 'host'")
    want("Devices", list(spec.devices), [f"{d['PathOnHost']}:{d['PathInContainer']}" for d in host.get("Devices") or []])
    want("GroupAdd", list(spec.group_add), host.get("GroupAdd") or [])
    want("Dns", list(spec.dns), host.get("Dns") or [])
    want("PortBindings", {}, host.get("PortBindings") or {})
    want("PublishAllPorts", False, bool(host.get("PublishAllPorts")))
    want("Binds", [], host.get("Binds") or [])
    want("PidsLimit", spec.pids_limit, host.get("PidsLimit"))
    want("Memory", spec.memory_bytes, host.get("Memory"))
    want("NanoCpus", spec.nano_cpus, host.get("NanoCpus"))
    want("User", spec.user, config.get("User"))
    want("Image", spec.image, config.get("Image"))
    want("Entrypoint", list(spec.entrypoint), config.get("Entrypoint") or [])
    want("Cmd", list(spec.command), config.get("Cmd") or [])
    names = lambda env: sorted({item.split("=", 1)[0] for item in env})  # noqa: E731
    want("Env names", names([f"{k}=" for k, _ in spec.env] + image_env), names(config.get("Env") or []))
    planned = sorted((m.kind.value, m.target, not m.read_only, m.source if m.kind is not MountKind.TMPFS else "")
                     for m in spec.mounts)
    found = sorted((m.get("Type"), m.get("Destination"), bool(m.get("RW")),
                    m.get("Name") if m.get("Type") == "volume" else (m.get("Source") or ""))
                   for m in attrs.get("Mounts") or [])
    want("Mounts", planned, found)
    return diffs
