"""What `sandbox up` was started with: the options that decide a sandbox's effective policy (the
policy, the layer flags, the agent and its model key's reference, ports, session limits), stored as
one label on its container, never a secret (the key by reference only). A later `up` in its
workspace that gives none of them attaches with the stored ones; one that gives others is refused
(exit 120), saying the stored ones and the two ways on; `up --new` starts a second sandbox on the
workspace under a name of its own (in copy mode, with a copy of its own). What the terminal runs
(a shell, the agent's CLI, a command) is chosen per attach and never stored."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, fields, replace
from itertools import count
from urllib.parse import urlsplit

from launcher import labels as label
from launcher import resources
from launcher.errors import PolicyError, Problem
from launcher.launch import ports
from launcher.policy import secrets

LIMIT = 4096   # characters of the label: a command line's worth; more is refused before anything starts
VERSION = 1


@dataclass(frozen=True, kw_only=True)
class UpOptions:
    """The options of `sandbox up` that decide its effective policy, as given (paths made absolute)."""

    policy: str = "untrusted"
    workspace_mode: str | None = None
    pin: str | None = None
    ignore_repo: bool = False
    allow: tuple[str, ...] = ()
    allow_private: tuple[str, ...] = ()
    registries: tuple[str, ...] = ()
    egress_network: str | None = None
    session: str | None = None
    idle: str | None = None
    ports: tuple[str, ...] = ()
    agent: str | None = None
    key_env: str = ""
    key_file: str = ""
    kind: str = ""
    upstream: str = ""


FLAGS = {"policy": "--policy", "workspace_mode": "--workspace-mode", "pin": "--trust-repo-policy",
         "ignore_repo": "--ignore-repo-policy", "allow": "--allow", "allow_private": "--allow-private",
         "registries": "--registries", "egress_network": "--egress-network", "session": "--timeout", "idle": "--idle", "ports": "--port",
         "agent": "--agent", "key_env": "--model-key-env", "key_file": "--model-key-file", "kind": "--model-key-kind",
         "upstream": "--model-upstream"}
FIELDS = tuple(FLAGS)
assert FIELDS == tuple(f.name for f in fields(UpOptions))


def _ref(policy: str) -> str:
    """A preset by its name; a file by its absolute path (a later `up` may run from elsewhere)."""
    return policy if resources.looks_like_preset(policy) else os.path.abspath(os.path.expanduser(policy))


def of_request(request) -> UpOptions:
    """The storable options of a session.Request; the model key's kind as recognised (a later `up`
    attaching from a shell without the key's variable wires the agent the same way)."""
    o, agent = request.options, request.options.agent
    return UpOptions(policy=_ref(request.policy), workspace_mode=o.workspace_mode, pin=o.pin,
                     ignore_repo=o.ignore_repo, allow=tuple(a for a in o.allow if isinstance(a, str)),
                     allow_private=tuple(a["host"] for a in o.allow if not isinstance(a, str)),
                     registries=tuple(o.registries),
                     egress_network=request.egress_network, session=o.session, idle=o.idle,
                     ports=tuple(str(p) for p in request.ports), agent=agent.name if agent else None,
                     key_env=agent.key_env if agent else "",
                     key_file=os.path.abspath(os.path.expanduser(agent.key_file)) if agent and agent.key_file else "",
                     kind=agent.login_kind if agent else "", upstream=agent.upstream if agent else "")


def shown(options: UpOptions) -> str:
    """The options as a command line (the policy always, the rest where not the default)."""
    words, default = [], UpOptions()
    for name in FIELDS:
        value = getattr(options, name)
        if value == getattr(default, name) and name != "policy":
            continue
        flag = FLAGS[name]
        if isinstance(value, bool):
            words.append(flag)
        else:
            words += [f"{flag} {shlex.quote(v)}" for v in (value if isinstance(value, tuple) else (value,))]
    return " ".join(words)


def as_dict(options: UpOptions) -> dict:
    """The fields that differ from the defaults (the policy always), for the label and `up --json`."""
    default = UpOptions()
    return {n: list(v) if isinstance(v, tuple) else v for n in FIELDS
            if (v := getattr(options, n)) != getattr(default, n) or n == "policy"}


