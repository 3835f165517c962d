"""Long-lived sandboxes and leftovers: list, find, exec, egress logs, down, gc."""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher import labels as label
from launcher.egress.audit import EgressEvent, RuleChange, agents_own, parse_changes, parse_log
from launcher.engine.engineproto import ContainerSummary, Engine
from launcher.errors import EngineError, NoSandbox, NotFound, PolicyError, Problem, SandboxError
from launcher.host import extensions, host, proven, rulechanges
from launcher.launch import ports
from launcher.launch.launch import Listener, remove_sandbox
from launcher.plan import lifetime, trustfiles

SANDBOX_KINDS = ("run", "up", "external")


@dataclass(frozen=True, kw_only=True)
class SandboxInfo:
    name: str
    kind: str
    state: str
    policy: str
    workspace: str
    created: int
    changes: int | None = None      # copies: changes at the last checkpoint (None: not known, or not a copy)
    trust: str = "unkeyed"          # trustlevel.key of its policy (of the policy a copy or home was written under)
    keeps: tuple[str, ...] = ()     # what persists after it: a sandbox's home volume and copy; a copy or home itself
    ends: int = 0                   # a running `up` sandbox: when limits.session ends it at the latest (epoch seconds)
    idle: int = 0                   # and its limits.idle in seconds
    ports: tuple[ports.Published, ...] = ()   # `up --port`: host loopback ports forwarded into it


def _sandboxes(engine: Engine) -> list[ContainerSummary]:
    return [i for i in engine.list() if i.labels.get(label.KIND) in SANDBOX_KINDS]


def find(engine: Engine, name: str) -> ContainerSummary:
    for item in _sandboxes(engine):
        if item.name == name:
            return item
    raise NoSandbox(f"no sandbox named {name!r}; `sandbox ls` lists them")


def running(engine: Engine, name: str) -> ContainerSummary:
    """The sandbox `name`, refused unless it is running (nothing can be started in it otherwise)."""
    item = find(engine, name)
    if item.state != "running":
        raise NoSandbox(f"{name} is {item.state}, not running; `sandbox down {name}` and `sandbox up` start it again")
    return item


def chosen(engine: Engine, name: str | None, directory: str) -> ContainerSummary:
    """The running sandbox `name`; without a name, the one running for the workspace that holds
    `directory` (none: NoSandbox; several: refused, listed)."""
    if name:
        return running(engine, name)
    found = of_workspace(engine, directory)
    if not found:
        raise NoSandbox(f"no sandbox is running for {directory}",
                        hint="`sandbox up` starts one here; `sandbox ls` lists the others (give one's NAME)")
    if len(found) > 1:
        raise PolicyError([Problem(file="command line", path="NAME", expected="one sandbox's name",
                                   found=f"{len(found)} running for {directory}: {', '.join(i.name for i in found)}",
                                   hint="give NAME, one of them")])
    return found[0]


def of_workspace(engine: Engine, directory: str) -> list[ContainerSummary]:
    """The running sandboxes whose workspace is `directory` (a real path) or holds it, by name."""
    def holds(workspace: str) -> bool:
        return bool(workspace) and (directory == workspace or directory.startswith(workspace.rstrip("/") + "/"))
    return sorted((i for i in _sandboxes(engine) if i.state == "running" and holds(i.labels.get(label.WORKSPACE, ""))),
                  key=lambda i: i.name)


def reuse_problem(item: ContainerSummary, plan) -> Problem | None:
    """Why a running sandbox of this name may not be reused for `plan` (another envelope or
    workspace), or None."""
    have, want = item.labels, dict(plan.container.labels)
    changed = rulechanges.load(item.name, item.id)
    if changed is not None:   # `sandbox egress` changed its rules: the effective policy now in force
        have = {**have, label.EFFECTIVE_DIGEST: changed.digest}
    keys = (label.EFFECTIVE_DIGEST, label.WORKSPACE)
    if all(have.get(k) == want[k] for k in keys):
        return None
    def shown(labels: dict) -> str:
        return (f"policy {labels.get(label.POLICY, '?')} (effective sha256 "
                f"{labels.get(label.EFFECTIVE_DIGEST, '?')[:12]}) on {labels.get(label.WORKSPACE, '?')}")
    return Problem(file="command line", path="--name", expected=f"a sandbox with {shown(want)}",
                   found=f"{item.name} is running with {shown(have)}",
                   hint=f"`sandbox down {item.name}` first, or choose another --name")


