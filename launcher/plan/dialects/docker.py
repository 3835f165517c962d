"""Docker's dialect: the plan needs nothing of its own for it, it refuses nothing the plan asks, and
its inspect reports what the plan asked for in the plan's own words. `info` below is an engineproto.ContainerInfo (not imported:
the compiler, below the engine layer, reads the plan-side decisions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from launcher.plan.plan import ContainerSpec, Mount

Want = Callable[[str, object, object], None]   # (field, expected, found): records a difference


@dataclass(frozen=True)
class Dialect:
    """How an engine's inspect says the plan's fields. Docker's is the plan's own; another engine's
    subclass says where its inspect words them otherwise."""

    name: str = "docker"
    # The proxy's name reaches the sandbox through an /etc/hosts entry, not the engine's resolver
    # (ProxySpec.hosts_entry: an internal network without a DNS server).
    proxy_by_hosts_entry: bool = False
    # Every launched proxy on one egress network (plan.SHARED_EGRESS), its containers kept apart by
    # the bridge's ICC switch; False: one egress network per sandbox (an engine without that switch).
    shared_egress: bool = True
    marker_mounts: tuple[str, ...] = ()   # files the engine binds into every container itself
    internal_sysctls: tuple[tuple[str, str], ...] = ()   # a proxy-mode sandbox's, on the internal network
    # The engine's default seccomp profile, the file the sandbox's is built from (seccompfiles: its
    # API takes a profile only as a file on the server); "": the plan's own profile goes inline.
    seccomp_default: str = ""
    gvisor_refused: str = ""   # why `runtime: gvisor` cannot run on this engine ("": it can, registered)
    gvisor_hint: str = ""      # what to do instead

    def refusals(self, policy, host) -> list:
        """What this engine cannot do of the policy (`host`: the HostFacts), as Problems, refused
        with the host-side refusals (refusals.check): nothing on Docker."""
        return []

    def ulimits(self, hard: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int, int], ...]:
        """The rlimits the plan sets (`hard`: the host's hard limits): none, the engine's defaults stand."""
        return ()

    def scratch_options(self, proxy) -> str:
        """The HostConfig.Tmpfs options of the proxy's scratch directories (`proxy`: a ProxySpec)."""
        return proxy.scratch_options

    def runtime(self, info) -> str:
        return info.host.runtime

    def capabilities(self, spec: ContainerSpec, info, want: Want, differ: Callable[[str], None]) -> None:
        want("CapDrop", sorted(spec.cap_drop), sorted(info.host.cap_drop))
        want("CapAdd", sorted(spec.cap_add), sorted(info.host.cap_add))

    def security_opt(self, spec: ContainerSpec) -> list[str]:
        """The plan's SecurityOpt as inspect reports it."""
        return sorted(spec.security_opt)

    def network(self, spec: ContainerSpec, info, want: Want) -> None:
        want("NetworkMode", spec.network_mode, info.host.network_mode)

    def namespace_mode(self, reported: str) -> str:
        """A PID or UTS mode as the plan says it ("" for a private namespace)."""
        return reported

    def sysctls(self, spec: ContainerSpec, info, want: Want) -> None:
        want("Sysctls", dict(spec.sysctls), info.host.sysctls)

    def binds(self, spec: ContainerSpec) -> list[str]:
        """HostConfig.Binds as inspect reports the plan's mounts (Docker: none, they are Mounts)."""
        return []

    def log_config(self, spec: ContainerSpec, info) -> tuple[tuple, tuple]:
        """(what the plan's logging looks like in inspect, what inspect says)."""
        return ("json-file", dict(spec.log_options)), (info.host.log_type, info.host.log_options)

    def image(self, spec: ContainerSpec, info, want: Want) -> None:
        want("Image", spec.image, info.image)

    def own_env(self, image_env: list[str]) -> list[str]:
        """Variables the engine sets in every container ("NAME=")."""
        return []

    def in_tmpfs(self, mount: Mount) -> bool:
        """A mount inspect lists in HostConfig.Tmpfs rather than in Mounts."""
        return mount.owned_tmpfs

    def tmpfs_reported(self, mount: Mount) -> str:
        return mount.tmpfs_options


DOCKER = Dialect()
