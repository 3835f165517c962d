"""Which layers apply, in order: the base policy (and its `extends`) → org → user → repository
(`.sandbox.yaml`, only once its exact content was approved) → git hooks path → command line."""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass, replace
from typing import Callable

from launcher.errors import PolicyError, Problem
from launcher.host import approvals, host, hostfiles, hostpaths
from launcher.host.hostfiles import LayerFile
from launcher.policy import settings, trust
from launcher.policy.layers import FIELDS, Effective, Layer, LayerKind, combine, effective, full_layer, get
from launcher.policy.model import BUILTIN_PROTECTED, Access, Policy
from launcher.policy.policy import parse_duration, policy_from_raw, read_policy, with_registry_mode
from launcher.policy.schema import policy_schema
from launcher.policy.yamlsafe import load_yaml

META_KEYS = ("version", "name", "description", "extends")
# Keys that set another field: network.registries are allow rules (registries.py), a layer's allow ceiling too.
ALIASES = {"network.registries": "network.allow"}
MAX_EXTENDS = 4


def present(raw: dict, field: str) -> bool:
    node = raw
    for key in field.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _unruled(raw: dict, props: dict, prefix: str = ""):
    """Schema fields set in `raw` that have no combine rule (a layer may not set them)."""
    for key, value in raw.items():
        name = prefix + str(key)
        if name in FIELDS or name in META_KEYS or name in ALIASES or key not in props:
            continue
        sub = props[key]
        if isinstance(value, dict) and "properties" in sub and any(f.startswith(name + ".") for f in FIELDS):
            yield from _unruled(value, sub["properties"], name + ".")
        else:
            yield name


def _partial(raw, data: bytes, file: str, kind: LayerKind, *, named: bool) -> tuple[Policy, Layer]:
    """Validate a document that sets only some fields; `named`: name and description required."""
    if not isinstance(raw, dict):
        raise PolicyError([Problem(file=file, path="(top level)", expected="a mapping with version: 1",
                                   found="nothing" if raw is None else type(raw).__name__)])
    problems = []
    if "version" not in raw:
        problems.append(Problem(file=file, path="version", expected="this key", found="nothing",
                                hint="every policy layer starts with version: 1"))
    if "extends" in raw and kind not in (LayerKind.BASE, LayerKind.PRESET):
        problems.append(Problem(file=file, path="extends", expected="no extends in a layer", found="extends",
                                hint="only the base policy (--policy) starts from presets"))
    problems += [Problem(file=file, path=name, expected="a field a layer can narrow", found="a field without a combine rule",
                         hint="set it in the base policy") for name in _unruled(raw, policy_schema()["properties"])]
    if kind in (LayerKind.BASE, LayerKind.PRESET):   # registries switch a base to proxy mode (not a later layer)
        raw = with_registry_mode(raw)
    doc = dict(raw)
    if not named:
        doc = {"name": "layer", "description": "layer", **doc}
    net = doc.get("network")
    if isinstance(net, dict) and ("allow" in net or "registries" in net) and "mode" not in net:
        # The mode is inherited; a layer's allow entries never turn proxy mode on (none wins).
        doc["network"] = {**net, "mode": "proxy"}
    if doc.get("secrets") and not (isinstance(net, dict) and "mode" in net):
        # Likewise for secrets: only a proxy injects them; under mode none they are dropped.
        doc["network"] = {**(net if isinstance(net, dict) else {}), "mode": "proxy"}
    try:
        policy = policy_from_raw(doc, file, data, inherited_allow=not (isinstance(net, dict) and "allow" in net))
    except PolicyError as exc:
        problems += exc.problems
    if problems:
        raise PolicyError(problems)
    values = []
    for field in FIELDS:
        if present(raw, field) or any(present(raw, alias) for alias, to in ALIASES.items() if to == field):
            # The model puts the built-in paths first; the layer's own additions follow.
            value = policy.workspace.protect[len(BUILTIN_PROTECTED):] if field == "workspace.protect" else get(policy, field)
            values.append((field, value))
    return policy, Layer(kind=kind, file=file, digest=policy.digest, values=tuple(values))


