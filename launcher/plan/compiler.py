"""compile_policy: a pure function from a Policy and HostFacts to a LaunchPlan.

Host-side refusals (sockets, runtime and credential paths, `/` or $HOME as the workspace) are
launcher/plan/refusals.py's, run here, so the same input always gives the same plan or the same error.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import replace

from launcher import labels as label
from launcher.plan.dialects import Dialect, of as dialect_of
from launcher.errors import PolicyError, Problem
from launcher.host.hostfacts import HostFacts
from launcher.plan.lifetime import Ceiling, up_main
from launcher.policy import inject, registries
from launcher.policy.model import Access, HomeMode, NetworkMode, Policy, Runtime, WorkspaceMode
from launcher.plan.plan import (ContainerSpec, CopySpec, HOME_PROFILE, HomeSpec, LaunchPlan,
                           Mount, MountKind, NetworkSpec, PROBE_BUSYBOX, PROBE_DENIED_HOST, PROBE_DIR, PROBE_GATE,
                           PROBE_SCRIPT, PROXY_ALIAS, PROXY_PORT, ProbeExpectations,
                           ProxySpec, home_volume_name)
from launcher.host.paths import CREDENTIAL_PATHS, RUNTIME_SOCKETS
from launcher.plan import checks, downloads, probehttp, refusals, runtimes, trustfiles, trustlevel
from launcher.plan.networks import ARP_SYSCTLS, INTERNAL_OPTIONS, egress_networks
from launcher.plan.refusals import under
from launcher.plan.squidconf import http_rules_file, keys_file, render_squid, rules_in_force, secret_endpoint
from launcher.plan.trustfiles import CA_DIR
from launcher.policy.policy import CAPABILITY_BITS
from launcher.policy.secrets import RUNTIME_NAMES, SECRET_NAMES, SECRET_VALUES, caseless
from launcher.policy.surfaces import FILE_PLACEHOLDERS, GIT_BY_EXISTENCE, GIT_READS

_ROOT_DIRS = ("/", "/etc", "/usr", "/var", "/home")

# The main process only waits and the agent comes by `exec`; both are labelled up (`sandbox exec`, `ls`).
LONG_LIVED = ("up", "devcontainer")
PORTABLE_KINDS = ("external", "devcontainer", "kubernetes")   # files another tool starts, on any machine
AGENT_USER = (1000, 1000)   # the agent image's own user
PROXY_MEMORY, KEYS_PROXY_MEMORY = 256 * 1024 ** 2, 512 * 1024 ** 2   # with keys bound, its ICAP service checks <= 160 MiB of bodies


def _container_name(policy: Policy, host: HostFacts, kind: str, name: str | None) -> str:
    if name:
        return name
    base = re.sub(r"[^a-z0-9-]+", "-", posixpath.basename(host.workspace.real).lower()).strip("-") or "ws"
    if kind in LONG_LIVED:
        return f"sandbox-{base[:40]}"
    # Files for another tool are named by what they launch, never by where: the same bytes from any
    # checkout (they are committed); two checkouts of one name collide, and the engine refuses the second.
    suffix = host.nonce or hashlib.sha256(trustlevel.effective_digest(policy).encode()).hexdigest()[:6]
    return f"sandbox-{policy.name}-{base[:30]}-{suffix}"


def _owner(host: HostFacts) -> dict[str, str]:
    """The launcher's pid for `sandbox gc`, on what this process launches (no files for another tool)."""
    return {label.OWNER_PID: str(host.owner_pid)} if host.owner_pid else {}


def _user(policy: Policy, host: HostFacts, kind: str) -> tuple[int, int]:
    """policy.user, else the workspace's owner as the container sees it (through the engine's id
    map, where it has one), never 0: else 1000:1000. In files for another tool (PORTABLE_KINDS)
    `auto` is always 1000:1000, the agent image's own user: the same bytes on every machine."""
    if policy.user is not None:
        return policy.user
    if kind in PORTABLE_KINDS:
        return AGENT_USER
    uid, gid = host.workspace.owner
    if host.engine.uid_map:   # rootless podman: the user's own uid is 0 inside, its subuids 1…
        uid, gid = host.engine.inside(uid, host.engine.uid_map), host.engine.inside(gid, host.engine.gid_map)
    return (uid, gid) if uid and gid else AGENT_USER


