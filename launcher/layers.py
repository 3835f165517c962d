"""Policy layers that only narrow: one named combine rule per field, and which layer decided what.

The base policy comes first; every later layer (org, user, repository, command line) may only narrow it.
"""

from __future__ import annotations

import enum
import hashlib
import shlex
from dataclasses import dataclass, replace
from typing import Sequence

from launcher.egress.rules import AllowRule
from launcher.errors import PolicyError, Problem
from launcher.model import Access, NetworkMode, Policy


class LayerKind(enum.Enum):
    PRESET = "preset"            # named in the base policy's `extends`
    BASE = "policy"              # --policy
    ORG = "org"                  # $SANDBOX_ORG_POLICY or /etc/sandbox/policy.yaml
    USER = "user"                # $XDG_CONFIG_HOME/sandbox/policy.yaml
    REPO = "repository"          # .sandbox.yaml at the workspace root, once approved
    GIT = "git config"           # core.hooksPath of the workspace, protected
    FLAGS = "command line"       # --timeout
    EXTRA = "layer"              # a file named on `sandbox check`'s command line


@dataclass(frozen=True, kw_only=True)
class Layer:
    kind: LayerKind
    file: str
    digest: str                                   # sha256 of the file's bytes; "" when not from a file
    values: tuple[tuple[str, object], ...]        # (field, typed value) for the fields this layer sets
    defaulted: frozenset[str] = frozenset()       # base layers: fields left to the schema's default

    @property
    def label(self) -> str:
        return f"{self.kind.value} {self.file}"


# field -> (attribute path in Policy, combine rule). Every schema field a layer can set is here; a
# layer setting a field that is not is refused, so a new field cannot be silently ignored.
FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "image": (("image",), "pin"),
    "workspace.target": (("workspace", "target"), "fixed"),
    "workspace.access": (("workspace", "access"), "read-only-wins"),
    "workspace.protect": (("workspace", "protect"), "union"),
    "workspace.git": (("workspace", "git"), "read-only-wins"),
    "mounts": (("mounts",), "intersect"),
    "tmpfs": (("tmpfs",), "intersect"),
    "network.mode": (("network", "mode"), "none-wins"),
    "network.allow": (("network", "allow"), "intersect"),
    "network.allow_ip_literals": (("network", "allow_ip_literals"), "false-wins"),
    "env.pass": (("env", "pass_names"), "intersect"),
    "env.set": (("env", "set_values"), "intersect"),
    "limits.pids": (("limits", "pids"), "minimum"),
    "limits.memory": (("limits", "memory_bytes"), "minimum"),
    "limits.cpus": (("limits", "cpus"), "minimum"),
    "limits.timeout": (("limits", "timeout_seconds"), "minimum"),
    "user": (("user",), "fixed"),
    "capabilities": (("capabilities",), "intersect"),
    "command": (("command",), "replace"),
    "secrets": (("secrets",), "intersect"),
}

RULES = {
    "pin": "the image may only be pinned to a digest",
    "fixed": "a later layer may only repeat this value",
    "read-only-wins": "read-only beats read-write",
    "union": "protected paths add up; none can be removed",
    "intersect": "allow-lists intersect: list only entries allowed so far",
    "none-wins": "network none beats proxy",
    "false-wins": "off beats on",
    "minimum": "limits take the minimum",
    "replace": "the last layer decides (what runs inside, not what is allowed)",
}


def get(policy: Policy, field: str):
    value = policy
    for attr in FIELDS[field][0]:
        value = getattr(value, attr)
    return value


def put(policy: Policy, field: str, value) -> Policy:
    path = FIELDS[field][0]
    if len(path) == 1:
        return replace(policy, **{path[0]: value})
    return replace(policy, **{path[0]: replace(getattr(policy, path[0]), **{path[1]: value})})


def full_layer(kind: LayerKind, policy: Policy, defaulted=frozenset()) -> Layer:
    """A layer that sets every field (a base policy or a preset)."""
    return Layer(kind=kind, file=policy.source, digest=policy.digest, defaulted=frozenset(defaulted),
                 values=tuple((f, get(policy, f)) for f in FIELDS))


# ---- display -------------------------------------------------------------------------------

