"""Reading the probe's report, and comparing `docker inspect` of the created container with the plan."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.engineproto import ContainerInfo
from launcher.plan import PROBE_END, ContainerSpec, MountKind


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


# The capabilities podman 4 grants by default (containers.conf default_capabilities as shipped):
# its inspect lists these as dropped for a CapDrop of ALL.
PODMAN_DEFAULT_CAPS = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                       "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")


def _podman_binds(spec: ContainerSpec) -> list[str]:
    """HostConfig.Binds as podman 4.3 reports the plan's binds and volumes (it lists every one)."""
    return [f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'},{'nocopy,' if m.no_copy else ''}rprivate,"
            f"{'nosuid,nodev,' if m.kind is MountKind.VOLUME else ''}rbind"
            for m in spec.mounts if m.kind in (MountKind.BIND, MountKind.VOLUME)]


def _podman_size(size: str) -> str:
    """A json-file max-size (10m) as podman's libpod inspect says it (10MB)."""
    return size[:-1] + size[-1].upper() + "B" if size[-1:].lower() in ("k", "m", "g") else size


def docker_name(image: str) -> str:
    """An image name as podman's compat API reports it: normalised as Docker does (sandbox/agent:x
    is docker.io/sandbox/agent:x, debian:12 docker.io/library/debian:12); a name with a registry
    stays as it is."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if slash else f"docker.io/library/{image}"


def podman_local_name(image: str) -> str:
    """The other name podman's lookup may resolve a short name to: its own local builds'
    (sandbox/agent:x is localhost/sandbox/agent:x); a name with a registry is only itself."""
    return f"localhost/{image}" if docker_name(image) != image else image


def compare_inspect(spec: ContainerSpec, info: ContainerInfo, image_env: list[str], podman: bool = False) -> list[str]:
    """Differences between the plan and what the engine actually created, one sentence each that
    names the field and both values (empty: they agree). `podman`: the engine is podman, whose
    inspect words some fields its own way and says some only in its libpod inspect (see
    tests/test_podman_dialect.py)."""
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
    want("Runtime", spec.runtime, info.podman_runtime if podman else host.runtime)
    if podman and "ALL" in spec.cap_drop:
        # podman reports the default capabilities it dropped, never ALL, and an added one that is a
        # default as not dropped (its CapAdd stays empty: podman 4.3.1, recorded); its libpod
        # inspect's BoundingCaps and EffectiveCaps are the sets the process gets, containers.conf's
        # own defaults included: those are compared exactly.
        if kept := [cap for cap in PODMAN_DEFAULT_CAPS if cap not in host.cap_drop and cap not in spec.cap_add]:
            diffs.append(f"CapDrop: {_words(kept)} not dropped (the plan says ALL, the container drops "
                         f"{_words(sorted(host.cap_drop))})")
        planned = sorted(f"CAP_{cap}" for cap in spec.cap_add)
        bounding, effective = info.podman_bounding_caps, info.podman_effective_caps
        want("BoundingCaps", planned, sorted(bounding) if bounding is not None else None)
        if effective is None or not set(effective) <= set(planned):
            diffs.append(f"EffectiveCaps: the plan allows {_words(planned)}, the container has "
                         f"{_words(sorted(effective)) if effective is not None else 'None'}")
    else:
        want("CapDrop", sorted(spec.cap_drop), sorted(host.cap_drop))
        want("CapAdd", sorted(spec.cap_add), sorted(host.cap_add))
    want("ReadonlyRootfs", spec.read_only_root, host.read_only_root)
    options = list(host.security_opt)
    # podman's inspect of a container its libpod create made says nothing of seccomp (not its file,
    # not even unconfined; compat and libpod alike, podman 4.3.1 recorded, docs/engines.md): the
    # probe's seccomp.mode and seccomp.unshare prove the profile there.
    want("SecurityOpt", sorted(o for o in spec.security_opt if not (podman and o.startswith("seccomp="))), sorted(options))
    for weak in ("seccomp=unconfined", "seccomp:unconfined", "apparmor=unconfined", "apparmor:unconfined"):
        if weak in options:
            diffs.append(f"SecurityOpt: {weak} is set, which switches off a protection the plan requires")
    if podman and spec.network_mode not in ("none", "bridge", "default", ""):
        # podman's compat inspect says `bridge` for a container on any bridge network: which one is
        # in NetworkSettings, where the plan's network must be the only one
        want("NetworkMode", "bridge", host.network_mode)
        want("Networks", [spec.network_mode], sorted(info.networks))
    else:
        want("NetworkMode", spec.network_mode, host.network_mode)
    private = lambda mode: "" if podman and mode == "private" else mode  # noqa: E731 - podman names the default
    want("PidMode", spec.pid_mode, private(host.pid_mode))
    want("UTSMode", "", private(host.uts_mode))
    want("UsernsMode", "", host.userns_mode)
    if host.ipc_mode == "host":
        diffs.append("IpcMode: the plan says a private namespace, the container has 'host'")
    want("Devices", list(spec.devices), list(host.devices))
    want("GroupAdd", list(spec.group_add), list(host.group_add))
    want("Dns", list(spec.dns), list(host.dns))
    want("ExtraHosts", list(spec.extra_hosts), list(host.extra_hosts))
    if not podman:   # neither of podman's inspects reports a sysctl (4.3.1, recorded): the probe's net.routes proves IPv6 off
        want("Sysctls", dict(spec.sysctls), host.sysctls)
    want("PortBindings", {}, host.port_bindings)
    want("PublishAllPorts", False, host.publish_all)
    want("Binds", sorted(_podman_binds(spec)) if podman else [], sorted(host.binds))
    want("PidsLimit", spec.pids_limit, host.pids_limit)
    want("Memory", spec.memory_bytes, host.memory)
    want("NanoCpus", spec.nano_cpus, host.nano_cpus)
    # The rlimits the plan sets (podman's, within the host's), exactly; one it leaves to the engine
    # (all of Docker's, dockerd's defaults) is not the plan's to compare.
    want("Ulimits", {name: (soft, hard) for name, soft, hard in spec.ulimits},
         {name: value for name, value in host.ulimits.items() if name in {u[0] for u in spec.ulimits}})
    if podman:   # its one log file is cut at Size; max-file has no podman meaning
        want("LogConfig", ("json-file", _podman_size(dict(spec.log_options).get("max-size", ""))),
             (host.log_type, info.podman_log_size))
    else:
        want("LogConfig", ("json-file", dict(spec.log_options)), (host.log_type, host.log_options))
    want("User", spec.user, info.user)
    if podman:   # a short name is the image podman's lookup finds: its own builds' localhost/, or docker.io/
        if info.image not in (docker_name(spec.image), podman_local_name(spec.image)):
            want("Image", docker_name(spec.image), info.image)
    else:
        want("Image", spec.image, info.image)
    want("Entrypoint", list(spec.entrypoint), list(info.entrypoint))
    want("Cmd", list(spec.command), list(info.command))
    names = lambda env: sorted({item.split("=", 1)[0] for item in env})  # noqa: E731
    own = ["HOSTNAME=", "TERM=", "container="] if podman else []   # podman sets these in every container,
    if podman and not any(item.startswith("PATH=") for item in image_env):   # and its PATH where the image has none
        own.append("PATH=")
    want("Env names", names([f"{k}=" for k, _ in spec.env] + list(image_env) + own), names(info.env))
    # Owned tmpfs are HostConfig.Tmpfs entries (not in inspect's Mounts): their options say owner and
    # mode. podman puts every tmpfs there.
    in_tmpfs = (lambda m: m.kind is MountKind.TMPFS) if podman else (lambda m: m.owned_tmpfs)
    want("Tmpfs", {m.target: m.podman_tmpfs_reported() if podman else m.tmpfs_options
                   for m in spec.mounts if in_tmpfs(m)}, host.tmpfs)
    planned = sorted((m.kind.value, m.target, not m.read_only, m.source if m.kind is not MountKind.TMPFS else "")
                     for m in spec.mounts if not in_tmpfs(m))
    found = sorted((m.kind, m.target, m.writable, m.source) for m in info.mounts)
    if planned != found:
        diffs += _mount_words(planned, found) or [f"Mounts: the plan says {_words(planned)}, the container has {_words(found)}"]
    return diffs