def _proxy_parts(policy: Policy, host: HostFacts, name: str, labels: dict, egress_network: str | None,
                 cas: dict[str, tuple[str, str]], kind: str = "run"):
    """Networks, proxy and sandbox environment for proxy mode: the sandbox's only network is an
    internal one shared with the proxy alone; the proxy also sits on the egress network."""
    internal = f"{name}-net"
    net_labels = tuple(sorted({**labels, label.KIND: "network"}.items()))
    shared = kind not in PORTABLE_KINDS and dialect_of(host.engine.kind).shared_egress
    egress, egress_made = egress_networks(name, egress_network, net_labels, shared)
    networks = [NetworkSpec(name=internal, internal=True, options=INTERNAL_OPTIONS, labels=net_labels), *egress_made]
    seed = host.nonce or f"{trustlevel.effective_digest(policy)}\0{name}"   # a launch's own, else the same bytes each time
    secrets = tuple(secret_endpoint(i, s, policy.network.allow_ip_literals, cas, seed) for i, s in enumerate(policy.secrets))
    endpoints = tuple(s for s in secrets if not s.bind)
    http = [r for r in policy.network.allow if r.http]
    proxy = ProxySpec(name=f"{name}-proxy", image=host.proxy_image, http_rules=http_rules_file(policy.network.allow),
                      rule_ca_pems=tuple(cas[r.http.ca_file][1] for r in http if r.http.ca_file),
                      ca_files=host.bump_store if http else ("", ""), bump_names=tuple(dict.fromkeys(r.host for r in http)),
                      config=render_squid(name, policy.network.allow, secrets=secrets), internal_network=internal,
                      egress_network=egress, alias=PROXY_ALIAS, port=PROXY_PORT,
                      labels=tuple(sorted({**labels, label.KIND: "proxy",
                                           **({label.CA_FILES: " ".join(host.bump_store)} if http else {})}.items())),
                      secrets=secrets, keys=keys_file(secrets), rules=rules_in_force(policy.network.allow),
                      hosts_entry=dialect_of(host.engine.kind).proxy_by_hosts_entry, ulimits=_ulimits(host),
                      memory_bytes=KEYS_PROXY_MEMORY if any(s.bind for s in secrets) else PROXY_MEMORY)
    url = f"http://{PROXY_ALIAS}:{PROXY_PORT}"
    # The endpoints are reached directly, not through the forward proxy (which would refuse the name).
    no_proxy = "localhost,127.0.0.1" + (f",{PROXY_ALIAS}" if endpoints else "")
    env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
           "NO_PROXY": no_proxy, "no_proxy": no_proxy}
    env.update({inject.endpoint_var(s.name): f"http://{PROXY_ALIAS}:{s.port}" for s in endpoints})
    # A bound key: the placeholder in the agent's usual variable; the value stays in the proxy.
    env.update({s.bind.variable: s.placeholder for s in secrets if s.bind})
    return tuple(networks), proxy, env