def label_value(options: UpOptions) -> str:
    """The label's text; refused (exit 120) when it would carry something secret-shaped or be too long."""
    for name in FIELDS:
        value = getattr(options, name)
        for text in (value if isinstance(value, tuple) else (value,)):
            if isinstance(text, str) and (secrets.secret_value(text) or (name == "upstream" and urlsplit(text).username)):
                raise _refused(FLAGS[name], "no secret: the sandbox's options are stored on its container",
                               "a secret-shaped value" if name != "upstream" else "a URL with credentials in it",
                               "give the model key by reference (--model-key-env VAR, --model-key-file FILE)")
    text = json.dumps({"v": VERSION, **as_dict(options)}, separators=(",", ":"), sort_keys=True)
    if len(text) > LIMIT:
        raise _refused("--allow", f"options that fit {LIMIT} characters (they are stored on the sandbox)",
                       f"{len(text)}", "put the hosts into a policy file's network.allow and give --policy FILE")
    return text


def parse(text: str | None) -> UpOptions | None:
    """The stored options, or None (a sandbox started before they were stored, or a label we do not read)."""
    try:
        data = json.loads(text or "")
        if not isinstance(data, dict) or data.pop("v", None) != VERSION or not set(data) <= set(FIELDS):
            return None
        values = {n: tuple(v) if isinstance(getattr(UpOptions(), n), tuple) else v for n, v in data.items()}
        options = UpOptions(**values)
    except (ValueError, TypeError):
        return None
    default = UpOptions()
    ok = all(type(getattr(options, n)) is type(getattr(default, n)) or getattr(default, n) is None and
             isinstance(getattr(options, n), str) for n in FIELDS)
    return options if ok and all(isinstance(x, str) for n in FIELDS if isinstance(getattr(options, n), tuple)
                                 for x in getattr(options, n)) else None


def labelled(planned, request):
    """The Planned with the options `up` was started with in its container's label."""
    container = planned.plan.container
    labels = container.labels + ((label.UP_OPTIONS, label_value(of_request(request))),)
    return replace(planned, plan=replace(planned.plan, container=replace(container, labels=labels)))


def _same(name: str, given, stored, taken: tuple) -> bool:
    if name in ("allow", "allow_private", "registries"):
        return set(given) == set(stored)
    if name == "ports":   # a running sandbox keeps the ports it started with: fewer are fine
        have = tuple(ports.parse_spec(p) for p in stored) + taken
        return not ports.missing(tuple(ports.parse_spec(p) for p in given), have)
    return given == stored


def differing(request, stored: UpOptions, taken: tuple = ()) -> list[str]:
    """The options the request gives (request.given; None: all of them) that differ from the stored ones."""
    mine = of_request(request)
    return [n for n in FIELDS if (request.given is None or n in request.given)
            and not _same(n, getattr(mine, n), getattr(stored, n), taken)]


def refusal(name: str, request, stored: UpOptions, differ: list[str]) -> Problem:
    """Why `up` does not attach to the running `name`: its options, then the two ways on."""
    mine = of_request(request)
    asked = shown(UpOptions(**{n: getattr(mine, n) for n in differ} | ({} if "policy" in differ else
                                                                         {"policy": stored.policy})))
    return Problem(file="command line", path=", ".join(FLAGS[n] for n in differ),
                   expected=f"the options {name} was started with: {shown(stored)}", found=asked,
                   hint=f"`sandbox up` with none of these options attaches to {name} with its own; "
                        f"`sandbox up --new …` starts a second sandbox on this workspace (or `sandbox down {name}` first)")


def applied(request, stored: UpOptions, name: str):
    """The request with the stored options where it gives none (and the running sandbox's name)."""
    from launcher.pipeline.pipeline import AgentChoice

    mine = of_request(request)
    chosen = replace(stored, **{n: getattr(mine, n) for n in FIELDS if request.given is None or n in request.given})
    agent = AgentChoice(name=chosen.agent, key_env=chosen.key_env, key_file=chosen.key_file, upstream=chosen.upstream,
                        kind=chosen.kind) if chosen.agent else None
    allow = chosen.allow + tuple({"host": h, "private": True} for h in chosen.allow_private)
    options = replace(request.options, allow=allow, registries=chosen.registries, session=chosen.session, idle=chosen.idle, pin=chosen.pin,
                      ignore_repo=chosen.ignore_repo, workspace_mode=chosen.workspace_mode, agent=agent)
    return replace(request, policy=chosen.policy, options=options, egress_network=chosen.egress_network,
                   ports=tuple(ports.parse_spec(p) for p in chosen.ports), name=name)


