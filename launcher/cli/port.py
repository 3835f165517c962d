"""`sandbox port NAME [HOST_PORT:]PORT`: a server inside an `up` sandbox, on the host's loopback."""

from __future__ import annotations

import click

from launcher.cli import output
from launcher.cli.options import json_option, name_argument


@click.command(short_help="Forward a host port into an `up` sandbox.")
@name_argument()
@click.argument("spec", metavar="[HOST_PORT:]PORT")
@click.option("--address", default="127.0.0.1", show_default=True, metavar="IP",
              help="Listen on this host address instead. Anything but a loopback address lets every machine "
                   "that reaches it use the sandbox's port.")
@click.option("--listen-fd", type=int, hidden=True)   # `up --port`'s keeper: the socket it took for HOST_PORT
@json_option("One JSON line on stdout once it listens (the host port 0 picked), one when it stops.", lines=True)
def port(name: str, spec: str, address: str, listen_fd: int | None, as_json: bool) -> None:
    """Forward the host's 127.0.0.1:HOST_PORT (default: PORT; 0 picks a free one) to
    127.0.0.1:PORT inside the running `up` sandbox NAME, until Ctrl-C (exit 0). The host port
    comes first, as in `docker run -p` and `sandbox up --port`.

    \b
    Example:
      sandbox port NAME 5173          # the dev server inside, on http://127.0.0.1:5173
      sandbox port NAME 18000:8000    # port 8000 inside, on the host's port 18000

    Each connection is carried by its own relay process inside (the probe's busybox `nc`, as the
    sandbox's user, no new privileges) over the engine's exec stream: the sandbox gets no network,
    no interface and no published port, so every probe check still holds. A connection to a port
    nothing listens on inside is closed, and a line says so. When HOST_PORT and PORT differ and
    only HOST_PORT is listened on inside, a warning says the pair looks swapped (before this
    order, `sandbox port` took PORT:HOST_PORT). Ctrl-C ends every relay.
    Exit 2: a malformed pair or a port out of range; 120: HOST_PORT in use, or NAME is not an `up`
    sandbox; 121: no such sandbox, it is not running, or it stopped meanwhile. With --json, stdout
    is a stream of JSON lines: "listening" (read host_port from it), then "stopped" with the
    connections served, or the error.
    """
    from launcher.engine import engine
    from launcher.launch import forward, ports

    try:
        forward.parse_address(address)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--address") from None
    try:
        wanted = forward.parse_spec(spec, address)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=ports.SYNTAX) from None
    eng = engine.connect()
    where = forward.target(eng, name)
    held = ports.inherited(listen_fd) if listen_fd is not None else None
    with forward.Forwarder(eng, where, wanted, output.status, held) as forwarder:
        host = f"[{wanted.address}]" if ":" in wanted.address else wanted.address
        if not forward.is_loopback(wanted.address):
            output.status(f"warning: listening on {wanted.address}: whoever reaches this host on port "
                          f"{forwarder.port} reaches port {wanted.port} inside {name}")
        if forward.swapped(eng, where, wanted):
            output.status(f"warning: nothing listens on port {wanted.port} inside {name}, but something does on "
                          f"{wanted.host_port}: the order is HOST_PORT:PORT (as docker run -p); for that one, "
                          f"`sandbox port {name} {wanted.port}:{wanted.host_port}`")
        output.status(f"forwarding {host}:{forwarder.port} to 127.0.0.1:{wanted.port} inside {name}; Ctrl-C stops")
        fields = {"address": wanted.address, "host_port": forwarder.port, "port": wanted.port}
        if as_json:
            output.emit(output.envelope(fields | {"state": "listening"}), final=False)
        try:
            forwarder.serve()
        except KeyboardInterrupt:
            pass
    output.status(f"stopped forwarding to {name} ({forwarder.served} connection{'s' * (forwarder.served != 1)})")
    if as_json:
        output.emit(output.envelope(fields | {"state": "stopped", "served": forwarder.served}))


COMMANDS = (port,)