def compile_policy(policy: Policy, host: HostFacts, *, command: tuple[str, ...] = (),
                   kind: str = "run", name: str | None = None, egress_network: str | None = None,
                   profile: str = HOME_PROFILE, ceiling: Ceiling | None = None) -> LaunchPlan:
    """Compile the effective policy for this host into a LaunchPlan, or raise PolicyError.
    kind: "run" (we launch it and wait), "up" (kept alive for `exec`), "external" (another tool
    such as docker-compose or plain `docker run` launches it; `gc` leaves it alone) or "devcontainer"
    (another tool launches it and keeps it alive, like `up`). profile: the
    agent profile whose home volume a `home.mode: volume` policy uses. ceiling: how far `sandbox
    extend` may take a long-lived session (lifetime.ceiling; none: limits.session, no further).

    The stages, in order: the refusals, the names, the mounts, the labels, the network, the
    environment, the probe's expectations, the volumes the launcher makes, the container."""
    cas = refusals.check(policy, host, kind)
    container_name = _container_name(policy, host, kind, name)
    uid, gid = _user(policy, host, kind)
    copy = _copy_spec(policy, host, container_name, uid, gid)
    trust = trustlevel.key(policy)
    volume = home_volume_name(host.workspace.real, trust, profile) if policy.home.mode is HomeMode.VOLUME else ""
    mounts, placeholders, ca_env = _mounts(policy, host, copy, volume, uid, gid)
    cache, cache_mounts, cache_env = downloads.cache(policy, host.workspace.real, trust, uid, gid, kind)
    mounts += cache_mounts
    labels = _labels(policy, host, kind, container_name)
    networks, proxy, proxy_env = (), None, {}
    if policy.network.mode is NetworkMode.PROXY:
        networks, proxy, proxy_env = _proxy_parts(policy, host, container_name, labels, egress_network, cas, kind)
    env = {**cache_env, **_env(policy, host, proxy_env, ca_env)}   # env.set still decides
    probe = _probe(policy, host, mounts, copy, proxy, volume, uid, gid)
    agent = tuple(command) or policy.command
    long_lived = kind in LONG_LIVED
    limits = policy.limits
    ceiling = ceiling or Ceiling(seconds=limits.session_seconds, source="limits.session")
    main = up_main(limits.session_seconds, limits.idle_seconds, ceiling.seconds) if long_lived else agent
    labels[label.PLACEHOLDERS] = json.dumps(placeholders)
    if long_lived:   # for `ls`: when it ends at the latest; for `extend`: how far it may go
        labels[label.SESSION] = f"{limits.session_seconds} {limits.idle_seconds}"
        labels[label.SESSION_CEILING] = ceiling.label()
    home_spec, copy, volume_labels = _volume_specs(policy, host, copy, volume, profile, trust, uid, gid)
    labels.update(volume_labels, **({label.CACHE: cache.volume} if cache else {}))
    container = _container(policy, container_name, probe, main, env, mounts, labels, proxy, uid, gid,
                           runtimes.security_opt(policy.runtime, host.seccomp_profile), _ulimits(host),
                           _sysctls(policy, proxy, dialect_of(host.engine.kind)))
    if host.image_build:   # packages: / build: the extended image, built on the policy's (imageext)
        container = replace(container, image=host.image_build.tag)
    return LaunchPlan(policy_name=policy.name, policy_digest=policy.digest, container=container, probe=probe,
                      agent_command=agent,
                      timeout_seconds=policy.limits.session_seconds if long_lived else policy.limits.timeout_seconds,
                      idle_seconds=policy.limits.idle_seconds if long_lived else 0,
                      placeholders=tuple(placeholders), warnings=_warnings(policy, host), networks=networks, proxy=proxy,
                      copy=copy, home=home_spec, cache=cache, image_build=host.image_build)


def _copy_spec(policy: Policy, host: HostFacts, name: str, uid: int, gid: int) -> CopySpec | None:
    """Copy mode's volumes (labelled later, by _volume_specs), or None for a bind workspace."""
    if policy.workspace.mode is not WorkspaceMode.COPY:
        return None
    return CopySpec(name=name, source=host.workspace.real, uid=uid, gid=gid, exclude=policy.workspace.exclude,
                    protected=policy.workspace.protected, labels=())


def _mounts(policy: Policy, host: HostFacts, copy: CopySpec | None, volume: str, uid: int,
            gid: int) -> tuple[list[Mount], list[str], dict[str, str]]:
    """Every mount of the container, in order (the workspace and its protected paths, the policy's
    mounts, the CA files, the tmpfs, the home, the probe), the placeholders made for missing
    protected paths, and the CA files' environment."""
    mounts, placeholders = _workspace_mounts(policy, host, copy)
    for mount, fact in zip(policy.mounts, host.mounts):
        mounts.append(Mount(kind=MountKind.BIND, source=fact.real, target=mount.target,
                            read_only=mount.access is Access.READ_ONLY))
    ca_mounts, ca_env = trustfiles.ca_mounts(policy, host)
    mounts += ca_mounts
    for tmpfs in policy.tmpfs:
        mounts.append(Mount(kind=MountKind.TMPFS, target=tmpfs.target, read_only=False, size_bytes=tmpfs.size_bytes,
                            owner=(uid, gid), mode=tmpfs.mode))
    if policy.runtime is Runtime.GVISOR and not any(m.target == "/tmp" for m in mounts):
        # gVisor mounts a writable /tmp of its own where the spec has none: an empty read-only one instead
        mounts.append(Mount(kind=MountKind.TMPFS, target="/tmp", read_only=True, size_bytes=4096))
    home = policy.home
    if volume:
        mounts.append(Mount(kind=MountKind.VOLUME, source=volume, target=home.target, read_only=False, no_copy=True))
    else:
        mounts.append(Mount(kind=MountKind.TMPFS, target=home.target, read_only=False, size_bytes=home.size_bytes,
                            owner=(uid, gid), mode=0o700))
    # the probe's files: the launcher's own copy where the engine runs here (probefiles), else the volume
    kind, source = (MountKind.BIND, host.probe_dir) if host.probe_dir else (MountKind.VOLUME, host.probe_volume)
    mounts.append(Mount(kind=kind, source=source, target=PROBE_DIR, read_only=True))
    return mounts, placeholders, ca_env