def completed(engine, request):
    """`up` without --new: the running sandbox it attaches to (--name's, else the one running for the
    workspace) completes the request with its stored options, or refuses options that differ (120)."""
    if request.name:
        found = [i for i in engine.list() if i.name == request.name and i.labels.get(label.KIND) == "up"]
    else:
        real = os.path.realpath(request.workspace)
        found = sorted((i for i in engine.list() if i.labels.get(label.KIND) == "up" and i.state == "running"
                        and i.labels.get(label.WORKSPACE) == real), key=lambda i: i.name)
    if len(found) > 1:
        raise _refused("--name", "one sandbox to attach to", f"{len(found)} running for {request.workspace}: "
                       f"{', '.join(i.name for i in found)}", "give --name NAME (one of them), or --new for another")
    if not found or found[0].state != "running":   # none, or its session ended: a new one starts (as before)
        return request
    item = found[0]
    if request.name and request.given is not None and "workspace" not in request.given:   # `up --name N` anywhere
        request = replace(request, workspace=item.labels.get(label.WORKSPACE) or request.workspace)
    stored = parse(item.labels.get(label.UP_OPTIONS))
    if stored is None:   # started before options were stored: compared as before (effective policy, workspace)
        return replace(request, name=item.name)
    differ = differing(request, stored, ports.labelled(item.labels))
    if differ:
        raise PolicyError([refusal(item.name, request, stored, differ)])
    return changed(applied(request, stored, item.name), item.id)


def changed(request, container: str):
    """The request with the allow rules `sandbox egress` added to and removed from the running
    container (launcher/host/rulechanges.py): attaching proves the rules now in force."""
    from launcher.host import rulechanges

    found = rulechanges.load(request.name, container)
    if found is None:
        return request
    return replace(request, options=replace(request.options, added=found.added, removed=found.removed))


def free(engine, candidate: str) -> bool:
    """No container of this name, nor a copy's volumes (a kept copy is never taken over by another)."""
    return (not any(i.name == candidate for i in engine.list())
            and all(engine.volume_info(f"{candidate}-{part}") is None for part in ("base", "upper", "tree")))


def next_free(engine, name: str) -> str:
    return next(f"{name}-{n}" for n in count(2) if free(engine, f"{name}-{n}"))


def renamed(planned, request, name: str, timings=None):
    """The plan made again under another name (its copy and networks follow the name)."""
    from launcher.host import statefiles
    from launcher.pipeline import pipeline

    again = pipeline.compiled(planned.layered, request.workspace, (), kind="up", name=name,
                              egress_network=request.egress_network, agent=request.options.agent, timings=timings,
                              engine=planned.facts.engine)   # the engine's own facts (podman's dialect, id maps)
    statefiles.write(again.files)
    return again


def second(engine, planned, request, listener, timings=None):
    """`up --new`: the plan under a name no sandbox nor copy has (NAME-2, NAME-3…; --name's if free)."""
    name = planned.plan.container.name
    if free(engine, name):
        return planned
    if request.name:
        raise _refused("--name", "a name no sandbox or copy has (--new starts another sandbox)", f"{name} exists",
                       "choose another --name, or leave it out for NAME-2, NAME-3…")
    new = next_free(engine, name)
    listener.status(f"--new: {name} exists; the new sandbox is {new}" + (" (with a copy of its own)" if planned.plan.copy
                                                                          else ""))
    return renamed(planned, request, new, timings)


def terminal(request, planned, command: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a terminal runs in the sandbox: the command given, else the agent's CLI when --agent was
    given (not only stored), else the policy's shell; behind the agent's start-up wrapper, which sets
    its variables (those naming its endpoint too) and home files."""
    agent = request.options.agent
    if command:
        argv = command
    elif agent and agent.profile.interactive and (request.given is None or "agent" in request.given):
        argv = agent.profile.interactive
    else:
        return tuple(planned.policy.command)
    if not agent:
        return tuple(argv)
    from launcher.agents.wiring import wrapped

    return wrapped(agent.profile, tuple(argv), agent.keyed)[1]


def _refused(path: str, expected: str, found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file="command line", path=path, expected=expected, found=found, hint=hint)])
