"""Callbacks that check a flag's value before anything is created (a bad one is click's usage
error, exit 2): durations, the names of sandboxes and copies to make, --port pairs, --registries."""

from __future__ import annotations

import re

import click


def duration(ctx, param, value, *, hint: str | None = None):
    """A duration option's callback (`hint`: the name of an argument checked by hand)."""
    from launcher.policy.policy import MAX_TIMEOUT_SECONDS, parse_duration

    if value is not None and not re.fullmatch(r"[0-9]+[smh]?", value):
        raise click.BadParameter("expected seconds, or a number with s, m or h (for example 90s, 10m)", param_hint=hint)
    if value is not None and not 0 < parse_duration(value) <= MAX_TIMEOUT_SECONDS:
        raise click.BadParameter("expected a duration above zero and at most 168h (a week)", param_hint=hint)
    return value


# Docker's (and podman's) rule for a container name; the sandbox's volumes and networks are named after it.
_SANDBOX_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def new_name(ctx, param, value):
    """The name of a sandbox or copy to create, checked before anything is: the engine would refuse it halfway."""
    if value is not None and not _SANDBOX_NAME.fullmatch(value):
        raise click.BadParameter(f"expected a letter or digit, then at least one more of letters, digits, '_', '.' "
                                 f"and '-' (as Docker names containers); found {value!r}")
    return value


def port_specs(ctx, param, values):
    """--port: each [HOST_PORT:]PORT parsed (exit 2 when malformed), no host port twice."""
    from launcher.launch import ports

    specs = []
    for text in values:
        try:
            specs.append(ports.parse_spec(text))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    hosts = [s.host_port for s in specs if s.host_port]
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise click.BadParameter(f"expected each host port once, found {', '.join(map(str, twice))} more than once")
    return tuple(specs)


REGISTRIES = "sandbox.registries"   # ctx.meta: the names --registries (or the setting) gave


def registries_option(command):
    """--registries (run, up, compile, explain, devcontainer): the registries setting's flag."""
    return click.option("--registries", "registries", multiple=True, metavar="NAMES", expose_value=False,
                        callback=registry_names,
                        help="Package registries to reach read-only (GET and HEAD only, through the proxy): a "
                             "comma-separated list of pypi, npm, debian; repeatable. Any preset, untrusted too "
                             "(network none becomes proxy mode with these rules alone; copy mode stays). "
                             "Later layers can still narrow it. Default: the registries setting.")(command)


def registry_names(ctx, param, value):
    """--registries (or the setting's value, settle puts it here too), checked at once: names only."""
    from launcher.errors import PolicyError
    from launcher.policy import registries

    try:
        ctx.meta[REGISTRIES] = registries.names(value) if value else ()
    except PolicyError as exc:
        raise click.BadParameter(f"{exc.problems[0].found}: {exc.problems[0].hint}") from None
    return ctx.meta[REGISTRIES]
