"""podman's dialect (4.3, recorded in tests/test_podman_dialect.py): its compat inspect words some
fields its own way, and some it says only in its libpod inspect (ContainerInfo.podman_*)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import Problem
from launcher.host import engineid
from launcher.host.hostfacts import HostFacts
from launcher.plan.dialects.docker import Dialect, Want
from launcher.plan.plan import ContainerSpec, Mount, MountKind, ProxySpec
from launcher.plan.runtimes import GVISOR
from launcher.policy.model import NetworkMode, Policy, WorkspaceMode

# The capabilities podman 4 grants by default (containers.conf default_capabilities as shipped):
# its inspect lists these as dropped for a CapDrop of ALL.
DEFAULT_CAPS = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")


def docker_name(image: str) -> str:
    """An image name as podman's compat API reports it: normalised as Docker does (sandbox/agent:x
    is docker.io/sandbox/agent:x, debian:12 docker.io/library/debian:12); a name with a registry
    stays as it is."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if slash else f"docker.io/library/{image}"


def local_name(image: str) -> str:
    """The other name podman's lookup may resolve a short name to: its own local builds'
    (sandbox/agent:x is localhost/sandbox/agent:x); a name with a registry is only itself."""
    return f"localhost/{image}" if docker_name(image) != image else image


# podman leaves the internal network's interface an IPv6 link-local address (Docker turns IPv6 off
# there): off, as the probe's net.routes requires in proxy mode.
NO_IPV6 = ("net.ipv6.conf.eth0.disable_ipv6", "1")
# podman's rootful defaults for the rlimits it always sets (fs.nr_open, and conmon's nproc; 4.3.1
# recorded), which it does not fit to the limits its runtime may raise to: the plan sets these, each
# within the host's hard limit, instead.
RLIMITS = (("nofile", 1048576), ("nproc", 32768))
MARKER = "/run/.containerenv"   # podman binds it (empty, read-only) into every container


def ulimits(hard: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int, int], ...]:
    """podman's default rlimits, each at most the host's hard limit (`hard`: name, limit; -1 or
    absent: unlimited), soft and hard alike as podman's own."""
    limits = dict(hard)
    return tuple((name, value, value) for name, default in RLIMITS
                 for value in [default if limits.get(name, -1) < 0 else min(default, limits[name])])


def tmpfs_options(mount: Mount) -> str:
    """Any tmpfs's HostConfig.Tmpfs options for podman 4 (it puts Mount-API ones there too, with
    mode 0 and a copy-up). It knows no uid=/gid=: `U` chowns an owned tmpfs to the container's
    user (so it is used only when that user is the owner: create_body checks). It copies the
    image's files at the target into a tmpfs unless told `notmpcopyup` (Docker never does), and
    adds no noexec where Docker does; an unowned one gets Docker's mode 1777."""
    size = f",size={mount.size_bytes}" if mount.size_bytes else ""
    mode, chown = (mount.mode, ",U") if mount.owner is not None else (0o1777, "")
    return f"{'ro' if mount.read_only else 'rw'}{size},mode={mode:04o}{chown},noexec,notmpcopyup"


def tmpfs_reported(mount: Mount) -> str:
    """What podman 4.3's inspect says of those options: notmpcopyup left out (a copy-up would
    show as tmpcopyup), its own rprivate,nosuid,nodev appended."""
    return tmpfs_options(mount).removesuffix(",notmpcopyup") + ",rprivate,nosuid,nodev"


def scratch_options(proxy: ProxySpec) -> str:
    """The proxy's scratch_options for podman 4 (no uid=/gid=: `U` chowns them to the proxy's user,
    which they are; no copy-up; noexec as Docker's HostConfig.Tmpfs has it)."""
    size = dict(part.split("=", 1) for part in proxy.scratch_options.split(","))["size"]
    return f"rw,size={size},mode=0700,U,noexec,notmpcopyup"


PODMAN_DEFAULT = "/usr/share/containers/seccomp.json"   # podman's default profile (containers-common)

# podman registers a runtime in containers.conf by its path alone ([engine.runtimes] runsc = ["/usr/bin/runsc"])
# and its Docker-compatible API takes no runtime flags: runsc would run without runtimes.GVISOR's arguments.
PODMAN_GVISOR_WHY = ("containers.conf's [engine.runtimes] names runsc by its path only, and the launcher needs it run "
                     "with " + " ".join(GVISOR[NetworkMode.NONE][1]) + " (without --oci-seccomp runsc "
                     "ignores the sandbox's seccomp profile)")
PODMAN_GVISOR = ("use Docker for `runtime: gvisor` (DOCKER_HOST=unix:///var/run/docker.sock); under podman, "
                 "`runtime: runc` (see docs/engines.md)")


def seccomp_refusals(policy: Policy, host: HostFacts) -> list[Problem]:
    """podman's default seccomp profile lets the agent make namespaces: the sandbox's profile is
    built from it (seccompfiles), so a podman plan without it is refused."""
    if host.engine.kind != engineid.PODMAN or host.seccomp_profile:
        return []
    return [Problem(file=policy.source, path="runtime", expected="a seccomp profile for podman",
                    found=f"none: podman's default profile {PODMAN_DEFAULT} cannot be read or is not a seccomp profile",
                    hint="install containers-common (it ships that file); the sandbox's profile is that one with "
                         "Docker's namespace rules")]


