"""Host-side refusals, compile_policy's first stage: the host paths no sandbox may mount (sockets,
runtime and credential paths, `/` or $HOME, kernel and device filesystems), secret-shaped values
passed in, what another tool cannot launch, what host git would run. Pure, over the host facts."""

from __future__ import annotations

from launcher import resources
from launcher.errors import PolicyError, Problem
from launcher.host.engineid import LIMIT_CONTROLLERS
from launcher.host.hostfacts import HostFacts
from launcher.host.hostpaths import PathFact
from launcher.plan import runtimes, trustfiles
from launcher.plan import dialects
from launcher.policy.model import Access, HomeMode, NetworkMode, Policy, Runtime, WorkspaceMode
from launcher.policy.secrets import secret_value
from launcher.values import show

_REFUSED_SOURCES = ("/proc", "/sys", "/dev", "/boot")


def _related(a: str, b: str) -> bool:
    """True when one path is the other or contains it."""
    return a == b or a == "/" or b == "/" or a.startswith(b + "/") or b.startswith(a + "/")


def refuse_source(fact: PathFact, host: HostFacts, where: str, file: str) -> Problem | None:
    """Why a host path may not be mounted into a sandbox, or None."""
    def problem(found: str, hint: str) -> Problem:
        return Problem(file=file, path=where, expected="a host path safe to share", found=found, hint=hint)

    real = fact.real
    if fact.kind == "missing":
        return Problem(file=file, path=where, expected="an existing host path",
                       found=f"{real} does not exist", hint="create it first, or fix the path")
    if fact.kind == "socket":
        return problem(f"{real} is a socket", "a socket reaches a service outside the sandbox")
    if real == "/":
        return problem("/ (the whole host)", "mount only the directories the agent needs")
    if real == host.home:
        return problem(f"{real} (your home directory)", "mount a project directory instead")
    for path in host.runtime_sockets:
        if _related(real, path):
            return problem(f"{real}, which is or holds the container runtime path {path}",
                           "a container runtime socket in the sandbox is root on the host")
    for path in host.credential_paths:
        if _related(real, path):
            return problem(f"{real}, which is or holds the credential location {path}",
                           "credentials never enter the sandbox")
    if host.probe_dir and _related(real, host.probe_dir):   # checked, then bound: written meanwhile, it runs
        return problem(f"{real}, which is or holds the launcher's probe files {host.probe_dir}",
                       "a sandbox that could write them would decide what the next sandbox's probe runs")
    for path in host.launcher_paths:
        if _related(real, path):
            return problem(f"{real}, which is or holds the launcher's own {path}",
                           "the launcher trusts what is there (approvals, policy layers); a sandbox must not write it")
    for path in _REFUSED_SOURCES:
        if _related(real, path) and real != "/":
            return problem(f"{real} (kernel or device filesystem)", "devices cannot be mounted")
    if fact.sockets:
        return problem(f"{real}, which holds the socket {fact.sockets[0]}",
                       "a socket reaches a service outside the sandbox; remove it or mount a subdirectory")
    return None


def under(path: str, mount: str) -> bool:
    """True when path is the mount point or below it (never for a mount of /)."""
    return mount != "/" and (path == mount or path.startswith(mount + "/"))


def check(policy: Policy, host: HostFacts, kind: str) -> dict[str, tuple[str, str]]:
    """compile_policy's first stage: every refusal of this policy on this host at once, as one
    PolicyError; else the CA bundles of the injected secrets, by the policy's ca_file."""
    file = policy.source
    problems: list[Problem] = []
    ws = host.workspace
    if ws.kind != "dir":
        problems.append(Problem(file="command line", path="--workspace", expected="an existing directory",
                                found=f"{ws.real} ({ws.kind})"))
    else:
        refusal = refuse_source(ws, host, "--workspace", "command line")
        if refusal:
            problems.append(refusal)
    for index, fact in enumerate(host.mounts):
        refusal = refuse_source(fact, host, f"mounts[{index}].source", file)
        if refusal:
            problems.append(refusal)
    for name_, value in host.env:
        if secret_value(value) or "\n" in value or "\0" in value:
            problems.append(Problem(file=file, path=f"env.pass ({name_})", expected="a plain, non-secret value",
                                    found="a secret-shaped or multi-line value (not shown)",
                                    hint=f"unset {name_} or remove it from env.pass"))
    problems += _launched_elsewhere(policy, kind) + _git_refusals(policy, host)
    cas, ca_problems = trustfiles.ca_bundles(policy, host)
    problems += ca_problems
    problems += [Problem(file=file, path=p, expected=e, found=f, hint=h) for p, e, f, h in
                 runtimes.refusals(policy.runtime, policy.capabilities)]
    problems += _unenforced_limits(policy, host) + dialects.of(host.engine.kind).refusals(policy, host)
    if problems:
        raise PolicyError(problems)
    return cas


