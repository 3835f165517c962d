"""`sandbox explain`: for every effective field, the Docker mechanism that applies it, the component
that enforces it and the probe check that proves it. ENFORCEMENT below is the one place that says so,
but for the rows that depend on who starts the sandbox: each target's cells say those."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from launcher import tables
from launcher.host.engineid import EngineFacts
from launcher.plan import checks, runtimes
from launcher.plan.enforcement import Component, Enforcement
from launcher.policy.layers import FIELDS, Effective
from launcher.policy.model import NetworkMode, Runtime
from launcher.targets import TARGETS


E = Enforcement
# (field, variant) -> how it is enforced. The variant is the network mode for network.* fields,
# the value for workspace.access, .git and .mode, and "" otherwise (see _variant).
ENFORCEMENT: dict[tuple[str, str], Enforcement] = {
    ("image", ""): E(mechanism="the container's image", component=Component.NOTHING, checks=(),
                     note="not a boundary: the image is untrusted and the probe never runs its programs"),
    ("packages", ""): E(mechanism="apt-get install on top of the image, built once per content (sandbox/agent-ext:HASH)",
                        component=Component.NOTHING, checks=(),
                        note="not a boundary: the extended image is as untrusted as the image; the probe proves it as before"),
    ("build", ""): E(mechanism="the repository's Dockerfile, FROM sandbox/agent:bookworm (checked), built on the host's "
                               "engine before the sandbox", component=Component.NOTHING, checks=(),
                     note="not a boundary; a repository layer's build applies only once its .sandbox.yaml was approved"),
    ("runtime", "runc"): E(mechanism="--runtime runc: the host kernel runs the agent", component=Component.NAMESPACE,
                           checks=("kernel.runtime",),
                           note="namespaces, seccomp, capabilities and cgroups of the host kernel are the boundary"),
    ("runtime", "gvisor"): E(mechanism="--runtime sandbox-runsc (proxy mode: sandbox-runsc-hostinet), runsc "
                                       "--oci-seccomp", component=Component.GVISOR, checks=("kernel.runtime",),
                             note="the agent's system calls meet gVisor's kernel, not the host's; in proxy mode its "
                                  "sockets use the host's network stack (inside the sandbox's own namespace)"),
    ("workspace.target", ""): E(mechanism="--mount type=bind,dst=TARGET", component=Component.MOUNT,
                                checks=("mounts.workspace",)),
    ("workspace.access", "read-write"): E(mechanism="--mount type=bind (writable)", component=Component.MOUNT,
                                          checks=("mounts.writable", "mounts.workspace", "ws.access")),
    ("workspace.access", "read-only"): E(mechanism="--mount type=bind,readonly", component=Component.MOUNT,
                                         checks=("mounts.writable", "mounts.workspace", "ws.access")),
    ("workspace.protect", ""): E(mechanism="read-only bind per path; read-only tmpfs if missing",
                                 component=Component.MOUNT, checks=("fs.protected",)),
    ("workspace.git", "read-only"): E(mechanism="read-only bind of .git and of every other git directory and "
                                              "config path git would use (gitscan); read-only tmpfs if missing",
                                      component=Component.MOUNT,
                                      checks=("fs.protected",)),
    ("workspace.git", "read-write"): E(mechanism="hooks, config, info (and commondir, config.worktree where they "
                                               "exist) of every git directory bound read-only; the rest writable",
                                       component=Component.MOUNT,
                                       checks=("fs.protected",),
                                       note="widened: the agent can rewrite the index, refs and objects, e.g. "
                                            "skip-worktree hides a changed file from `git status` on the host"),
    ("workspace.mode", "bind"): E(mechanism="--mount type=bind of the host directory", component=Component.MOUNT,
                                  checks=("mounts.workspace",)),
    ("workspace.mode", "copy"): E(mechanism="an overlay volume: a copy of the tree below, the agent's changes in a "
                                            "volume above; the host directory is not mounted", component=Component.MOUNT,
                                  checks=("mounts.workspace", "mounts.inventory"),
                                  note="changes reach the host only through `sandbox apply`, which refuses protected paths"),
    ("workspace.exclude", ""): E(mechanism="left out when the launcher copies the tree (copy mode)",
                                 component=Component.LAUNCHER, checks=(),
                                 note="the copy is made before the sandbox starts; the agent never sees what it left out"),
    ("mounts", ""): E(mechanism="--mount type=bind[,readonly] per entry", component=Component.MOUNT,
                      checks=("mounts.inventory", "mounts.writable", "sockets.mounts"),
                      note="sockets, runtime dirs, credential dirs, / and $HOME are refused by the launcher"),
    ("tmpfs", ""): E(mechanism="--tmpfs PATH:size=SIZE,uid=UID,gid=GID,mode=MODE", component=Component.MOUNT,
                     checks=("mounts.inventory", "mounts.writable"),
                     note="size and mode are applied, not probed (runc before 1.1.8 keeps the mode of a directory "
                          "the image has there)"),
    ("home.mode", "tmpfs"): E(mechanism="--tmpfs HOME:size=SIZE,uid=UID,gid=GID,mode=0700; HOME=TARGET",
                              component=Component.MOUNT, checks=("home.private", "mounts.writable", "fs.rofs"),
                              note="gone with the sandbox"),
    ("home.mode", "volume"): E(mechanism="--mount type=volume,src=sandbox-home-<workspace hash>-<trust key>-<profile>,"
                                         "volume-nocopy; chowned to UID:GID, mode 0700 before the start",
                               component=Component.MOUNT, checks=("home.private", "mounts.writable", "fs.rofs"),
                               note="kept for the next run of this workspace under the same trust key only (a policy of "
                                    "another reach gets another volume): what the agent left there (agent "
                                    "settings, shell rc files, MCP servers) runs again; `sandbox down --purge`"),
    ("home.target", ""): E(mechanism="the home's mount point; --env HOME=TARGET unless env.set sets HOME",
                           component=Component.MOUNT, checks=("home.private",)),
    ("home.size", ""): E(mechanism="--tmpfs HOME:size=SIZE (tmpfs mode)", component=Component.MOUNT, checks=(),
                         note="applied, not probed; a volume has no size limit"),
    ("network.mode", "none"): E(mechanism="--network none", component=Component.NAMESPACE,
                                checks=("net.interfaces", "net.routes")),
    ("network.mode", "proxy"): E(mechanism="internal network, no gateway; proxy sidecar", component=Component.NAMESPACE,
                                 checks=("net.interfaces", "net.routes", "egress.proxy", "egress.direct", "egress.dns")),
    # The Kubernetes target (`explain --target kubernetes`): the probe's Pod modes (CONTRACT.md).
    ("network.mode", "pod-none"): E(mechanism="NetworkPolicy: no ingress, no egress (the network plugin enforces it)",
                                    component=Component.NAMESPACE,
                                    checks=("net.interfaces", "net.routes", "pod.reach", "pod.dns"),
                                    note="the plugin's interface is accepted; nothing tried may answer"),
    ("network.mode", "pod-proxy"): E(mechanism="NetworkPolicy: egress only to the proxy Pod's ports; proxy Pod",
                                     component=Component.NAMESPACE,
                                     checks=("net.interfaces", "net.routes", "egress.proxy", "pod.reach", "pod.dns"),
                                     note="nothing tried but the proxy's ClusterIP and port may answer"),
    ("network.model", "pod-proxy"): E(mechanism="--agent with a key: a proxy endpoint to the agent's model API, the "
                                                "key added on the way out", component=Component.PROXY,
                                      checks=("egress.proxy", "pod.reach", "env.secrets")),
    ("network.allow", "none"): E(mechanism="nothing to allow: no interface but lo", component=Component.NAMESPACE,
                                 checks=("net.interfaces", "net.routes")),
    ("network.allow", "proxy"): E(mechanism="proxy ACL (host and port) in its config", component=Component.PROXY,
                                  checks=("egress.proxy", "egress.denied")),
    # with rules per request (network.allow[].http): the proxy terminates TLS for those hosts
    ("network.allow", "proxy-http"): E(mechanism="proxy ACL (host and port); for hosts with http: rules, TLS "
                                                 "terminated with this sandbox's own CA and every request judged "
                                                 "by method and normalised path (403 from the proxy; audit: logged)",
                                       component=Component.PROXY,
                                       checks=("egress.proxy", "egress.denied", "egress.bump_ca", "egress.http_refused",
                                               "egress.tunnel"),
                                       note="a check runs only where the rules give it something to try: a refusable "
                                            "request (not in audit mode), a host without http: rules"),
    ("network.allow_ip_literals", "none"): E(mechanism="nothing to allow: no interface but lo",
                                             component=Component.NAMESPACE, checks=("net.interfaces",)),
    ("network.allow_ip_literals", "proxy"): E(mechanism="proxy ACL (IP entries only if on)", component=Component.PROXY,
                                              checks=("egress.denied",),
                                              note="the probe shows default deny for a name, not for an IP"),
    ("network.model", "none"): E(mechanism="nothing to reach: no interface but lo", component=Component.NAMESPACE,
                                 checks=("net.interfaces",),
                                 note="with --agent NAME and a model key (and model on), proxy mode for that model "
                                      "API alone"),
    ("network.model", "proxy"): E(mechanism="--agent with a key: a proxy endpoint to the agent's model API, the key "
                                            "added on the way out; no allow entry", component=Component.PROXY,
                                  checks=("egress.proxy", "egress.direct", "env.secrets"),
                                  note="off: the model API's secret is dropped and --model-key-env is refused"),
    ("env.pass", ""): E(mechanism="--env NAME=VALUE from the host", component=Component.LAUNCHER,
                        checks=("env.secrets", "env.runtime"),
                        note="the environment is built from nothing; the probe proves no secret-shaped variable"),
    ("env.set", ""): E(mechanism="--env NAME=VALUE", component=Component.LAUNCHER, checks=("env.secrets", "env.runtime")),
    ("limits.pids", ""): E(mechanism="--pids-limit", component=Component.CGROUP, checks=("limits.pids",)),
    ("limits.pids", "gvisor"): E(mechanism="--pids-limit PIDS+4096 (gVisor's own host threads)", component=Component.CGROUP,
                                 checks=("limits.pids",), note="counts the sandbox's host threads: at the limit the "
                                 "whole sandbox ends; compared outside (no cgroup file inside gVisor)"),
    ("limits.memory", "gvisor"): E(mechanism="--memory, --memory-swap; gVisor sizes its memory to it",
                                   component=Component.CGROUP, checks=("limits.memory",)),
    ("limits.memory", ""): E(mechanism="--memory, --memory-swap (same value)", component=Component.CGROUP,
                             checks=("limits.memory",)),
    ("limits.cpus", ""): E(mechanism="--cpus (CFS quota)", component=Component.CGROUP, checks=()),
    ("limits.timeout", ""): E(mechanism="the launcher stops the container", component=Component.LAUNCHER, checks=(),
                              note="kept by `sandbox run`; a killed launcher leaves it to `sandbox gc`"),
    ("limits.session", ""): E(mechanism="the container's main process ends it (up, dev container)",
                              component=Component.PROCESS, checks=(),
                              note="warns the sandbox's terminals first; the copy and home stay for the next `up`"),
    ("limits.idle", ""): E(mechanism="the container's main process ends it after no terminal input or output",
                           component=Component.PROCESS, checks=(),
                           note="work without a terminal does not count as activity; the copy and home stay"),
    ("user", ""): E(mechanism="--user UID:GID (auto: the workspace owner, never 0)", component=Component.PROCESS,
                    checks=("identity.uid", "identity.gid", "identity.groups", "ws.access")),
    ("capabilities", ""): E(mechanism="--cap-drop ALL, --cap-add per entry", component=Component.CAPABILITIES,
                            checks=("caps.bnd", "caps.process")),
    ("secrets", "none"): E(mechanism="nothing to inject: no proxy", component=Component.NAMESPACE,
                           checks=("net.interfaces",)),
    ("secrets", "proxy"): E(mechanism="the proxy adds the header on its endpoint port; the sandbox gets only "
                                      "SANDBOX_ENDPOINT_<NAME>; a bound key (bind:): a placeholder in its variable, "
                                      "swapped by the proxy in requests to its host and paths, refused anywhere else "
                                      "(any header, the body: the key ICAP service)",
                            component=Component.PROXY, checks=("env.secrets", "egress.key_refused", "egress.key_hidden"),
                            note="the agent can use the key against that one upstream, never read it"),
    ("ca_certificates", ""): E(mechanism="read-only file mounts at /etc/sandbox-ca; SSL_CERT_FILE, REQUESTS_CA_BUNDLE, "
                                         "CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS", component=Component.MOUNT,
                               checks=("mounts.inventory", "mounts.writable"),
                               note="certificates only (a private key is refused); whether a tool honours them is its own"),
    ("command", ""): E(mechanism="the container command, run after the probe", component=Component.NOTHING, checks=(),
                       note="what runs inside, not a boundary"),
}

# Not fields: what every sandbox gets, whatever the policy says.
ALWAYS: tuple[tuple[str, Enforcement], ...] = (
    ("root filesystem read-only", E(mechanism="--read-only", component=Component.MOUNT, checks=("fs.root_ro", "fs.rofs"))),
    ("/sys and /proc/sys read-only", E(mechanism="engine default (never --privileged)", component=Component.MOUNT,
                                       checks=("fs.sysfs_ro",))),
    ("no capabilities in effect", E(mechanism="--cap-drop ALL", component=Component.CAPABILITIES, checks=("caps.process",))),
    ("no new privileges", E(mechanism="--security-opt no-new-privileges", component=Component.PROCESS, checks=("nnp",))),
    ("system call filter", E(mechanism="Docker's default seccomp profile", component=Component.SECCOMP,
                             checks=("seccomp.mode", "seccomp.unshare"))),
    ("own PID namespace", E(mechanism="never --pid host", component=Component.NAMESPACE, checks=("proc.pid1",))),
    ("no devices", E(mechanism="never --device", component=Component.CGROUP, checks=("dev.nodes",))),
    ("no container-runtime socket", E(mechanism="such mounts refused", component=Component.LAUNCHER,
                                      checks=("sockets.runtime", "sockets.mounts"))),
    ("no credentials", E(mechanism="credential mounts and secret env refused", component=Component.LAUNCHER,
                         checks=("creds.files", "env.secrets", "env.runtime"))),
)


# On an engine that maps ids (`explain --engine`, and every launch): what the map proves.
REMAPPED = ("uid 0 inside is not root outside", E(
    mechanism="the engine's user namespace (rootless, or dockerd --userns-remap)", component=Component.NAMESPACE,
    checks=("identity.userns",), note="ids inside map to unprivileged ids of the host (/etc/subuid, /etc/subgid)"))


def on_engine(field: str, row: Enforcement, engine: EngineFacts | None) -> Enforcement:
    """The row as the engine asked has it: a limit it would ignore is refused at launch."""
    if engine is None or field not in engine.unenforced:
        return row
    return E(mechanism=row.mechanism, component=Component.NOTHING, checks=row.checks,
             note=f"REFUSED on this engine: {engine.label} ignores it (no cgroup controller it may use); "
                  "`sandbox run` refuses the policy rather than run it unlimited")


def for_target(name: str, target: str, default: Enforcement) -> Enforcement:
    """The row as `target` has it: its own cell where the enforcement depends on the target."""
    return TARGETS[target].cells.get(name, default)


def _variant(field: str, eff: Effective) -> str:
    if field == "network.allow" and any(r.http for r in eff.policy.network.allow):
        return "proxy-http"
    if field.startswith("network.") or field == "secrets":
        return eff.policy.network.mode.value
    if field in ("workspace.access", "workspace.git", "workspace.mode"):
        return getattr(eff.policy.workspace, field.split(".")[1]).value
    if field == "home.mode":
        return eff.policy.home.mode.value
    if field in ("runtime", "limits.pids", "limits.memory"):
        return eff.policy.runtime.value
    return ""


@dataclass(frozen=True, kw_only=True)
class Row:
    field: str
    value: str
    decided_by: str
    enforcement: Enforcement

    @property
    def flags(self) -> tuple[str, ...]:
        out = []
        if self.enforcement.component is Component.NOTHING:
            out.append("enforced by nothing")
        if not self.enforcement.checks:
            out.append("not probed")
        return tuple(out)


def rows(eff: Effective, target: str = "run", engine: EngineFacts | None = None) -> tuple[Row, ...]:
    decided = {d.field: d for d in eff.decisions}

    def entry(f: str) -> Enforcement:
        variant = _variant(f, eff)
        pod = ENFORCEMENT.get((f, f"pod-{variant}")) if TARGETS[target].kind == "kubernetes" else None
        return pod or ENFORCEMENT.get((f, variant)) or ENFORCEMENT[(f, "")]

    return tuple(Row(field=f, value=decided[f].value, decided_by=decided[f].decided_by,
                     enforcement=on_engine(f, for_target(f, target, entry(f)), engine)) for f in FIELDS)


# Under runtime: gvisor, gVisor's kernel is (also) what enforces these.
UNDER_GVISOR: dict[str, Enforcement] = {
    "no new privileges": E(mechanism="runsc sets no_new_privs on every process (and --security-opt no-new-privileges)",
                           component=Component.GVISOR, checks=("nnp",)),
    "system call filter": E(mechanism="gVisor's kernel serves every system call; launcher/plan/gvisor-seccomp.json "
                                      "inside it (runsc --oci-seccomp)", component=Component.GVISOR,
                            checks=("seccomp.mode", "seccomp.unshare")),
    "no devices": E(mechanism="never --device; gVisor emulates the few nodes it has, none reaches the host",
                    component=Component.GVISOR, checks=("dev.nodes",)),
}


def always(target: str = "run", runtime: Runtime = Runtime.RUNC,
           engine: EngineFacts | None = None) -> tuple[tuple[str, Enforcement], ...]:
    """The ALWAYS rows (gVisor's where it enforces them; the id map's on a remapping engine), then
    the launcher's own protections, as `target` has them."""
    rows_ = tuple((name, UNDER_GVISOR.get(name, e) if runtime is Runtime.GVISOR else e) for name, e in ALWAYS)
    rows_ += (REMAPPED,) if engine is not None and engine.remapped else ()
    return rows_ + tuple((name, cell) for name, cell in TARGETS[target].cells.items() if name not in FIELDS)


