"""A sandbox's egress proxy at launch: its networks, its container (with the injected secrets'
values, read from the host only now), the wait until Squid accepts connections, and its audit."""

from __future__ import annotations

import time

from launcher import host
from launcher.engine import Engine
from launcher.egress.audit import EgressEvent, parse_log
from launcher.errors import EngineError, NotFound
from launcher.plan import LaunchPlan
from launcher.timings import timed

PROXY_READY = "Socket connections at"  # "Accepting [SSL bumped ]HTTP Socket connections at ..."
PROXY_TIMEOUT = 30


def start(engine: Engine, plan: LaunchPlan, listener) -> None:
    """Networks first, then the proxy; wait until Squid accepts connections."""
    values = secret_values(plan)   # read only now: the plan itself never holds a secret's value
    with timed(listener, "network"):
        for network in plan.networks:
            engine.create_network(network)
    listener.status(f"starting egress proxy {plan.proxy.name} ({len(plan.proxy.config.splitlines())} config lines)")
    with timed(listener, "proxy create"):
        ref = engine.create_proxy(plan.proxy, values)
    with timed(listener, "proxy start"):
        engine.start(ref)
    deadline = time.monotonic() + PROXY_TIMEOUT
    with timed(listener, "proxy ready"):
        while time.monotonic() < deadline:
            if PROXY_READY in engine.logs(ref, stdout=False, stderr=True):
                return
            if not engine.inspect(ref)["State"]["Running"]:
                break
            time.sleep(0.05)
    tail = "\n    ".join(engine.logs(ref, stdout=False, stderr=True).strip().splitlines()[-5:])
    raise EngineError(f"the egress proxy did not come up:\n    {tail}")


def secret_values(plan: LaunchPlan) -> dict[str, str]:
    """The proxy's variables carrying the injected secrets, read from the host; refused when unusable."""
    from launcher.errors import PolicyError, Problem
    from launcher.egress.inject import squid_value

    values = {}
    for secret in plan.proxy.secrets if plan.proxy else ():
        value = host.read_secret(secret.name, secret.from_env, secret.from_file)
        try:
            squid_value(value)
        except ValueError as exc:
            raise PolicyError([Problem(file=secret.from_file or f"${secret.from_env}", path=f"secrets ({secret.name})",
                                       expected="a single-line printable value", found=str(exc))]) from None
        values[secret.var] = value
    return values


def egress_events(engine: Engine, plan: LaunchPlan) -> tuple[EgressEvent, ...]:
    if not plan.proxy:
        return ()
    try:
        events = parse_log(engine.logs(plan.proxy.name))
    except NotFound:
        return ()
    # The probe's own request for a name that must be refused is not the agent's doing.
    return tuple(e for e in events if e.host != plan.probe.denyhost)