def _unenforced_limits(policy: Policy, host: HostFacts) -> list[Problem]:
    """A limit the engine would ignore is refused, never run unlimited: rootless podman on cgroup v1
    only warns ("Resource limits are not supported and ignored") and starts the container."""
    engine = host.engine
    values = {"limits.memory": policy.limits.memory_bytes, "limits.pids": policy.limits.pids,
              "limits.cpus": policy.limits.cpus}
    controller = dict(LIMIT_CONTROLLERS)
    return [Problem(file=policy.source, path=field, expected="a limit the engine enforces",
                    found=f"{show(field, values[field])}, which {engine.label} would ignore (no {controller[field]} cgroup controller "
                          "it may use)",
                    hint="run it on a rootful engine, or rootless on cgroup v2 with the memory, pids and cpu controllers "
                         "delegated to the user (systemd: `Delegate=memory pids cpu` for user@.service); a policy cannot "
                         "waive a limit (docs/security.md#rootless-engines)")
            for field in engine.unenforced]


def _copy_alternatives(policy: Policy, kind: str) -> str:
    """The nearest working commands to a copy-mode policy another tool would launch. The copy lives in
    volumes the launcher fills before the start and reads back for `sandbox diff`/`apply`: nothing
    a committed file could do on its own."""
    preset = resources.preset_path(policy.name)
    ref = policy.name if preset is not None and str(preset) == policy.source else (policy.source or policy.name)
    read_only = "`sandbox devcontainer -p read-only`" if kind == "devcontainer" else "the same command with `-p read-only`"
    return (f"copy mode needs the launcher, which makes the copy and brings the changes back: (1) keep copy mode "
            f"with `sandbox up -p {ref}` and `sandbox exec` (then `sandbox diff` to review, `sandbox apply` to bring "
            f"the changes into the checkout); (2) add --workspace-mode bind to the same command (the same sandbox, "
            f"but the agent writes the checkout itself: review with git); (3) {read_only} (the agent cannot change "
            f"the tree)")


def _launched_elsewhere(policy: Policy, kind: str) -> list[Problem]:
    """What only the launcher can prepare, refused for a sandbox another tool launches."""
    problems, file = [], policy.source
    if kind not in ("external", "devcontainer"):
        return problems
    if policy.workspace.mode is WorkspaceMode.COPY:
        problems.append(Problem(file=file, path="workspace.mode", expected="bind for a sandbox another tool launches",
                                found="copy", hint=_copy_alternatives(policy, kind)))
    if policy.home.mode is HomeMode.VOLUME:
        problems.append(Problem(file=file, path="home.mode", expected="tmpfs for a sandbox another tool launches",
                                found="volume", hint="the launcher makes the home volume and hands it to the agent's "
                                "uid before the start (`sandbox run`, `sandbox up`); use home: {mode: tmpfs}"))
    if kind == "devcontainer" and policy.runtime is Runtime.GVISOR and policy.network.mode is NetworkMode.PROXY:
        # compose reads a seccomp profile's file from its own working directory, never the compose
        # file's: a committed compose.yaml cannot name gVisor's profile (runtimes.GVISOR_SECCOMP).
        problems.append(Problem(file=file, path="runtime", expected="runc, or network none, for a dev container "
                                "in proxy mode", found="gvisor with network proxy",
                                hint="start it with `sandbox up` (and `sandbox shell`), or use network: {mode: none}: "
                                "that dev container is one docker run, with gVisor's profile beside devcontainer.json"))
    for index, rule in enumerate(policy.network.allow):
        if rule.http:
            problems.append(Problem(file=file, path=f"network.allow[{index}].http", expected="host rules only for a "
                                    "sandbox another tool launches", found=str(rule), hint="the proxy's CA for rules "
                                    "per request is made when `sandbox run` or `sandbox up` starts the sandbox; drop "
                                    "http: here to allow the whole host"))
    return problems


def _git_refusals(policy: Policy, host: HostFacts) -> list[Problem]:
    """A writable workspace's refusals: writable mounts of what host git reads, git paths a
    read-only mount cannot protect, protected paths that are links."""
    problems: list[Problem] = []
    writable_ws = policy.workspace.access is Access.READ_WRITE
    copy_mode = policy.workspace.mode is WorkspaceMode.COPY
    for index, (mount, fact) in enumerate(zip(policy.mounts, host.mounts)):
        held = [real for real in host.git.outside if under(real, fact.real) or under(fact.real, real)]
        if writable_ws and mount.access is Access.READ_WRITE and held:
            problems.append(Problem(file=policy.source, path=f"mounts[{index}]", expected="no writable mount of what git "
                                    "reads for the workspace", found=f"{fact.real} is or holds {held[0]}, which git "
                                    "on the host reads for this workspace (a git directory, config file or hooks "
                                    "path)", hint="mount it read-only: git on the host runs code from it"))
    for refusal in host.git.refusals if writable_ws and not copy_mode else ():
        problems.append(Problem(file="command line", path="--workspace", expected="git paths a read-only mount can "
                                "protect", found=refusal, hint="host git would run what the agent writes there; run "
                                "on a copy: --workspace-mode copy (or a read-only workspace)"))
    for anchor in host.protected:
        if writable_ws and anchor.kind in ("symlink", "other"):
            problems.append(Problem(file="command line", path="--workspace",
                                    expected="protected paths that are plain files or directories",
                                    found=f"{anchor.real} is a {anchor.kind}",
                                    hint="remove it; a link there could redirect a read-only mount"))
    return problems

