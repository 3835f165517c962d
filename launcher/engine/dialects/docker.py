"""Docker's way of being asked: the Engine API's own create requests (enginebodies), one inspect,
and its words for a subnet another network has. `EngineDialect` is the base of every engine's."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.engine import enginebodies
from launcher.plan.dialects import DOCKER, Dialect
from launcher.plan.plan import ContainerSpec, NetworkSpec, ProxySpec


@dataclass(frozen=True)
class EngineDialect:
    """How the launcher asks one engine's API for what the plan says, and what that engine does with
    it that the launcher must work around. Docker's is the Engine API as documented; another engine's
    subclass says where its requests or behaviour differ. Chosen once by the engine's kind (`of`)."""

    plan: Dialect = DOCKER            # its plan side: what the compiler and the inspect comparison need
    overlap_error: str = "overlaps"   # in its answer to a network create on a subnet another network has
    # An archive PUT unpacks each entry into the volume its path is in: a copy is filled by one PUT
    # into a created container (else the tools container copies it).
    archive_spans_volumes: bool = True
    # It chowns a volume's root to the container's user at its first attach, whatever the mount's
    # `ro`: a read-only overlay view then needs an upper layer of its own to take that chown.
    chowns_volume_at_attach: bool = False
    native_inspect: str = ""          # a second inspect of its own API, for what the compatible one leaves out

    @property
    def name(self) -> str:
        return self.plan.name

    # What `sandbox doctor` says of it where engines differ (launcher/doctor/doctor.py asks).
    rootful_fix: str = "optional: rootless Docker adds a layer (dockerd-rootless-setuptool.sh install)"
    userns_off: str = "off: uid 1000 inside is uid 1000 on the host"   # no userns-remap, not rootless
    userns_fix: str = "dockerd --userns-remap=default (or rootless mode) maps container ids away from host ids"

    def own_info(self, engine) -> dict | None:
        """Its own system information beside the compatible /info (`engine`: an engineproto.Engine),
        read by doctor and engineid.asked; None: it has none, /info says it all."""
        return None

    def judged(self, identity) -> tuple[str, ...]:
        """The components whose advisories apply (`identity`: an engineid.EngineIdentity): the engine
        itself and what runs its containers."""
        return (identity.kind, "runc", "containerd")

    def limits_words(self, rootless: bool, told: bool) -> tuple[str, str, str]:
        """doctor's cgroups row: (what it adds to a limit the engine would ignore, the fix, what it adds
        to limits that work); `told`: its own information said which controllers it may use."""
        return "", "enable the memory, pids and cpu cgroup controllers (kernel command line)", ""

    def tool_ulimits(self) -> tuple[tuple[str, int, int], ...]:
        """The rlimits of a container no plan describes (a tool's, the probe volume's filler, the test
        network's): none, its containers inherit the daemon's own, which its runtime never has to raise."""
        return ()

    def create_request(self, spec: ContainerSpec) -> tuple[str, dict | None, dict]:
        """(path, query, body) of the container create request for a plan's container."""
        return "/containers/create", {"name": spec.name}, enginebodies.create_body(spec)

    def network_request(self, spec: NetworkSpec, subnet: str) -> tuple[str, dict]:
        """(path, body) of the network create request (on `subnet`, else on its own choice)."""
        return "/networks/create", enginebodies.network_body(spec, subnet)

    def network_made(self, spec: NetworkSpec, made: dict, subnet: str) -> str | None:
        """The subnet of the network its create made (`made`: the answer; "" or None: the one asked,
        Docker's answer names none); EngineError when it is not as asked (the network is then removed)."""
        return subnet

    def proxy_body(self, spec: ProxySpec, env: dict[str, str], address: str) -> dict:
        """The egress proxy's create request (the compatible create on every engine)."""
        return enginebodies.proxy_body(spec, env, address, self.plan.scratch_options(spec))


DOCKER_API = EngineDialect()