def _workspace_mounts(policy: Policy, host: HostFacts, copy: CopySpec | None) -> tuple[list[Mount], list[str]]:
    """The workspace (a bind, or copy mode's volume) and, over a writable bind, the read-only mounts
    of its protected paths; the host paths of the placeholders that take a missing one's name."""
    ws, target = host.workspace, policy.workspace.target
    writable_ws = policy.workspace.access is Access.READ_WRITE
    if copy:
        mounts = [Mount(kind=MountKind.VOLUME, source=copy.tree_volume, target=target, read_only=not writable_ws, no_copy=True)]
    else:
        mounts = [Mount(kind=MountKind.BIND, source=ws.real, target=target, read_only=not writable_ws)]
    placeholders: list[str] = []
    if not writable_ws or copy:
        return mounts, placeholders
    anchors = dict((a.given, a) for a in host.protected if a.given not in _unmountable(host))
    # A path below another protected one is covered by that one's read-only mount.
    anchors = {g: a for g, a in anchors.items() if not any(under(g, o) for o in anchors if o != g)}
    # The directories above a protected path (.git for .git/hooks) become mount points too,
    # bound writable onto themselves: a mount point cannot be renamed, so `mv .git x; mkdir
    # .git` cannot swap in a fresh, writable .git/hooks (found by `sandbox selftest`).
    for parent in sorted({g.rsplit("/", i)[0] for g in anchors for i in range(1, g.count("/") + 1)} - set(anchors)):
        mounts.append(Mount(kind=MountKind.BIND, source=posixpath.join(ws.real, parent),
                            target=posixpath.join(target, parent), read_only=False))
    for anchor in anchors.values():
        at = posixpath.join(target, anchor.given)
        if anchor.kind == "missing" and anchor.given in FILE_PLACEHOLDERS and host.config_placeholder:
            # A config file its tool opens even when missing: a read-only file holding {} there.
            mounts.append(Mount(kind=MountKind.BIND, source=host.config_placeholder, target=at, read_only=True))
            placeholders.append(anchor.real)
        elif anchor.kind == "missing" and anchor.given in host.git.files and host.git.placeholder:
            # A git config file the include graph names: empty, as git reads a missing one.
            mounts.append(Mount(kind=MountKind.BIND, source=host.git.placeholder, target=at, read_only=True))
            placeholders.append(anchor.real)
        elif anchor.kind == "missing":
            # An empty read-only tmpfs takes the name, so nothing can be created there. Docker
            # creates the mount point in the workspace; the launcher removes it afterwards.
            mounts.append(Mount(kind=MountKind.TMPFS, target=at, read_only=True, size_bytes=4096))
            placeholders.append(anchor.real)
        else:
            mounts.append(Mount(kind=MountKind.BIND, source=anchor.real, target=at, read_only=True))
    return mounts, placeholders


def _labels(policy: Policy, host: HostFacts, kind: str, name: str) -> dict[str, str]:
    """The container's labels that its networks and proxy share (the volumes' come later)."""
    return {
        label.MANAGED: "1", label.KIND: "up" if kind in LONG_LIVED else kind, label.POLICY: policy.name,
        label.POLICY_DIGEST: policy.digest, label.WORKSPACE: host.workspace.real,
        label.EFFECTIVE_DIGEST: trustlevel.effective_digest(policy),
        label.SANDBOX: name, **_owner(host),
    }


def _env(policy: Policy, host: HostFacts, proxy_env: dict[str, str], ca_env: dict[str, str]) -> dict[str, str]:
    """The agent's environment: env.pass, HOME, the registries' tool variables, env.set, then the proxy's and
    the CA files' variables."""
    env = dict(host.env)
    env["HOME"] = policy.home.target   # unless env.set says otherwise
    env.update(registries.tool_environment(policy))   # installs as the agent's user; env.set still decides
    env.update(policy.env.set_values)
    env.update(proxy_env)
    env.update(ca_env)
    return env