def _limits(item: ContainerSummary) -> tuple[int, int] | None:
    """limits.session and limits.idle of an `up` sandbox, from its label (none before sessions)."""
    limits = item.labels.get(label.SESSION, "").split()
    if len(limits) != 2 or not all(v.isdigit() for v in limits):
        return None
    return int(limits[0]), int(limits[1])


def _session(item: ContainerSummary) -> dict[str, int]:
    """ends and idle of a running `up` sandbox: its label's end, or the one `sandbox extend` gave."""
    limits = _limits(item)
    if item.state != "running" or limits is None:
        return {}
    return {"ends": extensions.end_of(item.name, item.id) or item.created + limits[0], "idle": limits[1]}


@dataclass(frozen=True, kw_only=True)
class Extension:
    name: str
    ends: int          # the session's new end (epoch seconds)
    was: int           # its end before
    latest: int        # the latest end its ceiling allows: its start + limits.session before --timeout
    ceiling: lifetime.Ceiling
    idle: int          # limits.idle, which can still end it sooner


def extend(engine: Engine, name: str | None, directory: str, seconds: int, now: int | None = None) -> Extension:
    """Move the end of the running `up` session `name` (none: this workspace's) `seconds` past its
    current end (or now, once that passed), within its ceiling (PolicyError past it, exit 120).
    The sandbox learns it from a root exec (lifetime.write_end); `ls` from extensions."""
    import time

    item = chosen(engine, name, directory)
    limits = _limits(item)
    limit = lifetime.Ceiling.of_label(item.labels.get(label.SESSION_CEILING, ""))
    if limits is None or limit is None:
        raise PolicyError([Problem(file="command line", path="NAME", expected="a sandbox that `sandbox up` started",
                                   found=f"{item.name} has no session that can be extended "
                                         f"({'a sandbox run' if limits is None else 'made before sandbox extend'})",
                                   hint=f"`sandbox down {item.name}` and `sandbox up` again for a session of its own")])
    was = extensions.end_of(item.name, item.id) or item.created + limits[0]
    ends = lifetime.extended_end(now=int(time.time()) if now is None else now, end=was, start=item.created,
                                 add=seconds, limit=limit, name=item.name)
    exec_id, stream = engine.exec_stream(item.id, lifetime.write_end(ends), user="0")
    said = b"".join(b"".join(p for p in pair if p) for pair in stream)
    if engine.exec_exit_code(exec_id) != 0:
        raise EngineError(f"{item.name}: the new end could not be written inside: "
                          f"{said.decode(errors='replace').strip() or 'no output'}",
                          hint="`sandbox ls` says whether it still runs")
    extensions.save(item.name, item.id, ends)
    return Extension(name=item.name, ends=ends, was=was, latest=item.created + limit.seconds, ceiling=limit,
                     idle=limits[1])


def ls(engine: Engine) -> list[SandboxInfo]:
    """Sandboxes, then copies (copy mode's kept work: kind "copy", state "in use" or "kept"), then
    home volumes (kind "home", named by workspace, trust key and agent profile); each with its
    trust key and what it keeps between runs."""
    from launcher.copies import store
    from launcher.launch import home

    found = [SandboxInfo(name=i.name, kind=i.labels[label.KIND], state=i.state,
                         policy=i.labels.get(label.POLICY, "?"),
                         workspace=i.labels.get(label.WORKSPACE, "?"), created=i.created,
                         trust=i.labels.get(label.TRUST, "unkeyed"),
                         keeps=tuple(f"{what} {i.labels[key]}" for what, key in (("home", label.HOME), ("copy", label.COPY))
                                     if i.labels.get(key)), **_session(i),
                          ports=ports.published(i.name, i.labels) if i.state == "running" else ())
             for i in _sandboxes(engine)]
    return found + [SandboxInfo(name=c.name, kind="copy", state="in use" if c.users else "kept", policy=c.policy,
                                workspace=c.workspace, created=0, changes=c.changes, trust=c.trust,
                                keeps=(f"copy {c.name}",))
                    for c in store.states(engine, store.all_copies(engine))] + [
        SandboxInfo(name=h.name, kind="home", state="in use" if h.users else "kept", policy=f"({h.profile})",
                    workspace=h.workspace, created=0, trust=h.trust, keeps=(f"home {h.name}",))
        for h in home.all_homes(engine)]