def checks_named() -> set[str]:
    """Every probe check id this table relies on (a test compares them with the probe)."""
    return {c for e in (*ENFORCEMENT.values(), *(e for _, e in ALWAYS), REMAPPED[1]) for c in e.checks}


def to_json(eff: Effective, target: str = "run", engine: EngineFacts | None = None) -> dict:
    def one(name, e, **extra):
        return {"field": name, **extra, "mechanism": e.mechanism, "enforced_by": e.component.value,
                "probe_checks": list(e.checks), "note": e.note}
    return {
        "policy": eff.policy.name, "sha256": eff.policy.digest,
        "layers": [{"kind": layer.kind.value, "file": layer.file, "sha256": layer.digest} for layer in eff.layers],
        "fields": [one(r.field, r.enforcement, value=r.value, decided_by=r.decided_by,
                       flags=list(r.flags + _refused(r.field, engine)))
                   for r in rows(eff, target, engine)],
        "always": [one(name, e) for name, e in always(target, eff.policy.runtime, engine)],
        "target": target,
        "not_enforced_here": [{"field": name, "why": why} for name, why in TARGETS[target].cannot()],
        "opt_ins": [{"flag": flag, "adds": adds} for flag, adds in TARGETS[target].opt_ins],
        "proxy_mode": eff.policy.network.mode is NetworkMode.PROXY,
        "not_applicable": [{"check": c, "reason": why} for c, why in not_applicable(eff, target)],
        "egress_rules": [{"rule": rule, "enforcer": enforcer} for rule, enforcer in egress_rules(eff)],
        **({"engine": {"engine": engine.kind, "rootless": engine.rootless, "userns_remap": engine.userns_remap,
                       "cgroup_version": engine.cgroup_version, "unenforced": list(engine.unenforced)}}
           if engine is not None else {}),
    }