def parse_layer(data: bytes, file: str, kind: LayerKind) -> Layer:
    """A partial policy document (org, user or repository layer): `version: 1` and the fields it narrows.
    A repository's `defaults:` is validated here too (settings.py), so no file with bad defaults is
    applied or approved; they are not part of the layer."""
    raw = load_yaml(data, file)
    if kind is LayerKind.REPO:
        raw = settings.split_repository(raw, file, **_known())[0]
    return _partial(raw, data, file, kind, named=False)[1]


def _known() -> dict:
    """What a settings value may name: the bundled presets and the agent profiles (those imported
    only when an agent key asks)."""
    from launcher import resources

    def agent_names() -> tuple[str, ...]:
        from launcher import agents

        return tuple(sorted(agents.PROFILES))
    return {"presets": tuple(resources.preset_names()), "agents": agent_names}


def defaults_effect(data: bytes, file: str, when: str) -> str:
    """What a repository's `defaults:` would choose, for the review before its approval ("" without)."""
    values = settings.split_repository(load_yaml(data, file), file, **_known())[1].values
    if not values:
        return ""
    return (f"\n  and its defaults: choose this workspace's defaults ({when}), which may be wider than yours: "
            + "; ".join(f"{k} {', '.join(v) if isinstance(v, tuple) else v}" for k, v in values))


def defaults(workspace: str | None, *, flags: dict, pin: str | None = None, ignore_repo: bool = False) -> settings.Resolved:
    """The commands' defaults (settings.py): the flags given, the SANDBOX_* variables, the workspace's
    repository `defaults:` (applied only when its approval covers the file: approved before, or
    pinned by --trust-repo-policy; never asked about here) and the user's config.yaml."""
    known, home = _known(), host.home_dir()
    env = settings.parse_environment(host.settings_environment([k.env for k in settings.KEYS]), home=home, **known)
    source = host.user_config_file()
    user = settings.parse_file(source.data, source.path, home=home, **known) if source else settings.Defaults()
    repository = None
    if workspace is not None and not ignore_repo:
        ws = hostpaths.workspace_real(workspace)
        found = hostfiles.repo_policy_file(ws) if os.path.isdir(ws) else None
        if found is not None:
            raw = load_yaml(found.data, found.path)
            _, values = settings.split_repository(raw, found.path, **known)
            digest = trust.sha256(found.approval)
            if pin is not None:
                approved, why = pin == digest, f"--trust-repo-policy names other content (this file: sha256 {digest})"
            else:
                store_path, text = host.read_trust_store()
                approved = trust.status(trust.parse_store(text, store_path), ws, found.approval, None) is trust.Status.APPROVED
                why = (f"the file is not approved (sha256 {digest}); review it, then `{trust.approve_command(found.path)}` "
                       "or --trust-repo-policy (a repository widens nothing without its approval)")
            repository = settings.Repository(defaults=values, approved=approved, why="" if approved else why)
    return settings.resolve(flags=flags, env=env, repository=repository, user=user)


def load_base(ref: str, *, _seen: tuple[str, ...] = ()) -> Effective:
    """The base policy (--policy): a preset or file, on top of the presets its `extends` names."""
    file, data = read_policy(ref)
    raw = load_yaml(data, file)
    kind = LayerKind.PRESET if _seen else LayerKind.BASE
    extends = raw.get("extends") if isinstance(raw, dict) else None
    if not extends:
        raw = with_registry_mode(raw)
        policy = policy_from_raw({} if raw is None else raw, file, data)
        defaulted = {f for f in FIELDS if not present(raw or {}, f)}
        return effective(policy, [full_layer(kind, policy, defaulted)])
    own, layer = _partial(raw, data, file, kind, named=True)
    names = extends if isinstance(extends, list) else []
    if len(_seen) >= MAX_EXTENDS or ref in _seen or any(name in _seen + (ref,) for name in names):
        raise PolicyError([Problem(file=file, path="extends", expected=f"at most {MAX_EXTENDS} levels, no cycle",
                                   found=" -> ".join(_seen + (ref, *names)))])
    result = None
    for name in names:
        preset = load_base(name, _seen=_seen + (ref,))
        if result is None:
            result = preset
        else:  # a further preset narrows the first, field by field
            result = effective(result.policy, preset.layers, prior=result)
    # The file's own fields override what it extends: the base is the user's own choice.
    result = effective(result.policy, [layer], prior=result, override=True)
    policy = replace(result.policy, name=own.name, description=own.description, source=file)
    return replace(result, policy=policy, steps=result.steps[:-1] + (policy,))