def _probe(policy: Policy, host: HostFacts, mounts: list[Mount], copy: CopySpec | None, proxy: ProxySpec | None,
           volume: str, uid: int, gid: int) -> ProbeExpectations:
    """What the probe must observe inside the container before the agent starts."""
    ws, target = host.workspace, policy.workspace.target
    writable = tuple(m.target for m in mounts if not m.read_only)
    capbnd = sum(1 << CAPABILITY_BITS[c] for c in policy.capabilities)
    http = {**probehttp.expectations(policy.network.allow), **probehttp.key_expectations(policy.network.allow, proxy.secrets)} \
        if proxy else {}
    return ProbeExpectations(
        uid=uid, gid=gid, capbnd=f"{capbnd:016x}", nnp=1, seccomp=2, kernel=runtimes.kernel(policy.runtime),
        rofs=tuple(d for d in _ROOT_DIRS if not any(under(d, w) for w in writable)),
        writable=writable,
        # files the engine binds into every container (read-only) are mounts the probe expects
        mounts=tuple(m.target for m in mounts) + dialect_of(host.engine.kind).marker_mounts,
        protected=() if copy else tuple(posixpath.join(target, p) for p in _protected(policy, host)),
        workspace=target,
        **({"wsroot": f"/{copy.base_volume}/_data", "wsupper": f"/{copy.upper_volume}/_data/upper"} if copy
           else {"wsroot": ws.real}),
        home=policy.home.target, homesrc=f"/{volume}/_data" if volume else "tmpfs",
        net=policy.network.mode.value,
        pids=str(policy.limits.pids), mem=str(policy.limits.memory_bytes),
        userns="remapped" if host.engine.remapped else "-",
        gate=str(PROBE_GATE) if host.nonce else "-",   # a launch's plan: the launcher's word starts the agent
        checks=checks.for_mode(policy.network.mode.value, userns=host.engine.remapped, http=probehttp.checks_for(http)),
        na=checks.not_applicable(runtimes.kernel(policy.runtime)),
        secretnames=tuple(map(caseless, SECRET_NAMES)), secretvalues=SECRET_VALUES,
        keyvars=tuple(f"{s.bind.variable}={s.placeholder}" for s in proxy.secrets if s.bind) if proxy else (),
        runtimenames=tuple(map(caseless, RUNTIME_NAMES)), runtimesockets=RUNTIME_SOCKETS, credpaths=CREDENTIAL_PATHS,
        **({"proxy": f"{PROXY_ALIAS}:{PROXY_PORT}", "denyhost": PROBE_DENIED_HOST, "resolver": _resolver(proxy),
            "dnsname": next((r.host for r in policy.network.allow if not r.wildcard and not r.ip), "-"), **http,
            **({"bumpca": f"{CA_DIR}/extra.pem"} if http else {})}
           if proxy else {}),
    )


def _resolver(proxy: ProxySpec) -> str:
    """The sandbox's one nameserver in proxy mode: Docker's embedded resolver, which answers the
    proxy's name and sends every other to the sandbox's own loopback (`dns` below); on podman that
    loopback itself (its internal network has no DNS server: ProxySpec.hosts_entry)."""
    return "127.0.0.1" if proxy.hosts_entry else "127.0.0.11"


def _volume_specs(policy: Policy, host: HostFacts, copy: CopySpec | None, volume: str, profile: str, trust: str,
                  uid: int, gid: int) -> tuple[HomeSpec | None, CopySpec | None, dict[str, str]]:
    """The volumes the launcher makes before the start (the home, copy mode's), labelled, and the
    container's labels naming them."""
    home_spec, labels = None, {label.TRUST: trust}
    ws = host.workspace.real
    if volume:
        labels[label.HOME] = volume
        home_spec = HomeSpec(volume=volume, workspace=ws, profile=profile, trust=trust, uid=uid, gid=gid,
                             labels=tuple(sorted({label.MANAGED: "1", label.KIND: "home", label.WORKSPACE: ws,
                                                  label.PROFILE: profile, label.TRUST: trust}.items())))
    if copy:
        labels[label.COPY] = copy.name
        copy = replace(copy, trust=trust, labels=tuple(sorted({label.MANAGED: "1", label.KIND: "copy", label.COPY: copy.name,
                                                  label.WORKSPACE: ws, label.POLICY: policy.name, label.TRUST: trust,
                                                  **_owner(host), label.PROTECTED: json.dumps(copy.protected)}.items())))
    return home_spec, copy, labels