@dataclass(frozen=True, kw_only=True)
class Down:
    copy: str | None = None         # copy mode: the sandbox's copy
    changes: int | None = None      # how many changes it holds (its last checkpoint's count)
    dropped: bool = False           # it held none, nor did any checkpoint: dropped
    removed: tuple[str, ...] = ()   # home volumes removed (--purge)
    kept: tuple[str, ...] = ()      # and kept (another sandbox uses them)


def down(engine: Engine, name: str, purge: bool = False) -> Down:
    """Remove the sandbox; in copy mode checkpoint its copy, which stays while it holds a change
    (or a checkpoint does) and goes otherwise. With `purge`, also the home volumes of its workspace
    that no other sandbox uses."""
    from launcher.copies import store
    from launcher.launch import home

    labels = find(engine, name).labels
    copy = labels.get(label.COPY)
    ports.stop(name)   # its host ports are free once `down` returns
    remove_sandbox(engine, name)
    proven.forget(name)
    extensions.forget(name)
    rulechanges.forget(name)
    changes, dropped = None, False
    if copy:
        taken = store.checkpoint(engine, copy, "sandbox down")
        changes, dropped = taken.get("changes"), store.drop_if_clean(engine, copy, taken)
    removed, kept = home.remove_unused(engine, labels.get(label.WORKSPACE, "?")) if purge else ([], [])
    return Down(copy=copy, changes=changes, dropped=dropped, removed=tuple(removed), kept=tuple(kept))


def gc(engine: Engine, everything: bool) -> list[str]:
    """Remove what a crashed or killed launcher left behind; with everything, `up` sandboxes too.

    Containers, proxies and networks are grouped by the sandbox they belong to; a group goes when
    its sandbox container is gone, stopped, or was a `run` whose launcher died. Sandboxes another
    tool launched (compose, `docker run` from `compile --format argv`) go only with everything.
    A launch's own CA files that no proxy names any more go once an hour old.
    """
    groups: dict[str, list[ContainerSummary]] = {}
    # Only what the launcher made carries a kind: a container someone ran from one of our images
    # inherits the image's managed label, and is theirs.
    everyone = engine.list()
    for item in everyone:
        if label.KIND in item.labels:
            groups.setdefault(item.labels.get(label.SANDBOX, item.name), []).append(item)
    owners: dict[str, int] = {}   # a group of networks alone: its launcher may be making the rest now
    networks = engine.list_networks()
    for network in networks:
        if label.KIND in network.labels and network.labels[label.KIND] != "egress":   # the shared one: below
            key = network.labels.get(label.SANDBOX, network.name)
            groups.setdefault(key, [])
            owners.setdefault(key, int(network.labels.get(label.OWNER_PID, "0") or 0))
    removed = []
    named = {path for item in everyone for path in item.labels.get(label.CA_FILES, "").split()}
    removed += trustfiles.stale_launch_files(named, older_than=3600, now=time.time())
    for name, items in groups.items():
        main = next((i for i in items if i.labels.get(label.KIND) in SANDBOX_KINDS), None)
        if main is not None and not everything:
            labels, state = main.labels, main.state
            if labels[label.KIND] == "external":   # its launcher is someone else's (compose)
                continue
            owner_alive = host.pid_alive(int(labels.get(label.OWNER_PID, "0") or 0))
            # A "created" sandbox whose launcher lives is being started right now: leave it alone.
            stopped = state in ("exited", "dead") or (state == "created" and not owner_alive)
            if not (stopped or (labels[label.KIND] == "run" and not owner_alive)):
                continue
        elif main is None and not everything:
            owner = int(items[0].labels.get(label.OWNER_PID, "0") or 0) if items else owners.get(name, 0)
            if host.pid_alive(owner):  # a proxy or networks whose sandbox is still being created
                continue
        remove_sandbox(engine, name)
        removed.append(name)
    return removed + _shared_egress_unused(engine, networks)


def _shared_egress_unused(engine: Engine, networks) -> list[str]:
    """The shared egress network (plan.SHARED_EGRESS) when no proxy is on it: removed (the engine
    refuses while one is; a launch that finds it gone at its proxy's join makes it again)."""
    removed = []
    for network in networks:
        if network.labels.get(label.KIND) == "egress" and (found := engine.network_info(network.name)) is not None \
                and not found.containers:
            try:
                engine.remove_network(network.name)
            except EngineError:   # a proxy joined meanwhile: it stays
                continue
            removed.append(network.name)
    return removed


