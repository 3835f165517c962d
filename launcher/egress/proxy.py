"""A sandbox's egress proxy at launch: its networks, its container (with the injected secrets'
values, read from the host only now), the wait until Squid accepts connections, and its audit."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from launcher.egress.audit import EgressEvent, agents_own, parse_log
from launcher.engine import subnets
from launcher.engine.engine import Engine
from launcher.errors import EngineError, NotFound
from launcher.host import host
from launcher.plan.plan import LaunchPlan, pinned_proxy
from launcher.timings import timed

if TYPE_CHECKING:
    from concurrent.futures import Future

PROXY_READY = "Socket connections at"  # "Accepting [SSL bumped ]HTTP Socket connections at ..."
PROXY_TIMEOUT = 90   # 50 proxy-mode sandboxes starting at once on 2 cores: up to 19 s here
POLL = 0.02   # seconds between looks at the proxy's log while it starts (about 1 ms each)
T = TypeVar("T")


def start(engine: Engine, plan: LaunchPlan, listener, create_container: Callable[[LaunchPlan], T],
          start_container: Callable[[T], None] | None = None) -> T:
    """The networks, then the proxy, started and ready (Squid accepts connections); meanwhile,
    once its internal network exists, `create_container(plan)` makes the agent's container (the
    plan with the proxy's address pinned, where it has to be: plan.pinned_proxy). `start_container`
    (when given) starts it once the proxy's container exists, alongside the proxy's own start: its
    probe asks the proxy only once the launcher has said the proxy is ready, which it says only
    after this returned (probe.sh, _p_ask_proxy; ProbeOutput.proxy_ready), and the agent waits for the
    launcher's word after the report. With rules per request the sandbox trusts the proxy's CA
    from its start, which the proxy hands over once ready: it starts then. Returns only when every
    step has ended, so a clean-up after a failure finds everything that was made."""
    from concurrent.futures import ThreadPoolExecutor, wait   # here: it imports logging, which none mode never needs

    values = secret_values(plan)   # read only now: the plan itself never holds a secret's value
    interrupted = threading.Event()   # Ctrl-C or SIGTERM here: stop waiting for the proxy, clean up
    created = threading.Event()       # the proxy's container exists (the sandbox's start may begin)
    with ThreadPoolExecutor(max_workers=len(plan.networks) + 4) as pool:
        networks = {n.name: pool.submit(_network, engine, n, listener) for n in plan.networks}
        internal = networks.get(plan.proxy.internal_network)
        egress = networks.get(plan.proxy.egress_network)
        pinned = pool.submit(lambda: pinned_proxy(plan, internal.result() if internal else ""))
        made = pool.submit(_proxy, engine, plan, values, listener, pinned, egress, interrupted, created)
        container = pool.submit(lambda: create_container(pinned.result()[0]))
        steps = [*networks.values(), pinned, made, container]
        if start_container is not None:
            early = not plan.proxy.http_rules
            steps.append(pool.submit(_start_when, early, created, made, container, start_container))
        try:
            wait(steps)
        except BaseException:
            interrupted.set()
            raise   # once every step has ended (leaving the pool waits for them)
    for step in steps:
        step.result()   # the first failure, in the order of the steps
    return container.result()


def _start_when(early: bool, created: threading.Event, made: Future, container: Future,
                start_container: Callable) -> None:
    """Start the sandbox's container once it is made and the proxy's exists (`early`), else once
    the proxy is ready; never when either failed."""
    made_container = container.result()
    while not (early and created.is_set()) and not made.done():
        created.wait(POLL)
    if not (early and created.is_set()):
        made.result()   # the proxy's failure ends this step too
    start_container(made_container)


def _network(engine: Engine, network, listener) -> str:
    with timed(listener, "network" if network.internal else "egress network"):
        return (subnets.shared_network if network.shared else subnets.create_network)(engine, network)


def _proxy(engine: Engine, plan: LaunchPlan, values: dict[str, str], listener, pinned: Future,
           egress: Future | None, interrupted: threading.Event, created: threading.Event) -> None:
    """Created on the internal network once it exists, joined to the egress one once that exists."""
    address = pinned.result()[1]
    listener.status(f"starting egress proxy {plan.proxy.name} ({len(plan.proxy.config.splitlines())} config lines)")
    with timed(listener, "proxy create"):
        shared = next((n for n in plan.networks if n.shared and n.name == plan.proxy.egress_network), None)
        ref = engine.create_proxy(plan.proxy, values, egress_ready=egress.result if egress else lambda: None,
                                  address=address, remake=shared and (lambda: subnets.shared_network(engine, shared)))
    # The sandbox's start may begin alongside the proxy's: however long the engine's queue of starts
    # holds the proxy's (50 at once: up to ~20 s), its probe asks the proxy only once the launcher
    # has said the proxy is ready, and its 15 s for an answer begin then (probe.sh, _p_ask_proxy).
    created.set()
    with timed(listener, "proxy start"):
        engine.start(ref)
    deadline = time.monotonic() + PROXY_TIMEOUT
    with timed(listener, "proxy ready"):
        while time.monotonic() < deadline and not interrupted.is_set():
            log = engine.logs(ref, stdout=False, stderr=True)
            if PROXY_READY in log:
                if plan.proxy.http_rules:   # before the sandbox starts: it trusts the proxy's CA from then on
                    from launcher.egress import bump

                    bump.hand_over(plan.proxy, log)
                return
            if not engine.inspect(ref).running:
                break
            time.sleep(POLL)
    tail = "\n    ".join(engine.logs(ref, stdout=False, stderr=True).strip().splitlines()[-5:])
    raise EngineError(f"the egress proxy did not come up:\n    {tail}")


def secret_values(plan: LaunchPlan) -> dict[str, str]:
    """The proxy's variables carrying the injected secrets, read from the host; refused when unusable."""
    from launcher.errors import PolicyError, Problem
    from launcher.policy.inject import squid_value

    values = {}
    for secret in plan.proxy.secrets if plan.proxy else ():
        value = host.read_secret(secret.name, secret.from_env, secret.from_file)
        found = {secret.var: value}
        if secret.login:   # a subscription login: its header values, refreshed on the host first
            from launcher.agents import logins

            found = dict(zip((secret.var, *(var for _, var in secret.extra)),
                             logins.proxy_values(secret.login, value, secret.from_file or f"${secret.from_env}",
                                                 secret.from_file)))
        for var, text in found.items():
            try:
                squid_value(text)
            except ValueError as exc:
                raise PolicyError([Problem(file=secret.from_file or f"${secret.from_env}", path=f"secrets ({secret.name})",
                                           expected="a single-line printable value", found=str(exc))]) from None
        values.update(found)
    return values