def _size(n: int) -> str:
    for unit, factor in (("g", 1024 ** 3), ("m", 1024 ** 2), ("k", 1024)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _duration(n: int) -> str:
    for unit, factor in (("h", 3600), ("m", 60)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}s"


def show(field: str, value) -> str:
    """A value as a person writes it in a policy file."""
    if field == "limits.memory":
        return _size(value)
    if field == "limits.timeout":
        return _duration(value)
    if field == "limits.cpus":
        return f"{value:g}"
    if field == "user":
        return "auto" if value is None else f"{value[0]}:{value[1]}"
    if field == "command":
        return shlex.join(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(show_entry(field, v) for v in value) or "(none)"
    return str(value)


def show_entry(field: str, entry) -> str:
    if field == "mounts":
        return f"{entry.source}:{entry.target}:{'rw' if entry.access is Access.READ_WRITE else 'ro'}"
    if field == "tmpfs":
        return f"{entry.target} ({_size(entry.size_bytes)})"
    if field == "env.set":
        return f"{entry[0]}={entry[1]}"
    if field == "secrets":   # where the value comes from is shown, never the value
        ca = f", CA {entry.ca_file}" if entry.ca_file else ""
        return f"{entry.name} ({'$' + entry.env if entry.env else entry.file} -> {entry.upstream}{ca})"
    return str(entry)


# ---- combine rules -------------------------------------------------------------------------

class _Widening(Exception):
    """One or more parts of a layer's value would widen: (suffix of the key path, expected, found)."""

    def __init__(self, items: list[tuple[str, str, str]]):
        self.items = items
        super().__init__(items)


def _image_parts(ref: str) -> tuple[str, str | None, str | None]:
    name, _, digest = ref.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repo, tag = (name[:colon], name[colon + 1:]) if colon > slash else (name, None)
    return repo, tag or (None if digest else "latest"), digest or None


def _pin(a: str, b: str) -> str:
    if a == b:
        return a
    ra, ta, da = _image_parts(a)
    rb, tb, db = _image_parts(b)
    # Another tag is another image, also when the base is pinned (it would be silently ignored).
    if rb != ra or (da and db and db != da) or (tb is not None and ta is not None and tb != ta):
        raise _Widening([("", f"{a} or the same image pinned to a digest", b)])
    return b if db and not da else a   # an unpinned mention of a pinned image keeps the pin


def covers(wide: AllowRule, narrow: AllowRule) -> bool:
    """True when every (host, port) `narrow` allows is allowed by `wide`."""
    if not set(narrow.ports) <= set(wide.ports) or narrow.ip != wide.ip:
        return False
    if not wide.wildcard:
        return not narrow.wildcard and narrow.host == wide.host
    return narrow.host.endswith("." + wide.host) or (narrow.wildcard and narrow.host == wide.host)


def _entry_ok(field: str, so_far: tuple, entry) -> str | None:
    """None when `entry` is allowed by the list so far, else what was expected."""
    listed = show(field, so_far)
    if not so_far:
        return "no entry (nothing is allowed so far)"
    if field == "network.allow":
        return None if any(covers(r, entry) for r in so_far) else f"a rule covered by one of {listed}"
    if field == "mounts":
        same = [m for m in so_far if (m.source, m.target) == (entry.source, entry.target)]
        if not same:
            return f"one of the mounts {listed}"
        if same[0].access is Access.READ_ONLY and entry.access is Access.READ_WRITE:
            return f"{show_entry(field, same[0])} (read-only)"
        return None
    if field == "tmpfs":
        same = [t for t in so_far if t.target == entry.target]
        if not same:
            return f"one of the tmpfs mounts {listed}"
        return None if entry.size_bytes <= same[0].size_bytes else f"at most {show_entry(field, same[0])}"
    if field == "env.set":
        values = dict(so_far)
        if entry[0] not in values:
            return f"one of the variables {listed}"
        return None if values[entry[0]] == entry[1] else f"the value set so far ({entry[0]}={values[entry[0]]})"
    return None if entry in so_far else f"one of {listed}"


def _intersect(field: str, a: tuple, b: tuple) -> tuple:
    bad = []
    for index, entry in enumerate(b):
        expected = _entry_ok(field, a, entry)
        if expected:
            at = f".{entry[0]}" if field == "env.set" else f"[{index}]"
            bad.append((at, expected, show_entry(field, entry)))
    if bad:
        raise _Widening(bad)
    return b


def _stricter(strict, a, b):
    if a == strict and b != strict:
        raise _Widening([("", show_any(a), show_any(b))])
    return b


def show_any(value) -> str:
    return value.value if isinstance(value, enum.Enum) else ("true" if value is True else "false" if value is False else str(value))


def apply_rule(field: str, a, b):
    """The value of `field` after a layer sets it to `b` on top of `a`; raises _Widening."""
    rule = FIELDS[field][1]
    if rule == "pin":
        return _pin(a, b)
    if rule == "fixed":
        if a != b:
            raise _Widening([("", show(field, a), show(field, b))])
        return a
    if rule == "read-only-wins":
        return _stricter(Access.READ_ONLY, a, b)
    if rule == "none-wins":
        return _stricter(NetworkMode.NONE, a, b)
    if rule == "false-wins":
        return _stricter(False, a, b)
    if rule == "minimum":
        if b > a:
            raise _Widening([("", f"at most {show(field, a)}", show(field, b))])
        return b
    if rule == "union":
        return a + tuple(p for p in b if p not in a)
    if rule == "intersect":
        return _intersect(field, a, b)
    return b   # replace


def _consistent(policy: Policy) -> Policy:
    """Values a narrower neighbour field took away: no allow-list without a proxy, no IP rules once
    IP literals are off."""
    allow = policy.network.allow
    if policy.network.mode is NetworkMode.NONE:
        allow = ()
        if policy.secrets:   # no proxy, nothing to inject a secret
            policy = put(policy, "secrets", ())
    elif not policy.network.allow_ip_literals:
        allow = tuple(r for r in allow if not r.ip)
    return policy if allow == policy.network.allow else put(policy, "network.allow", allow)


# ---- the effective policy ------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Decision:
    field: str
    rule: str
    value: str
    decided_by: str                 # the layer whose value stands (or "default (schema)")
    set_by: tuple[str, ...]         # every layer that set the field


@dataclass(frozen=True, kw_only=True)
class Effective:
    policy: Policy
    layers: tuple[Layer, ...]
    decisions: tuple[Decision, ...]
    steps: tuple[Policy, ...]       # the policy after each layer, in order (steps[-1] is policy)


def _decider(layer: Layer, field: str) -> str:
    return "default (schema)" if field in layer.defaulted else layer.label


def combine(base: Policy, layers: Sequence[Layer], *, prior: Effective | None = None
            ) -> tuple[Effective, list[Problem]]:
    """Apply `layers` on top of `base`. Without `prior`, layers[0] describes `base` itself; with it,
    `base` is prior.policy as the command line amended it (--allow) and every layer narrows it.
    A widening part of a layer is reported and left out; the rest of that layer still applies,
    so every problem shows at once."""
    problems: list[Problem] = []
    if prior is None:
        deciders = {f: _decider(layers[0], f) for f in FIELDS}
        setters = {f: [layers[0].label] if f not in layers[0].defaulted else [] for f in FIELDS}
        all_layers, layers, steps = tuple(layers), layers[1:], [base]
    else:
        deciders = {d.field: d.decided_by for d in prior.decisions}
        setters = {d.field: list(d.set_by) for d in prior.decisions}
        for f in FIELDS:
            if get(base, f) != get(prior.policy, f):
                deciders[f] = LayerKind.FLAGS.value
                setters[f].append(LayerKind.FLAGS.value)
        all_layers, steps = prior.layers + tuple(layers), [*prior.steps[:-1], base]
    policy = base
    for layer in layers:
        for field, value in layer.values:
            before = get(policy, field)
            try:
                after = apply_rule(field, before, value)
            except _Widening as exc:
                for at, expected, found in exc.items:
                    problems.append(Problem(
                        file=layer.file, path=field + at, expected=f"{expected} (so far from {deciders[field]})",
                        found=found, hint=f"every layer after the base can only narrow: {RULES[FIELDS[field][1]]}"))
                continue
            setters[field].append(layer.label)
            if after != before:
                policy, deciders[field] = put(policy, field, after), layer.label
        narrowed = _consistent(policy)
        if narrowed != policy:
            policy, deciders["network.allow"] = narrowed, layer.label
        steps.append(policy)
    file_layers = [layer for layer in all_layers if layer.digest]
    if len(file_layers) > 1:
        text = "\n".join(f"{layer.kind.value}:{layer.digest}" for layer in file_layers)
        policy = replace(policy, digest=hashlib.sha256(text.encode()).hexdigest())
    steps[-1] = policy
    decisions = tuple(Decision(field=f, rule=FIELDS[f][1], value=show(f, get(policy, f)), decided_by=deciders[f],
                               set_by=tuple(setters[f])) for f in FIELDS)
    return Effective(policy=policy, layers=all_layers, decisions=decisions, steps=tuple(steps)), problems


def effective(base: Policy, layers: Sequence[Layer], *, prior: Effective | None = None) -> Effective:
    """The effective policy, or a PolicyError listing every widening attempt."""
    result, problems = combine(base, layers, prior=prior)
    if problems:
        raise PolicyError(problems)
    return result


def layers_table(eff: Effective) -> str:
    """`sandbox compile --show-layers`: the layers in order, then which one decided each field."""
    lines = ["layers (each may only narrow the ones above it):"]
    lines += [f"  {i}. {layer.label}" + (f"  sha256:{layer.digest[:12]}" if layer.digest else "")
              for i, layer in enumerate(eff.layers, 1)]
    width = max(len(f) for f in FIELDS)
    lines.append("")
    lines.append(f"{'field':{width}}  {'rule':14}  {'decided by':40}  value")
    for d in eff.decisions:
        lines.append(f"{d.field:{width}}  {d.rule:14}  {d.decided_by:40}  {d.value}")
    return "\n".join(lines)
