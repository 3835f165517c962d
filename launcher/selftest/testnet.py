"""A stand-in for the internet: our own upstream and canary containers on an internal Docker
network (nothing on it can leave the machine). Used by `sandbox selftest` and the proxy tests."""

from __future__ import annotations

import os
import time

from launcher import labels as label
from launcher.engine import enginebodies, images
from launcher.engine.engine import Engine
from launcher.errors import EngineError

# Names the upstream answers for, and names that land on the canary (which must never see a request).
UPSTREAM_ALIASES = ("allowed.test", "sub.allowed.test", "other.test", "wild.test", "sub.wild.test")
CANARY_ALIASES = ("denied.test", "canary.test", "allowed.test.evil.test", "evilallowed.test")
LABELS = {label.MANAGED: "1", label.KIND: "testnet"}


def ensure_upstream(engine: Engine) -> str:
    """The upstream image's tag, built first if missing."""
    image = images.upstream_image()
    if not engine.image_exists(image.tag):
        engine.build(str(image.context), image.tag, LABELS, lambda line: None)
    return image.tag


def tool_ulimits(engine: Engine) -> list[dict] | None:
    """A container's HostConfig.Ulimits that the engine can set here (its dialect's tool_ulimits:
    podman's defaults within this host's hard limits); None where its own always can (Docker)."""
    return enginebodies.ulimits(limits) if (limits := engine.dialect.tool_ulimits()) else None


class Internet:
    """Builds the upstream image if needed, then starts upstream and canary on a fresh network.
    `open_proxy` makes the upstream also a careless forward proxy (weakened-sandbox tests). Talks
    to the SDK client of `engine` directly: these are test fixtures, not sandboxes."""

    def __init__(self, engine: Engine, name: str | None = None, open_proxy: bool = False):
        self.engine, self.client, self.open_proxy = engine, engine.client, open_proxy
        self.network = name or f"sandbox-test-internet-{os.getpid()}"
        self.upstream = self.canary = None
        try:
            self.image = ensure_upstream(engine)
            # internal: whatever happens, nothing on this network can leave the machine
            self.client.networks.create(self.network, driver="bridge", internal=True, labels=LABELS)
            self.upstream = self._start("upstream", UPSTREAM_ALIASES)
            self.canary = self._start("canary", CANARY_ALIASES)
            self.canary_ip = self.client.api.inspect_container(self.canary)["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        except BaseException:
            self.close()
            raise

    def _start(self, name: str, aliases: tuple[str, ...]) -> str:
        api = self.client.api
        ref = api.create_container(
            self.image, name=f"{self.network}-{name}", labels=LABELS,
            environment={"UPSTREAM_NAME": name, "UPSTREAM_PAYLOAD": str(64 << 20),
                         "UPSTREAM_OPEN_PROXY": "1" if self.open_proxy and name == "upstream" else ""},
            host_config=api.create_host_config(network_mode=self.network, ulimits=tool_ulimits(self.engine)),
            networking_config=api.create_networking_config({self.network: api.create_endpoint_config(aliases=list(aliases))}))["Id"]
        api.start(ref)
        deadline = time.monotonic() + 30
        while b"READY" not in api.logs(ref):
            if time.monotonic() > deadline:
                raise EngineError(f"the test upstream {name} did not start")
            time.sleep(0.1)
        return ref

    def seen_by_canary(self) -> list[str]:
        return [line for line in self.client.api.logs(self.canary).decode().splitlines() if line != "READY"]

    def close(self) -> None:
        for ref in (self.upstream, self.canary):
            if ref:
                self.engine.remove(ref)
        self.engine.remove_network(self.network)