def _container(policy: Policy, name: str, probe: ProbeExpectations, main: tuple[str, ...], env: dict[str, str],
               mounts: list[Mount], labels: dict[str, str], proxy: ProxySpec | None, uid: int, gid: int,
               security_opt: tuple[str, ...], ulimits: tuple[tuple[str, int, int], ...],
               sysctls: tuple[tuple[str, str], ...]) -> ContainerSpec:
    """The agent's container: the probe runs first, then `main`."""
    return ContainerSpec(
        name=name, image=policy.image, user=f"{uid}:{gid}",
        entrypoint=(PROBE_BUSYBOX, "sh", PROBE_SCRIPT), command=probe.to_args() + ("--",) + main,
        env=tuple(env.items()), working_dir=policy.workspace.target, mounts=tuple(mounts),
        network_mode=proxy.internal_network if proxy else "none",
        # Docker's embedded resolver still answers for the proxy's name, but forwards every other
        # name to the sandbox's own loopback, where nothing answers: no DNS channel out.
        dns=("127.0.0.1",) if proxy else (), runtime=runtimes.engine_name(policy.runtime, policy.network.mode),
        sysctls=sysctls,
        read_only_root=True, cap_drop=("ALL",), cap_add=policy.capabilities,
        security_opt=security_opt, pids_limit=runtimes.host_pids(policy.runtime, policy.limits.pids),
        memory_bytes=policy.limits.memory_bytes, nano_cpus=int(policy.limits.cpus * 1e9),
        labels=tuple(sorted(labels.items())), hostname=hostname(name), ulimits=ulimits,
        stdin=probe.gate != "-",   # the launcher's word comes there
    )


def hostname(name: str) -> str:
    """The sandbox's name as its hostname (the shell's prompt says where you are): a DNS label, as
    Kubernetes requires of a Pod's (lowercase letters, digits and '-', at most 63)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower())[:63].strip("-") or "sandbox"


def _ulimits(host: HostFacts) -> tuple[tuple[str, int, int], ...]:
    """The rlimits the engine's dialect sets, fitted within the host's hard limits (podman's rootful
    defaults exceed them on a host whose engine lacks CAP_SYS_RESOURCE, and every start fails,
    "error setting rlimit"); none where the engine's own fit (dockerd's)."""
    return dialect_of(host.engine.kind).ulimits(host.rlimits)


def _sysctls(policy: Policy, proxy: ProxySpec | None, dialect: Dialect) -> tuple[tuple[str, str], ...]:
    """Proxy mode's: quick neighbour discovery (runc; gVisor's netstack takes no such sysctl) and
    what the engine's dialect needs on the internal network (podman: no IPv6 there, which Docker
    turns off itself)."""
    if not proxy or policy.runtime is not Runtime.RUNC:
        return ()
    return ARP_SYSCTLS + dialect.internal_sysctls


def _warnings(policy: Policy, host: HostFacts) -> tuple[str, ...]:
    writable_ws = policy.workspace.access is Access.READ_WRITE
    copy_mode = policy.workspace.mode is WorkspaceMode.COPY
    warnings = list(host.git.notes if writable_ws and not copy_mode else ())
    if writable_ws and policy.workspace.git is Access.READ_WRITE:
        warnings.append("workspace.git is read-write: the agent can rewrite the index, refs and objects of "
                        f"{host.workspace.real}/.git (skip-worktree hides a changed file from `git status`); review with care")
    # A workspace the agent cannot read or write is not warned about here: the probe's ws.access
    # check proves access as the agent's uid, inside the container, and fails the start with a hint.
    return tuple(warnings)


def _protected(policy: Policy, host: HostFacts) -> tuple[str, ...]:
    """What the probe proves read-only: every protected path, and inside a read-only .git directory
    each file and directory that git on the host reads."""
    paths = tuple(p for p in policy.workspace.protected + host.git.protect if p not in _unmountable(host))
    root_git = next((a for a in host.protected if a.given == ".git"), None)
    if root_git and root_git.kind != "file" and policy.workspace.git is Access.READ_ONLY:   # a gitfile: see git.protect
        paths += GIT_READS
    return tuple(dict.fromkeys(paths))


def _unmountable(host: HostFacts) -> set[str]:
    """Missing git files whose mere existence changes what git does (a mount point would be an
    empty directory there, and git fails on it). The surface report covers them instead."""
    return {a.given for a in host.protected if a.kind == "missing" and a.given in GIT_BY_EXISTENCE}