def egress_rules(eff: Effective) -> tuple[tuple[str, str], ...]:
    """(rule, enforcer) per allow rule in proxy mode: a tunnel (host and port) or intercepted (methods
    and paths judged per request, enforced or audited)."""
    if eff.policy.network.mode is not NetworkMode.PROXY:
        return ()
    return tuple((str(r), "proxy (intercepted)" + (", audit: only logged" if r.http.mode == "audit" else "")
                  if r.http else "proxy (tunnel)") for r in eff.policy.network.allow)


def not_applicable(eff: Effective, target: str = "run") -> tuple[tuple[str, str], ...]:
    """(check, reason) for each probe check the plan marks n/a on `target` (checks.NOT_APPLICABLE):
    the probe reports n/a there, never a pass."""
    kernel = runtimes.kernel(eff.policy.runtime)
    pod = TARGETS[target].kind in ("kubernetes", "agent-sandbox")
    ids = tuple(c for c in checks.ALL if c in checks.not_applicable(kernel) or (pod and c in checks.NOT_APPLICABLE["pod"]))
    net = checks.POD_MODES[eff.policy.network.mode.value] if pod else eff.policy.network.mode.value
    return tuple((c, checks.reason(c, kernel=kernel, net=net)) for c in ids)


def _refused(field: str, engine: EngineFacts | None) -> tuple[str, ...]:
    return ("REFUSED on this engine",) if engine is not None and field in engine.unenforced else ()


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render(eff: Effective, markdown: bool = False, target: str = "run", width: int | None = None,
           engine: EngineFacts | None = None) -> str:
    """A table: field, value, Docker mechanism, enforcing component, probe checks, and a flag;
    the text form within `width` columns when given (cells wrap)."""
    head = ("field", "value", "mechanism", "enforced by", "probe check", "flag")
    body = [(r.field, _clip(r.value, 36), r.enforcement.mechanism, r.enforcement.component.value,
             ", ".join(r.enforcement.checks) or "-", ", ".join(r.flags + _refused(r.field, engine)))
            for r in rows(eff, target, engine)]
    body += [(f"({name})", "always", e.mechanism, e.component.value, ", ".join(e.checks) or "-",
              "NOT ENFORCED" if e.component is Component.NOTHING else "")
             for name, e in always(target, eff.policy.runtime, engine)]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    else:
        lines = tables.table([head, *body], width or sys.maxsize)
    unenforced = [r.field for r in rows(eff, target, engine) if r.enforcement.component is Component.NOTHING]
    unprobed = [r.field for r in rows(eff, target, engine) if not r.enforcement.checks]
    lines += ["", f"policy {eff.policy.name} (sha256 {eff.policy.digest[:12]}), {len(eff.layers)} layer(s)",
              f"enforced by nothing: {', '.join(unenforced) or '-'}", f"not probed: {', '.join(unprobed) or '-'}"]
    lines += [f"not enforced for {target} (`run` enforces it): {name}: {why}" for name, why in TARGETS[target].cannot()]
    lines += [f"probe check n/a (not observable inside): {c}: {why}" for c, why in not_applicable(eff, target)]
    lines += [f"opt-in for {target}: {flag} adds {adds}" for flag, adds in TARGETS[target].opt_ins]
    lines += [f"egress rule {rule}: {enforcer}" for rule, enforcer in egress_rules(eff)]
    if engine is not None:
        lines.append(f"engine asked: {engine.label}" + (f"; refused there: {', '.join(engine.unenforced)}"
                                                         if engine.unenforced else ""))
    if width and not markdown:
        lines = [part for line in lines for part in tables.paragraph(line, width)]
    return "\n".join(lines)
