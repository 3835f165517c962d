"""Policy layers as ceilings: one named combine rule per field, which layer decided what, and
what each layer took away. The base comes first; every later layer (org, user, repository,
command line) narrows it by construction and is never refused for being wider."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from typing import Sequence

from launcher.policy import httprules, keybind
from launcher.errors import PolicyError, Problem
from launcher.policy.allowlist import AllowRule
from launcher.policy.model import Access, HomeMode, NetworkMode, Policy, Runtime, WorkspaceMode
from launcher.values import show


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
    "packages": (("packages",), "union"),   # the image's, not a boundary: the probe proves the result
    "build": (("build",), "replace"),
    "runtime": (("runtime",), "gvisor-wins"),
    "workspace.target": (("workspace", "target"), "fixed"),
    "workspace.access": (("workspace", "access"), "read-only-wins"),
    "workspace.protect": (("workspace", "protect"), "union"),
    "workspace.git": (("workspace", "git"), "read-only-wins"),
    "workspace.mode": (("workspace", "mode"), "copy-wins"),
    "workspace.exclude": (("workspace", "exclude"), "union"),
    "mounts": (("mounts",), "intersect"),
    "tmpfs": (("tmpfs",), "intersect"),
    "home.mode": (("home", "mode"), "tmpfs-wins"),
    "home.target": (("home", "target"), "fixed"),
    "home.size": (("home", "size_bytes"), "minimum"),
    "network.mode": (("network", "mode"), "none-wins"),
    "network.allow": (("network", "allow"), "intersect"),
    "network.allow_ip_literals": (("network", "allow_ip_literals"), "false-wins"),
    "network.model": (("network", "model"), "false-wins"),
    "env.pass": (("env", "pass_names"), "intersect"),
    "env.set": (("env", "set_values"), "intersect"),
    "limits.pids": (("limits", "pids"), "minimum"),
    "limits.memory": (("limits", "memory_bytes"), "minimum"),
    "limits.cpus": (("limits", "cpus"), "minimum"),
    "limits.timeout": (("limits", "timeout_seconds"), "minimum"),
    "limits.session": (("limits", "session_seconds"), "minimum"),
    "limits.idle": (("limits", "idle_seconds"), "minimum"),
    "user": (("user",), "fixed"),
    "capabilities": (("capabilities",), "intersect"),
    "command": (("command",), "replace"),
    "secrets": (("secrets",), "intersect"),
    "ca_certificates": (("ca_certificates",), "intersect"),
}

RULES = {
    "pin": "a later layer may pin the image to a digest; another image is ignored",
    "fixed": "decided by the base; a later layer's value is ignored",
    "read-only-wins": "read-only beats read-write",
    "copy-wins": "copy beats bind (nothing reaches the host tree before review)",
    "union": "entries add up (protected paths, exclusions, packages); none can be removed",
    "intersect": "allow-lists intersect: what every layer allows",
    "tmpfs-wins": "tmpfs beats volume (nothing persists to the next run)",
    "none-wins": "network none beats proxy",
    "gvisor-wins": "gvisor beats runc (a second kernel between the agent and the host's)",
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


# ---- combine rules -------------------------------------------------------------------------

class _Conflict(Exception):
    """Two layers that cannot both hold (two different pinned image digests)."""


def _image_parts(ref: str) -> tuple[str, str | None, str | None]:
    name, _, digest = ref.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    repo, tag = (name[:colon], name[colon + 1:]) if colon > slash else (name, None)
    return repo, tag or (None if digest else "latest"), digest or None


def _pin(a: str, b: str) -> str:
    """A later layer may pin the image it is given to a digest; another image is ignored (the
    image is no boundary either way); two different digests are a conflict."""
    if a == b:
        return a
    ra, ta, da = _image_parts(a)
    rb, tb, db = _image_parts(b)
    if rb != ra or (tb is not None and ta is not None and tb != ta):
        return a
    if da and db and db != da:
        raise _Conflict(f"{a} and {b} are pinned to different digests")
    return b if db and not da else a   # an unpinned mention of a pinned image keeps the pin


def covers(wide: AllowRule, narrow: AllowRule) -> bool:
    """True when every (host, port, address kind) `narrow` allows is allowed by `wide`."""
    if not set(narrow.ports) <= set(wide.ports) or narrow.ip != wide.ip or (narrow.private and not wide.private) \
            or not httprules.covers(wide.http, narrow.http):
        return False
    if not wide.wildcard:
        return not narrow.wildcard and narrow.host == wide.host
    return narrow.host.endswith("." + wide.host) or (narrow.wildcard and narrow.host == wide.host)


def _meet(a: AllowRule, b: AllowRule) -> AllowRule | None:
    """The rule allowing exactly what both allow, or None: the narrower name, the common ports."""
    ports, private, http = tuple(p for p in a.ports if p in b.ports), a.private and b.private, httprules.meet(a.http, b.http)
    if not ports or a.ip != b.ip or http is False:
        return None
    registry = a.registry or b.registry   # what explain says it came from
    name = lambda r: replace(r, ports=ports, private=private, http=http, registry=registry)   # noqa: E731 - the narrower rule
    if covers(name(a), name(b)):
        return name(b)
    if covers(name(b), name(a)):
        return name(a)
    return None


def _intersect(field: str, a: tuple, b: tuple) -> tuple:
    """What both lists allow, in the order of `a`: for allow rules their meet; for mounts the
    same source and target, read-only if either says so; for tmpfs the smaller size; for env.set
    the same value; for every other list the same entry."""
    if field == "network.allow":
        met = [m for x in a for y in b if (m := _meet(x, y)) is not None]
        return tuple(dict.fromkeys(m for m in met if not any(o != m and covers(o, m) for o in met)))
    if field == "mounts":
        other = {(m.source, m.target): m for m in b}
        return tuple(m if m.access is Access.READ_ONLY else other[(m.source, m.target)]
                     for m in a if (m.source, m.target) in other)
    if field == "tmpfs":
        other = {t.target: t for t in b}
        return tuple(replace(t, size_bytes=min(t.size_bytes, other[t.target].size_bytes), mode=t.mode & other[t.target].mode)
                     for t in a if t.target in other)
    if field == "secrets":   # a bound key: the same secret and binding, its paths narrowed; never moved
        met = [m for x in a for y in b if (m := keybind.meet_secret(x, y)) is not None]
        return tuple(dict.fromkeys(met))
    return tuple(entry for entry in a if entry in b)


def apply_rule(field: str, a, b):
    """The value of `field` after a layer sets it to `b` on top of `a`: never wider than `a`
    (nor than `b`, for the ceiling rules). Raises _Conflict only for two different image digests."""
    rule = FIELDS[field][1]
    if rule == "pin":
        return _pin(a, b)
    if rule == "fixed":
        return a
    if rule == "read-only-wins":
        return Access.READ_ONLY if Access.READ_ONLY in (a, b) else a
    if rule == "copy-wins":
        return WorkspaceMode.COPY if WorkspaceMode.COPY in (a, b) else a
    if rule == "tmpfs-wins":
        return HomeMode.TMPFS if HomeMode.TMPFS in (a, b) else a
    if rule == "none-wins":
        return NetworkMode.NONE if NetworkMode.NONE in (a, b) else a
    if rule == "gvisor-wins":
        return Runtime.GVISOR if Runtime.GVISOR in (a, b) else a
    if rule == "false-wins":
        return a and b
    if rule == "minimum":
        return min(a, b)
    if rule == "union":
        return a + tuple(p for p in b if p not in a)
    if rule == "intersect":
        return _intersect(field, a, b)
    return b   # replace


def _consistent(policy: Policy) -> Policy:
    """Values a narrower neighbour field took away: no allow-list without a proxy, no IP rules once IP
    literals are off, no model API once network.model is off, no bound key its host not intercepted."""
    allow = policy.network.allow
    if not policy.network.model and any(s.model for s in policy.secrets):
        policy = put(policy, "secrets", tuple(s for s in policy.secrets if not s.model))
    if policy.network.mode is NetworkMode.NONE:
        allow = ()
        if policy.secrets:   # no proxy, nothing to inject a secret
            policy = put(policy, "secrets", ())
    elif not policy.network.allow_ip_literals:
        allow = tuple(r for r in allow if not r.ip)
    served = tuple(s for s in policy.secrets if not s.bind or keybind.serving(s.bind, allow))
    policy = policy if served == policy.secrets else put(policy, "secrets", served)   # nothing would swap it
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
class Note:
    """A layer took something away from what was asked (or its own value was ignored)."""

    layer: str                      # label of that layer
    field: str
    asked: str                      # the value before it, and who asked for it
    left: str                       # what is left
    explicit: bool = False          # what it took away was asked for on the command line
    kind: str = "narrowed"          # narrowed, ignored (a field that is not a ceiling), widened (override)

    def __str__(self) -> str:
        return f"{self.layer}: {self.field}: asked {self.asked}, left {self.left}"


@dataclass(frozen=True, kw_only=True)
class Effective:
    policy: Policy
    layers: tuple[Layer, ...]
    decisions: tuple[Decision, ...]
    steps: tuple[Policy, ...]       # the policy after each layer, in order (steps[-1] is policy)
    notes: tuple[Note, ...] = ()


CEILINGS = ("read-only-wins", "copy-wins", "tmpfs-wins", "none-wins", "gvisor-wins", "false-wins", "minimum", "intersect")


def _same(field: str, a, b) -> bool:
    return set(a) == set(b) if isinstance(a, tuple) and FIELDS[field][1] == "intersect" else a == b


def widened(field: str, before, after) -> bool:
    """Whether `after` allows something `before` did not (only the ceiling rules can say)."""
    return FIELDS[field][1] in CEILINGS and not _same(field, apply_rule(field, before, after), after)


def _decider(layer: Layer, field: str) -> str:
    return "default (schema)" if field in layer.defaulted else layer.label


def combine(base: Policy, layers: Sequence[Layer], *, prior: Effective | None = None, override: bool = False
            ) -> tuple[Effective, list[Problem]]:
    """Apply `layers` on top of `base`. Without `prior`, layers[0] describes `base` itself; with it,
    `base` is prior.policy as the command line amended it (--allow). Every layer is a ceiling: the
    result is never wider than `base` or any layer, and each thing a layer takes away is a Note.
    With `override` (a policy file's own fields over the presets it extends) a layer's value
    replaces, and each widening is a Note. Problems: only real conflicts (two image digests)."""
    problems: list[Problem] = []
    notes: list[Note] = []
    if prior is None:
        deciders = {f: _decider(layers[0], f) for f in FIELDS}
        setters = {f: [layers[0].label] if f not in layers[0].defaulted else [] for f in FIELDS}
        all_layers, layers, steps = tuple(layers), layers[1:], [base]
        requested: tuple = ()
    else:
        deciders = {d.field: d.decided_by for d in prior.decisions}
        setters = {d.field: list(d.set_by) for d in prior.decisions}
        for f in FIELDS:
            if get(base, f) != get(prior.policy, f):
                deciders[f] = LayerKind.FLAGS.value
                setters[f].append(LayerKind.FLAGS.value)
        all_layers, steps = prior.layers + tuple(layers), [*prior.steps[:-1], base]
        # --allow entries: an explicit request each, which must survive every ceiling under CI
        requested = tuple(r for r in base.network.allow if r not in prior.policy.network.allow)
    policy = base
    for layer in layers:
        for field, value in layer.values:
            before = get(policy, field)
            rule = FIELDS[field][1]
            if override:
                after = before + tuple(p for p in value if p not in before) if rule == "union" else value
                if widened(field, before, after):
                    notes.append(Note(layer=layer.label, field=field, asked=f"{show(field, before)} ({deciders[field]})",
                                      left=show(field, after), kind="widened"))
            else:
                try:
                    after = apply_rule(field, before, value)
                except _Conflict as exc:
                    if layer.kind is LayerKind.REPO:   # never a way for a repository to fail a job
                        notes.append(Note(layer=layer.label, field=field, asked=show(field, value),
                                          left=f"{show(field, before)} ({exc})", kind="ignored"))
                        continue
                    problems.append(Problem(file=layer.file, path=field, expected="the image pinned so far "
                                            f"(by {deciders[field]})", found=str(exc),
                                            hint="pin the same digest in both layers, or leave one unpinned"))
                    continue
                flag = layer.kind is LayerKind.FLAGS
                if rule in CEILINGS and not _same(field, after, before):
                    notes.append(Note(layer=layer.label, field=field, asked=f"{show(field, before)} ({deciders[field]})",
                                      left=show(field, after), explicit=deciders[field] == LayerKind.FLAGS.value))
                elif (rule in ("fixed", "pin") and value != before and after == before) or (flag and after != value):
                    notes.append(Note(layer=layer.label, field=field, asked=f"{show(field, value)} ({layer.label})",
                                      left=f"{show(field, after)} ({RULES[rule]})", explicit=flag,
                                      kind="narrowed" if flag else "ignored"))
            setters[field].append(layer.label)
            if after != before:
                policy, deciders[field] = put(policy, field, after), layer.label
        narrowed = _consistent(policy)
        for field in ("network.allow", "secrets"):
            if get(narrowed, field) != get(policy, field):
                deciders[field] = layer.label
        policy = narrowed
        lost = [r for r in requested if not any(covers(x, r) for x in policy.network.allow)]
        if lost:
            notes.append(Note(layer=layer.label, field="network.allow", asked=f"{', '.join(map(str, lost))} ({_asked_by(lost)})",
                              left=show("network.allow", policy.network.allow), explicit=True))
            requested = tuple(r for r in requested if r not in lost)
        steps.append(policy)
    file_layers = [layer for layer in all_layers if layer.digest and layer.values]   # an empty layer changes nothing
    if len(file_layers) > 1:
        policy = replace(policy, digest=layers_digest([(layer.kind.value, layer.digest) for layer in file_layers]))
    steps[-1] = policy
    decisions = tuple(Decision(field=f, rule=FIELDS[f][1], value=show(f, get(policy, f)), decided_by=deciders[f],
                               set_by=tuple(setters[f])) for f in FIELDS)
    earlier = prior.notes if prior is not None else ()
    return Effective(policy=policy, layers=all_layers, decisions=decisions, steps=tuple(steps),
                     notes=earlier + tuple(notes)), problems


def _asked_by(rules) -> str:
    """The flag that asked for these rules: --registries for a registry's, --allow for the rest."""
    return " and ".join(dict.fromkeys("--registries" if r.registry else "--allow" for r in rules))


def layers_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """The policy digest of several file layers: SHA-256 of their `kind:digest` lines, in order."""
    return hashlib.sha256("\n".join(f"{kind}:{digest}" for kind, digest in pairs).encode()).hexdigest()


def effective(base: Policy, layers: Sequence[Layer], *, prior: Effective | None = None,
              override: bool = False) -> Effective:
    """The effective policy, or a PolicyError listing every conflict."""
    result, problems = combine(base, layers, prior=prior, override=override)
    if problems:
        raise PolicyError(problems)
    return result


def layers_table(eff: Effective) -> str:
    """`sandbox compile --show-layers`: the layers in order, then which one decided each field."""
    lines = ["layers (each after the base is a ceiling: it can only narrow):"]
    lines += [f"  {i}. {layer.label}" + (f"  sha256:{layer.digest[:12]}" if layer.digest else "")
              for i, layer in enumerate(eff.layers, 1)]
    width = max(len(f) for f in FIELDS)
    lines.append("")
    lines.append(f"{'field':{width}}  {'rule':14}  {'decided by':40}  value")
    for d in eff.decisions:
        lines.append(f"{d.field:{width}}  {d.rule:14}  {d.decided_by:40}  {d.value}")
    if eff.notes:
        lines += ["", "what the layers took away:"] + [f"  {note}" for note in eff.notes]
    return "\n".join(lines)