def egress_events(engine: Engine, plan: LaunchPlan) -> tuple[EgressEvent, ...]:
    if not plan.proxy:
        return ()
    try:
        events = parse_log(engine.logs(plan.proxy.name))
    except NotFound:
        return ()
    return agents_own(events)


RELOAD_TIMEOUT = 30   # seconds for Squid to listen again after a reconfigure (well under one here)


def reload(engine: Engine, spec) -> None:
    """`sandbox egress`: the running proxy takes spec's configuration (and rule helper's file). Its
    start script checks it (squid -k parse) and signals Squid, which reconfigures: its connections,
    its CA and the sandbox stay. Returns once every port of the new configuration listens again;
    EngineError when the proxy refused it (the old configuration still in force) or did not come back."""
    import base64

    encode = lambda text: base64.b64encode(text.encode()).decode() if text else ""  # noqa: E731
    before = engine.logs(spec.name, stdout=False, stderr=True).count(PROXY_READY)
    ports = sum(1 for line in spec.config.splitlines() if line.startswith("http_port "))
    _exec(engine, spec, ["/usr/local/bin/start-proxy", "reload", encode(spec.config), encode(spec.http_rules)])
    deadline = time.monotonic() + RELOAD_TIMEOUT
    while time.monotonic() < deadline:
        log = engine.logs(spec.name, stdout=False, stderr=True)
        if log.count(PROXY_READY) >= before + ports:
            return
        if not engine.inspect(spec.name).running:
            break
        time.sleep(POLL * 5)
    tail = "\n    ".join(engine.logs(spec.name, stdout=False, stderr=True).strip().splitlines()[-5:])
    raise EngineError(f"the egress proxy {spec.name} did not listen again after its reconfigure:\n    {tail}")


def note(engine: Engine, spec, line: str) -> None:
    """One line (audit.change_line's) into the proxy's log, where the audit reads its requests."""
    _exec(engine, spec, ["/usr/local/bin/start-proxy", "note", line])


def _exec(engine: Engine, spec, argv: list[str]) -> None:
    exec_id, stream = engine.exec_stream(spec.name, argv, user=spec.user)
    said = b"".join((out or b"") + (err or b"") for out, err in stream).decode(errors="replace").strip()
    if engine.exec_exit_code(exec_id) != 0:
        raise EngineError(f"the egress proxy {spec.name} refused `start-proxy {argv[1]}`: {said or 'no reason given'}")
