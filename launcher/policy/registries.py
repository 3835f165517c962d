"""Read-only package registries (`--registries pypi,npm`, the `registries` setting, `network.registries`):
the one table of registry names and their hosts, and the allow rules they stand for: GET and HEAD
only, enforced by the sandbox's own proxy (no upload, login or publish), for any preset, `untrusted`
included (whose network none becomes proxy mode with these rules alone)."""

from __future__ import annotations

import difflib
from dataclasses import replace

from launcher.errors import PolicyError, Problem
from launcher.policy.allowlist import DEFAULT_PORTS, AllowRule
from launcher.policy.httprules import HttpRule
from launcher.policy.model import NetworkMode, Policy

# name -> the hosts its clients fetch from (the devcontainer preset allows the same ones as tunnels).
# deb.debian.org is plain HTTP (port 80) in Debian's own sources: the proxy reads those requests as
# they are, nothing to intercept; HTTPS (443) is judged the same way with TLS terminated.
REGISTRIES: dict[str, tuple[str, ...]] = {
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "npm": ("registry.npmjs.org",),
    "debian": ("deb.debian.org",),
}
READ_ONLY = HttpRule(methods=("GET", "HEAD"), paths=("/",), mode="enforce")
_KEYS = ("name", "private", "ca_file")
EXAMPLE = "for example pypi,npm (known: " + ", ".join(REGISTRIES) + ")"


def unknown(name) -> str:
    """The hint for a name that is not a registry (a close one first)."""
    close = difflib.get_close_matches(str(name), REGISTRIES, n=1, cutoff=0.5)
    return (f"did you mean {close[0]!r}? " if close else "") + "known registries: " + ", ".join(REGISTRIES)


def split(value) -> list:
    """A command line's or a variable's `pypi,npm` (several flags or list items add up) as names."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [part.strip() for item in items for part in (item.split(",") if isinstance(item, str) else [item])
            if not isinstance(part, str) or part.strip()]


def rules(name: str, *, private: bool = False, ca_file: str = "") -> tuple[AllowRule, ...]:
    """The allow rules registry `name` stands for (a KeyError for an unknown one)."""
    return tuple(AllowRule(host=host, wildcard=False, ports=DEFAULT_PORTS, private=private,
                           http=replace(READ_ONLY, ca_file=ca_file), registry=name) for host in REGISTRIES[name])


def entry_problem(entry) -> tuple[str, str, str] | None:
    """Why a policy's `network.registries` entry is malformed: (key below it, expected, found), or None.
    An entry is a name, or {name, private, ca_file} for a network that intercepts TLS (its CA file:
    the only CAs the proxy then trusts for those hosts) or names resolving to a mirror inside (private)."""
    if isinstance(entry, dict):
        extra = sorted(set(entry) - set(_KEYS))
        if extra or "name" not in entry:
            return "", "{name: pypi, private: true|false, ca_file: FILE}", f"unknown key {extra[0]!r}" if extra else "no name"
        if not isinstance(entry.get("private", False), bool):
            return ".private", "true or false", repr(entry["private"])
        if not isinstance(entry.get("ca_file", ""), str):
            return ".ca_file", "a host path to a PEM file of CA certificates", repr(entry["ca_file"])
        if entry["name"] not in REGISTRIES:
            return ".name", "a registry: " + ", ".join(REGISTRIES), repr(entry["name"])
    elif not isinstance(entry, str) or entry not in REGISTRIES:
        return "", "a registry: " + ", ".join(REGISTRIES), repr(entry)
    return None


def entry_rules(entry, ca_file=lambda path: path) -> tuple[AllowRule, ...]:
    """The rules of a checked `network.registries` entry (`ca_file`: how the file's path is resolved)."""
    if isinstance(entry, str):
        return rules(entry)
    return rules(entry["name"], private=entry.get("private", False),
                 ca_file=ca_file(entry["ca_file"]) if entry.get("ca_file") else "")


def names(value, *, file: str = "command line", path: str = "--registries") -> tuple[str, ...]:
    """Registry names from a flag, a setting or a variable, in order, once each; refused with the
    known ones for an unknown name."""
    found, problems = [], []
    for index, name in enumerate(split(value)):
        if not isinstance(name, str) or name not in REGISTRIES:
            problems.append(Problem(file=file, path=f"{path}[{index}]" if path.startswith(("registries", "defaults"))
                                    else path, expected="a package registry name", found=repr(name), hint=unknown(name)))
        elif name not in found:
            found.append(name)
    if problems:
        raise PolicyError(problems)
    return tuple(found)


def with_registries(policy: Policy, wanted: tuple[str, ...]) -> Policy:
    """The base policy with the read-only rules of these registries (the command line's --registries,
    a setting): network none becomes proxy mode with them alone; the rest of the policy is unchanged.
    A registry the policy has already (network.registries, perhaps with its own CA file), or a host it
    allows more widely (devcontainer's tunnels), keeps its rule as it is."""
    from launcher.policy.layers import covers

    network = policy.network
    have = {r.registry for r in network.allow}
    # A host the policy allows already (a tunnel, wider) keeps its own rule.
    added = tuple(rule for name in wanted if name not in have for rule in rules(name)
                  if not any(covers(other, rule) for other in network.allow))
    if not added:
        return policy
    if network.mode is NetworkMode.NONE:
        network = replace(network, mode=NetworkMode.PROXY, allow=())
    return replace(policy, network=replace(network, allow=tuple(dict.fromkeys(network.allow + added))))


def chosen(policy: Policy) -> tuple[str, ...]:
    """The registries whose rules the (effective) policy still holds, in the table's order."""
    have = {r.registry for r in policy.network.allow if r.registry}
    return tuple(name for name in REGISTRIES if name in have)


def tool_environment(policy: Policy) -> dict[str, str]:
    """Variables that make the obvious install commands work as the agent's user on a read-only root
    (set only when a registry is allowed): pip installs into ~/.local when not in a venv (Debian marks
    its Python externally managed; the root is read-only anyway), `npm install -g` into ~/.local,
    and ~/.local/bin leads PATH. The proxy and CA variables are proxy mode's and ca_certificates'."""
    which = chosen(policy)
    if not which:
        return {}
    home = policy.home.target
    env = {"PATH": f"{home}/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    if "pypi" in which:
        env.update({"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if "npm" in which:
        env.update({"npm_config_prefix": f"{home}/.local", "npm_config_update_notifier": "false",
                    "npm_config_audit": "false", "npm_config_fund": "false"})
    return env
