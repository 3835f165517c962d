"""`sandbox port NAME PORT[:HOST_PORT]`: a server inside an `up` sandbox, on the host's loopback."""

from __future__ import annotations

import click

from launcher.cli import output
from launcher.cli.options import json_option, name_argument


@click.command(short_help="Forward a host port into an `up` sandbox.")
@name_argument()
@click.argument("spec", metavar="PORT[:HOST_PORT]")
@click.option("--address", default="127.0.0.1", show_default=True, metavar="IP",
              help="Listen on this host address instead. Anything but a loopback address lets every machine "
                   "that reaches it use the sandbox's port.")
@json_option("One JSON line on stdout once it listens (the host port 0 picked), one when it stops.", lines=True)
def port(name: str, spec: str, address: str, as_json: bool) -> None:
    """Forward the host's 127.0.0.1:HOST_PORT (default: PORT; 0 picks a free one) to
    127.0.0.1:PORT inside the running `up` sandbox NAME, until Ctrl-C (exit 0).

    \b
    Example:
      sandbox port NAME 5173          # the dev server inside, on http://127.0.0.1:5173
      sandbox port NAME 8000:18000    # port 8000 inside, on the host's port 18000

    Each connection is carried by its own relay process inside (the probe's busybox `nc`, as the
    sandbox's user, no new privileges) over the engine's exec stream: the sandbox gets no network,
    no interface and no published port, so every probe check still holds. A connection to a port
    nothing listens on inside is closed, and a line says so. Ctrl-C ends every relay.
    Exit 120: HOST_PORT in use, or NAME is not an `up` sandbox; 121: no such sandbox, it is not
    running, or it stopped meanwhile. With --json, stdout is a stream of JSON lines: "listening"
    (read host_port from it), then "stopped" with the connections served, or the error.
    """
    from launcher import engine, forward

    try:
        forward.parse_address(address)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--address") from None
    try:
        wanted = forward.parse_spec(spec, address)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="PORT[:HOST_PORT]") from None
    eng = engine.connect()
    where = forward.target(eng, name)
    with forward.Forwarder(eng, where, wanted, output.status) as forwarder:
        host = f"[{wanted.address}]" if ":" in wanted.address else wanted.address
        if not forward.is_loopback(wanted.address):
            output.status(f"warning: listening on {wanted.address}: whoever reaches this host on port "
                          f"{forwarder.port} reaches port {wanted.port} inside {name}")
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