def layer_files(workspace: str) -> tuple[tuple[LayerKind, Callable[[], LayerFile | None]], ...]:
    """The policy files that apply after the base, in order, each read when asked: the org's, the
    user's, and the repository's at the root of `workspace` (its real path). `sandbox run` layers
    them (build, the repository's once approved); `sandbox check` lints the same list."""
    return ((LayerKind.ORG, host.org_policy_file), (LayerKind.USER, host.user_policy_file),
            (LayerKind.REPO, functools.partial(hostfiles.repo_policy_file, workspace)))


@dataclass(frozen=True, kw_only=True)
class Stack:
    effective: Effective
    notes: tuple[str, ...]      # warnings for the person at the terminal
    workspace: str = ""         # the workspace's real path, resolved once (pipeline.layered); "": not yet
    # what git's configuration names for the root repository (gitgraph.paths): (top, owner, paths),
    # for the host facts of the same launch, so git lists it once; None: not read, or unreadable
    git_read: tuple | None = None


Ask = Callable[[str], bool]


def _repo_layer(read: Callable[[], LayerFile | None], workspace: str, base: Policy, prior: Effective,
                so_far: list[Layer], *, pin: str | None, ignore: bool, ask: Ask | None, approved_only: bool,
                notes: list[str]) -> Layer | None:
    if ignore:
        notes.append(f"--ignore-repo-policy: {workspace}/.sandbox.yaml, if any, is not applied")
        return None
    source = read()
    if source is None:
        if pin is not None:
            raise PolicyError([Problem(file=f"{workspace}/.sandbox.yaml", path="", found="no such file",
                                       expected=f"the repository policy pinned by --trust-repo-policy {pin}")])
        return None
    layer = parse_layer(source.data, source.path, LayerKind.REPO)
    after = effective(base, so_far + [layer], prior=prior)   # what it would change, for the review
    if pin is not None:
        if trust.sha256(source.approval) == pin:
            return layer
        raise trust.refusal(source.path, source.approval, trust.Status.NEW, pin)
    store_path, text = host.read_trust_store()
    store = trust.parse_store(text, store_path)
    state = trust.status(store, workspace, source.approval, None)
    if state is trust.Status.APPROVED:
        return layer
    if approved_only:
        notes.append(f"{source.path} is not applied: not approved (sha256 {trust.sha256(source.approval)})")
        return None
    if ask is None:
        raise trust.refusal(source.path, source.approval, state, None)
    where = trust.location_problem(store_path, workspace)
    if where:   # before asking: an answer that cannot be recorded is not asked for
        raise PolicyError([where])
    before = combine(base, so_far, prior=prior)[0]
    effect = "\n".join(f"  {a.field}: {b.value} -> {a.value}" for a, b in zip(after.decisions, before.decisions)
                       if a.value != b.value) or "  nothing (it repeats what is allowed)"
    effect += defaults_effect(source.data, source.path, "from the next command on; this one started without them")
    if not ask(trust.review_text(source.path, source.approval, store.get(workspace), effect)):
        raise trust.declined(source.path)
    approvals.record(workspace, source.approval)
    notes.append(f"approved {source.path} (sha256 {trust.sha256(source.approval)}), recorded in {store_path}")
    return layer


