"""Reading the probe's report, and comparing `docker inspect` of the created container with the plan."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan.dialects import DOCKER, Dialect
from launcher.engine.engineproto import ContainerInfo
from launcher.plan.plan import PROBE_END, ContainerSpec, MountKind


@dataclass(frozen=True, kw_only=True)
class Check:
    id: str
    ok: bool
    expected: str
    observed: str
    verdict: str = ""    # the probe's word: pass, fail or n/a (ok for n/a only where the plan said so)


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


def parse_probe(lines: list[str], not_applicable: tuple[str, ...] = ()) -> ProbeReport:
    """The probe's report; an `n/a` verdict passes only for a check in `not_applicable` (the plan's
    ProbeExpectations.na): anywhere else it is a failure."""
    checks, finished, verdict = [], False, False
    for line in lines:
        fields = line.rstrip("\r").split("\t")
        if fields[0] == "PROBE" and len(fields) == 5:
            ok = fields[2] == "pass" or (fields[2] == "n/a" and fields[1] in not_applicable)
            checks.append(Check(id=fields[1], ok=ok, expected=fields[3], observed=fields[4], verdict=fields[2]))
        elif fields[0] == PROBE_END:
            finished, verdict = True, len(fields) > 1 and fields[1] == "ok"
            break
    return ProbeReport(checks=tuple(checks), finished=finished, verdict_ok=verdict)


def _words(value) -> str:
    if isinstance(value, (list, tuple, set)):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return repr(value) if isinstance(value, str) else str(value)


def _mount_words(planned: list[tuple], found: list[tuple]) -> list[str]:
    """What differs between the planned and the created mounts, a sentence each."""
    out = []
    by_target = {m[1]: m for m in planned}
    extra = [m for m in found if m not in planned]
    volumes = sorted(m[1] for m in extra if m[0] == "volume" and m[1] not in by_target)
    if volumes:   # an anonymous volume: the image's own VOLUME line
        out.append(f"Mounts: the image declares VOLUME {', '.join(volumes)}: writable volumes the policy does not declare")
    for kind, target, rw, source in extra:
        if kind == "volume" and target in volumes:
            continue
        was = by_target.get(target)
        access = "writable" if rw else "read-only"
        if was is None:
            out.append(f"Mounts: {target} is mounted ({kind} {source or '-'}, {access}) but not planned")
        else:
            out.append(f"Mounts: {target} is {kind} {source or '-'}, {access}; the plan says {was[0]} {was[3] or '-'}, "
                       f"{'writable' if was[2] else 'read-only'}")
    targets = {m[1] for m in found}
    out += [f"Mounts: {m[1]} ({m[0]} {m[3] or '-'}) is planned but missing" for m in planned if m[1] not in targets]
    return out


def compare_inspect(spec: ContainerSpec, info: ContainerInfo, image_env: list[str], dialect: Dialect = DOCKER) -> list[str]:
    """Differences between the plan and what the engine actually created, one sentence each that
    names the field and both values (empty: they agree). `dialect`: how this engine's inspect
    words the fields (launcher/plan/dialects/)."""
    host = info.host
    diffs: list[str] = []
    def want(field: str, expected, found) -> None:
        if expected == found:
            return
        if isinstance(expected, dict) and isinstance(found, dict):   # which keys first: a long one stays readable
            keys = [f"{_words(sorted(set(found) - set(expected)))} added"] if set(found) - set(expected) else []
            keys += [f"{_words(sorted(set(expected) - set(found)))} missing"] if set(expected) - set(found) else []
            keys += [f"{_words(sorted(k for k in set(expected) & set(found) if expected[k] != found[k]))} differ"] \
                if any(expected[k] != found[k] for k in set(expected) & set(found)) else []
            diffs.append(f"{field}: {'; '.join(keys)} (the plan says {_words(expected)}, the container has {_words(found)})")
        elif isinstance(expected, list) and isinstance(found, list):
            more = [x for x in found if x not in expected]
            less = [x for x in expected if x not in found]
            parts = ([f"{_words(more)} added"] if more else []) + ([f"{_words(less)} missing"] if less else [])
            diffs.append(f"{field}: {'; '.join(parts) or 'another order'} (the plan says {_words(expected)}, "
                         f"the container has {_words(found)})")
        else:
            diffs.append(f"{field}: the plan says {_words(expected)}, the container has {_words(found)}")

    want("Privileged", False, host.privileged)
    want("Runtime", spec.runtime, dialect.runtime(info))
    dialect.capabilities(spec, info, want, diffs.append)
    want("ReadonlyRootfs", spec.read_only_root, host.read_only_root)
    options = list(host.security_opt)
    want("SecurityOpt", dialect.security_opt(spec), sorted(options))
    for weak in ("seccomp=unconfined", "seccomp:unconfined", "apparmor=unconfined", "apparmor:unconfined"):
        if weak in options:
            diffs.append(f"SecurityOpt: {weak} is set, which switches off a protection the plan requires")
    dialect.network(spec, info, want)
    want("PidMode", spec.pid_mode, dialect.namespace_mode(host.pid_mode))
    want("UTSMode", "", dialect.namespace_mode(host.uts_mode))
    want("UsernsMode", "", host.userns_mode)
    if host.ipc_mode == "host":
        diffs.append("IpcMode: the plan says a private namespace, the container has 'host'")
    want("Devices", list(spec.devices), list(host.devices))
    want("GroupAdd", list(spec.group_add), list(host.group_add))
    want("Dns", list(spec.dns), list(host.dns))
    want("ExtraHosts", list(spec.extra_hosts), list(host.extra_hosts))
    dialect.sysctls(spec, info, want)
    want("PortBindings", {}, host.port_bindings)
    want("PublishAllPorts", False, host.publish_all)
    want("Binds", sorted(dialect.binds(spec)), sorted(host.binds))
    want("PidsLimit", spec.pids_limit, host.pids_limit)
    want("Memory", spec.memory_bytes, host.memory)
    want("NanoCpus", spec.nano_cpus, host.nano_cpus)
    # The rlimits the plan sets (an engine's own defaults, within the host's), exactly; one it leaves to the engine
    # (all of Docker's, dockerd's defaults) is not the plan's to compare.
    want("Ulimits", {name: (soft, hard) for name, soft, hard in spec.ulimits},
         {name: value for name, value in host.ulimits.items() if name in {u[0] for u in spec.ulimits}})
    want("LogConfig", *dialect.log_config(spec, info))
    want("User", spec.user, info.user)
    dialect.image(spec, info, want)
    want("Entrypoint", list(spec.entrypoint), list(info.entrypoint))
    want("Cmd", list(spec.command), list(info.command))
    names = lambda env: sorted({item.split("=", 1)[0] for item in env})  # noqa: E731
    want("Env names", names([f"{k}=" for k, _ in spec.env] + list(image_env) + dialect.own_env(image_env)), names(info.env))
    # Owned tmpfs are HostConfig.Tmpfs entries (not in inspect's Mounts): their options say owner and
    # mode (an engine may put every tmpfs there: its dialect says).
    want("Tmpfs", {m.target: dialect.tmpfs_reported(m) for m in spec.mounts if dialect.in_tmpfs(m)}, host.tmpfs)
    planned = sorted((m.kind.value, m.target, not m.read_only, m.source if m.kind is not MountKind.TMPFS else "")
                     for m in spec.mounts if not dialect.in_tmpfs(m))
    found = sorted((m.kind, m.target, m.writable, m.source) for m in info.mounts)
    if planned != found:
        diffs += _mount_words(planned, found) or [f"Mounts: the plan says {_words(planned)}, the container has {_words(found)}"]
    return diffs