@dataclass(frozen=True, kw_only=True)
class CopyVerdict:
    name: str
    pending: int | None     # changes not on the host tree yet (None: could not be counted)
    removed: bool
    error: str = ""         # why it could not be counted (the copy is kept)


def unapplied(engine: Engine, copy) -> int:
    """How many of the copy's changes are not on the host tree yet (see apply.pending): from the
    change list only, no file of the agent's is read. Raises when the copy cannot be read."""
    from launcher.copies import apply, export, store

    return apply.pending(copy.workspace, export.listing(store.changes(engine, copy.name), copy.protected))


def gc_copies(engine: Engine, force: bool) -> list[CopyVerdict]:
    """Copies no sandbox uses: removed when all their work is on the host tree already (or with
    `force`); otherwise kept, with how much would be lost. A copy that cannot be read is kept
    (dropped with `force`) and said, and never stops the others."""
    from launcher.copies import store

    for view in engine.list_volumes(label.selector(label.KIND, "copy-view")):   # a killed diff's or apply's
        if not host.pid_alive(int(view.labels.get(label.OWNER_PID, "0") or 0)):
            try:
                engine.remove_volume(view.name)
            except EngineError:   # still mounted by a leftover tools container: the next gc
                pass
    verdicts = []
    for copy in store.all_copies(engine):
        if copy.users:
            continue
        if not store.complete(engine, copy.name):   # never used: its launcher died while copying
            if not host.pid_alive(copy.maker):
                store.drop(engine, copy.name)
                verdicts.append(CopyVerdict(name=copy.name, pending=0, removed=True))
            continue
        try:
            left, error = unapplied(engine, copy), ""
        except (SandboxError, OSError) as exc:   # one broken copy never stops the others
            left, error = None, (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        try:
            if force or left == 0:
                store.drop(engine, copy.name)
        except SandboxError as exc:
            verdicts.append(CopyVerdict(name=copy.name, pending=left, removed=False,
                                        error=(str(exc).strip().splitlines() or [type(exc).__name__])[0]))
            continue
        verdicts.append(CopyVerdict(name=copy.name, pending=left, removed=force or left == 0, error=error))
    return verdicts


def stale_probe_volumes(engine: Engine, current: str) -> list[str]:
    """Remove probe volumes of earlier probe versions that no container uses any more."""
    removed = []
    for volume in engine.list_volumes():
        if volume.name.startswith("sandbox-probe-") and volume.name != current:
            try:
                engine.remove_volume(volume.name)
                removed.append(volume.name)
            except EngineError:  # still mounted by a running sandbox
                pass
    return removed


def exec_in(engine: Engine, name: str, argv: list[str], listener: Listener, say_proven: bool = False) -> int:
    item = find(engine, name)
    if say_proven:
        listener.status(proven.said(name))
    exec_id, stream = engine.exec_stream(item.id, argv)
    for out, err in stream:
        if out:
            listener.output("stdout", out)
        if err:
            listener.output("stderr", err)
    return engine.exec_exit_code(exec_id)


def egress_log(engine: Engine, name: str) -> tuple[EgressEvent, ...] | None:
    """What the proxy of the sandbox `name` recorded of the agent's requests; None when the sandbox
    has no network at all (nothing could leave it, nothing was recorded)."""
    item = find(engine, name)
    proxies = [i for i in engine.list(label.selector(label.SANDBOX, name)) if i.labels.get(label.KIND) == "proxy"]
    if not proxies:
        if engine.inspect(item.id).host.network_mode == "none":
            return None
        raise NotFound(f"{name} has a network but no egress proxy of ours: nothing recorded what it reached")
    return agents_own(parse_log(engine.logs(proxies[0].id)))


def rule_changes(engine: Engine, name: str) -> tuple[RuleChange, ...]:
    """The allow rules `sandbox egress` changed in the sandbox `name`, with their reasons, from its
    proxy's log (none: no proxy)."""
    proxies = [i for i in engine.list(label.selector(label.SANDBOX, name)) if i.labels.get(label.KIND) == "proxy"]
    return parse_changes(engine.logs(proxies[0].id)) if proxies else ()