def _git_layers(workspace: str, notes: list[str]) -> tuple[list[Layer], list[str], tuple | None]:
    """Protect what the root repository's git configuration names inside the workspace (every
    config file of the include graph, hooks paths, programs) like .git/hooks, in bind and copy
    mode alike; nested repositories are bind mode's (gitscan.py)."""
    from launcher.host import gitgraph

    by_config: dict[str, list[str]] = {}
    at_root = []
    owner = hostpaths.path_fact(workspace).owner
    try:
        named = gitgraph.paths(workspace, owner)
        read = (workspace, owner, named)
    except PolicyError as exc:   # bind mode refuses such a workspace (gitscan); copy mode carries no .git back
        notes.append(f"git cannot read the configuration of {workspace}: {exc.problems[0].found}")
        named, read = (), None
    for git in named:
        rel = os.path.relpath(os.path.realpath(git.path), workspace)
        where = f"{git.key} = {git.value} in {git.config}" if git.key else git.config
        if rel == ".":
            if git.kind == "hooks":
                at_root.append(where)
        elif rel == ".." or rel.startswith("../"):
            if git.scope in ("local", "worktree") and git.key and git.kind != "program":
                notes.append(f"{where} points outside the workspace ({git.path}); "
                             "it is not reachable from the sandbox unless a mount exposes it")
        elif any(c in rel for c in "\n\0,") or rel.startswith("/"):
            notes.append(f"{where} is not a path that can be protected: {rel!r}")
        elif rel != ".git" and not rel.startswith(".git/"):   # .git is protected per workspace.git
            by_config.setdefault(git.config, []).append(posixpath.normpath(rel))
    layers = [Layer(kind=LayerKind.GIT, file=config, digest="", values=(("workspace.protect", tuple(dict.fromkeys(rels))),))
              for config, rels in by_config.items()]
    return layers, at_root, read


def build(base: Policy, prior: Effective, ws: str, *, timeout: str | None = None, session: str | None = None,
          idle: str | None = None, pin: str | None = None, ignore_repo: bool = False, ask: Ask | None = None,
          approved_only: bool = False, strict: bool = False, origins: tuple[tuple[str, str, str], ...] = ()) -> Stack:
    """Every layer after the base, applied to `base` (prior.policy, possibly amended by --allow), for
    the workspace at the real path `ws` (as pipeline.layered resolved it, once).
    `origins`: (timeout|session|idle, settings source, file) of a limit that came from a settings file."""
    notes: list[str] = []
    layers: list[Layer] = []
    files = layer_files(ws)
    for kind, read in files[:-1]:   # the org's and the user's
        if (source := read()) is not None:
            layers.append(parse_layer(source.data, source.path, kind))
    repo = _repo_layer(files[-1][1], ws, base, prior, list(layers), pin=pin, ignore=ignore_repo, ask=ask,
                       approved_only=approved_only, notes=notes)
    if repo is not None:
        layers.append(repo)
    git_layers, at_root, git_read = _git_layers(ws, notes)
    layers += git_layers
    kinds = {settings.USER: LayerKind.USER, settings.REPOSITORY: LayerKind.REPO}
    for flag, field, value, option in (("--timeout", "limits.timeout", timeout, "timeout"),
                                       ("--timeout", "limits.session", session, "session"), ("--idle", "limits.idle", idle, "idle")):
        if value:   # a default from a settings file is a ceiling of that file's kind: not the command line's request
            source, where = dict((o, (s, w)) for o, s, w in origins).get(option, (settings.FLAG, flag))
            layers.append(Layer(kind=kinds.get(source, LayerKind.FLAGS), file=where, digest="",
                                values=((field, parse_duration(value)),)))
    eff = effective(base, layers, prior=prior)
    taken = [n for n in eff.notes[len(prior.notes):] if n.kind != "widened"]
    explicit = [n for n in taken if n.explicit]
    if explicit and (strict or host.in_ci()):
        # A pipeline never runs with less than it asked for without failing.
        raise PolicyError([Problem(file=n.layer, path=n.field, expected=f"what the command line asked: {n.asked}",
                                   found=f"a ceiling left {n.left}",
                                   hint="ask for what the org/user policy allows, or change that policy") for n in explicit])
    notes += [f"ceiling: {n}" for n in taken]
    if at_root and eff.policy.workspace.access is Access.READ_WRITE:
        raise PolicyError([Problem(file=at_root[0].rsplit(" in ", 1)[-1], path="core.hooksPath",
                                   expected="a hooks directory below the workspace root", found=at_root[0],
                                   hint="git would run hooks the agent can write; use a subdirectory such as "
                                        ".githooks, or a read-only workspace")])
    return Stack(effective=eff, notes=tuple(notes), workspace=ws, git_read=git_read)
