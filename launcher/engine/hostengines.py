"""The engines on this host: every address an engine may answer at (launcher.host.host lists them), each
asked its /version and /info, for `sandbox doctor`'s row per engine; and whether the runtime paths
an engine lists can be checked here (only for an engine on this host's unix socket)."""

from __future__ import annotations

from typing import Callable

from launcher.engine import dialects, engine, engineapi
from launcher.errors import EngineError


def sightings() -> tuple:
    """Every engine this host may run sandboxes on (launcher.host.host.engine_addresses), each asked its
    /version and /info: for `sandbox doctor`'s row per engine (engineid.Sighting each)."""
    from launcher.host import host
    from launcher.host.engineid import Sighting, identify

    out = []
    for where in host.engine_addresses(engine.DEFAULT_SOCKET):
        local = where.address.startswith("unix://")
        version, info, libpod, error = {}, {}, {}, ""
        try:
            if where.address == "?":
                raise EngineError("its endpoint could not be read from the docker CLI's context files")
            if not (local or where.used):
                raise EngineError("not asked: not a unix socket (`sandbox` reaches it only through DOCKER_HOST)")
            found = engine.connect() if where.used else _unix(where.address[len("unix://"):])
            version, info = found.version(), found.info()
            libpod = dialects.of(identify(version, info).kind).own_info(found) or {}   # podman's /libpod/info
        except EngineError as exc:
            error = str(exc).splitlines()[0]
        out.append(Sighting(address=where.address, source=where.source, used=where.used, local=local,
                            version=version, info=info, libpod=libpod, error=error))
    return tuple(out)


def _unix(path: str) -> engine.Engine:
    """An engine on the unix socket at `path`, its requests versioned as connect() versions them
    (podman answers /libpod/* only under a version prefix)."""
    http = engineapi.Unix(path, timeout=10)
    found = engine.Engine(http)
    http.version = found.version().get("ApiVersion", "")
    return found


def runtime_check(connected) -> Callable[[str], bool] | None:
    """hostpaths.runtime_installed for an engine on this host's unix socket (the runtime paths its
    /info lists are this host's), None for a remote one (they cannot be checked from here)."""
    from launcher.host import hostpaths

    return hostpaths.runtime_installed if isinstance(getattr(connected, "http", None), engineapi.Unix) else None
