"""The Engine's network calls (a part of launcher/engine/engine.py's Engine): create on a subnet,
inspect, list and remove, each request and answer in the engine dialect's words."""

from __future__ import annotations

from launcher import labels as label
from launcher.engine.engineapi import path_of
from launcher.engine.engineproto import NetworkInfo
from launcher.errors import EngineError
from launcher.plan.plan import NetworkSpec

MANAGED = label.MANAGED_SELECTOR


class Networks:
    """Mixed into Engine: its _json, _call and dialect do the asking."""

    def create_network(self, spec: NetworkSpec, subnet: str = "") -> str | None:
        """The network's subnet (`subnet`, or the engine's choice where its answer names it, else ""); None
        when `subnet` overlaps another's (nothing created). The request and its answer are the dialect's."""
        dialect = self.dialect
        path, body = dialect.network_request(spec, subnet)
        try:
            made = self._json(f"creating network {spec.name}", "POST", path, body=body)
        except EngineError as exc:
            if subnet and dialect.overlap_error in str(exc):
                return None
            raise
        try:
            return dialect.network_made(spec, made, subnet)
        except EngineError:
            self.remove_network(spec.name)   # fail closed: never leave a network that is not as asked
            raise

    def remove_network(self, name: str) -> None:
        if answer := self._call(f"removing network {name}", "DELETE", path_of("/networks/{}", name), missing=True):
            answer.read()

    def network_info(self, name: str) -> NetworkInfo | None:
        """`docker network inspect` (its containers too), or None when there is none."""
        found = self._json(f"inspecting network {name}", "GET", path_of("/networks/{}", name), missing=True)
        return None if found is None else NetworkInfo.of(found)

    def list_networks(self, *filters: str) -> list[NetworkInfo]:
        found = self._json("listing networks", "GET", "/networks", {"filters": {"label": [MANAGED, *filters]}})
        return [n for n in map(NetworkInfo.of, found) if label.matches(n.labels, (MANAGED, *filters))]