def copy_refusals(policy: Policy, host: HostFacts) -> list[Problem]:
    """Copy mode's workspace is an overlay the local volume driver mounts: rootless podman (4.3
    here) cannot ("mount: …/_data: special device overlay does not exist"), after the copy is made."""
    if not (host.engine.rootless and host.engine.kind == engineid.PODMAN and policy.workspace.mode is WorkspaceMode.COPY):
        return []
    return [Problem(file=policy.source, path="workspace.mode", expected="bind on rootless podman", found="copy",
                    hint="rootless podman cannot mount the copy's overlay volume: add --workspace-mode bind (the agent "
                         "then works on the tree itself), or use a rootful engine")]


def _words(value) -> str:
    return ", ".join(map(str, value)) or "none"


@dataclass(frozen=True)
class Podman(Dialect):
    name: str = "podman"
    proxy_by_hosts_entry: bool = True   # its internal network has no DNS server (docs/engines.md)
    # netavark's bridge has no switch for traffic between containers of one network (its `isolate`
    # keeps networks apart, not their containers): proxies sharing one could reach each other.
    shared_egress: bool = False
    marker_mounts: tuple[str, ...] = (MARKER,)
    internal_sysctls: tuple[tuple[str, str], ...] = (NO_IPV6,)
    seccomp_default: str = PODMAN_DEFAULT   # lets the agent make namespaces: rebuilt with Docker's rules
    gvisor_refused: str = PODMAN_GVISOR_WHY
    gvisor_hint: str = PODMAN_GVISOR

    def refusals(self, policy: Policy, host: HostFacts) -> list[Problem]:
        return copy_refusals(policy, host) + seccomp_refusals(policy, host)

    def ulimits(self, hard: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int, int], ...]:
        return ulimits(hard)

    def scratch_options(self, proxy: ProxySpec) -> str:
        return scratch_options(proxy)

    def runtime(self, info) -> str:
        return info.podman_runtime

    def capabilities(self, spec: ContainerSpec, info, want: Want, differ) -> None:
        if "ALL" not in spec.cap_drop:
            return super().capabilities(spec, info, want, differ)
        # podman reports the default capabilities it dropped, never ALL, and an added one that is a
        # default as not dropped (its CapAdd stays empty: podman 4.3.1, recorded); its libpod
        # inspect's BoundingCaps and EffectiveCaps are the sets the process gets, containers.conf's
        # own defaults included: those are compared exactly.
        host = info.host
        if kept := [cap for cap in DEFAULT_CAPS if cap not in host.cap_drop and cap not in spec.cap_add]:
            differ(f"CapDrop: {_words(kept)} not dropped (the plan says ALL, the container drops "
                   f"{_words(sorted(host.cap_drop))})")
        planned = sorted(f"CAP_{cap}" for cap in spec.cap_add)
        bounding, effective = info.podman_bounding_caps, info.podman_effective_caps
        want("BoundingCaps", planned, sorted(bounding) if bounding is not None else None)
        if effective is None or not set(effective) <= set(planned):
            differ(f"EffectiveCaps: the plan allows {_words(planned)}, the container has "
                   f"{_words(sorted(effective)) if effective is not None else 'None'}")

    def security_opt(self, spec: ContainerSpec) -> list[str]:
        # podman's inspect of a container its libpod create made says nothing of seccomp (not its
        # file, not even unconfined; compat and libpod alike, podman 4.3.1 recorded,
        # docs/engines.md): the probe's seccomp.mode and seccomp.unshare prove the profile there.
        return sorted(o for o in spec.security_opt if not o.startswith("seccomp="))

    def network(self, spec: ContainerSpec, info, want: Want) -> None:
        if spec.network_mode in ("none", "bridge", "default", ""):
            return super().network(spec, info, want)
        # podman's compat inspect says `bridge` for a container on any bridge network: which one is
        # in NetworkSettings, where the plan's network must be the only one
        want("NetworkMode", "bridge", info.host.network_mode)
        want("Networks", [spec.network_mode], sorted(info.networks))

    def namespace_mode(self, reported: str) -> str:
        return "" if reported == "private" else reported   # podman names the default

    def sysctls(self, spec: ContainerSpec, info, want: Want) -> None:
        """Neither of podman's inspects reports a sysctl (4.3.1, recorded): the probe's net.routes proves IPv6 off."""

    def binds(self, spec: ContainerSpec) -> list[str]:
        """podman 4.3 lists every bind and volume in HostConfig.Binds."""
        return [f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'},{'nocopy,' if m.no_copy else ''}rprivate,"
                f"{'nosuid,nodev,' if m.kind is MountKind.VOLUME else ''}rbind"
                for m in spec.mounts if m.kind in (MountKind.BIND, MountKind.VOLUME)]

    def log_config(self, spec: ContainerSpec, info) -> tuple[tuple, tuple]:
        # its one log file is cut at Size (10m as 10MB); max-file has no podman meaning
        size = dict(spec.log_options).get("max-size", "")
        size = size[:-1] + size[-1].upper() + "B" if size[-1:].lower() in ("k", "m", "g") else size
        return ("json-file", size), (info.host.log_type, info.podman_log_size)

    def image(self, spec: ContainerSpec, info, want: Want) -> None:
        # a short name is the image podman's lookup finds: its own builds' localhost/, or docker.io/
        if info.image not in (docker_name(spec.image), local_name(spec.image)):
            want("Image", docker_name(spec.image), info.image)

    def own_env(self, image_env: list[str]) -> list[str]:
        # podman sets these in every container, and its PATH where the image has none
        return ["HOSTNAME=", "TERM=", "container="] + ([] if any(i.startswith("PATH=") for i in image_env) else ["PATH="])

    def in_tmpfs(self, mount: Mount) -> bool:
        return mount.kind is MountKind.TMPFS   # podman puts every tmpfs there

    def tmpfs_reported(self, mount: Mount) -> str:
        return tmpfs_reported(mount)


PODMAN = Podman()
