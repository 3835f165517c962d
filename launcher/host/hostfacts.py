"""HostFacts: everything the compiler knows of this host, gathered once (launcher/host/host.py reads the
environment for it); the compiler is a pure function of the policy and these facts."""

from __future__ import annotations

import functools
import os
import resource
from dataclasses import dataclass

from launcher.host import cafiles, host, hostpaths, imagebuild
from launcher.host.engineid import EngineFacts
from launcher.host.gitdirs import GitFacts
from launcher.host.hostpaths import PathFact
from launcher.host.paths import CREDENTIAL_PATHS
from launcher.policy.model import Access, Policy, WorkspaceMode


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    home: str
    env: tuple[tuple[str, str], ...]       # only the names the policy asks to pass
    workspace: PathFact
    protected: tuple[PathFact, ...]        # anchor of each policy.workspace.protect entry, in order
    mounts: tuple[PathFact, ...]           # one per policy.mounts entry, in order
    runtime_sockets: tuple[str, ...]       # real paths of known runtime sockets and dirs
    credential_paths: tuple[str, ...]      # real paths of credential locations
    probe_volume: str
    # What the launcher itself trusts on this host (host.launcher_paths): a sandbox that could write
    # the trust store or a layer would approve its own policy next time.
    launcher_paths: tuple[str, ...] = ()
    # The launcher's own copy of the probe files on this host (probedir.py), bound instead of the
    # volume when the engine is a daemon on this host: "" for the volume (files for another tool too).
    probe_dir: str = ""
    proxy_image: str
    # A launch's own: a unique container name and the launcher's pid (for `sandbox gc`). Files for
    # another tool (compile, devcontainer) have neither, so the same inputs give the same bytes.
    nonce: str = ""                        # "": the name comes from the policy and the workspace
    owner_pid: int = 0                     # 0: no owner-pid label
    ca_files: tuple[cafiles.CaFile, ...] = ()   # each secrets[].ca_file (given), read and checked
    config_placeholder: str = ""           # the file a missing protected config file is bound from
    ca_certs: tuple[cafiles.CaFile, ...] = ()   # each ca_certificates entry, read and checked
    ca_store: tuple[str, str] = ("", "")   # trustfiles.store_files: the extras alone, the system CAs plus them
    # With rules per request: this launch's own pair of them, which the proxy's CA joins at start
    # (trustfiles.bump_files); ("", ""): none (no http: rule, or files for another tool).
    bump_store: tuple[str, str] = ("", "")
    # Writable bind workspaces only: what git on the host reads for it (gitscan.py), and every
    # host-executed surface's fingerprint (scan.py).
    git: GitFacts = GitFacts()
    surfaces: tuple[tuple[str, str], ...] | None = None   # None: not scanned (read-only workspace)
    # The engine that runs the plan, once it was asked (a launch, `explain --engine`); the default
    # is a rootful engine that enforces every limit.
    engine: EngineFacts = EngineFacts()
    # An engine whose API takes a seccomp profile only as a file on the server (podman): seccompfiles'
    # state file ("" unless its dialect has a seccomp_default; the compiler refuses its plan without it).
    seccomp_profile: str = ""
    # This process's hard rlimits (nofile, nproc; -1 unlimited): the engine's runtime, without
    # CAP_SYS_RESOURCE, cannot give a container more ("error setting rlimit"). () not read.
    rlimits: tuple[tuple[str, int], ...] = ()
    # packages: / build: (imagebuild.gather): the image the plan builds and runs instead of policy.image
    image_build: imagebuild.ImageBuild | None = None


def gather(policy: Policy, workspace: str, probe_volume: str, proxy_image: str = "",
           placeholders: tuple[str, ...] = (), config_placeholder: str = "",
           ca_store: tuple[str, str] = ("", ""), git_placeholder: str = "", launched: bool = True,
           git_read: tuple | None = None) -> HostFacts:
    home = os.path.realpath(os.path.expanduser("~"))
    ws = hostpaths.path_fact(workspace, os.getcwd(), scan=True)
    surfaces, git = None, GitFacts()
    # Not a workspace the compiler refuses anyway (/, a parent of $HOME, a kernel filesystem).
    refused = ws.real == "/" or (home + "/").startswith(ws.real + "/") or ws.real.split("/")[1] in ("proc", "sys", "dev")
    bound = policy.workspace.mode is WorkspaceMode.BIND   # a copy: the agent never reaches the tree itself
    if ws.kind == "dir" and policy.workspace.access is Access.READ_WRITE and bound and not refused:
        from launcher.host import gitscan, scan

        surfaces = scan.snapshot(ws.real)
        git = gitscan.discover(ws.real, surfaces, writable_git=policy.workspace.git is Access.READ_WRITE,
                               owner=ws.owner, placeholder=git_placeholder, read=git_read)
        surfaces.update(scan.extras(ws.real, git.fingerprint, surfaces))   # what the include graph names
    inside = tuple(p for p in git.protect if p not in policy.workspace.protected)
    return HostFacts(
        home=home,
        env=host.passed_env(policy.env.pass_names),
        workspace=ws,
        protected=tuple(hostpaths.shared_anchor(hostpaths.protected_anchor(ws.real, rel), placeholders)
                        for rel in policy.workspace.protected + inside) if bound else (),
        mounts=tuple(hostpaths.path_fact(m.source, os.getcwd(), scan=True) for m in policy.mounts),
        runtime_sockets=host.runtime_socket_paths(),
        credential_paths=tuple(os.path.realpath(os.path.join(home, p)) for p in CREDENTIAL_PATHS),
        probe_volume=probe_volume,
        launcher_paths=host.launcher_paths(),
        config_placeholder=config_placeholder, ca_store=ca_store,
        ca_certs=tuple(cafiles.ca_file(given) for given in policy.ca_certificates),
        proxy_image=proxy_image,
        nonce=os.urandom(3).hex() if launched else "",
        owner_pid=os.getpid() if launched else 0,
        ca_files=tuple(cafiles.ca_file(given) for given in dict.fromkeys(
            [s.ca_file for s in policy.secrets if s.ca_file]
            + [r.http.ca_file for r in policy.network.allow if r.http and r.http.ca_file])),
        git=git,
        surfaces=None if surfaces is None else tuple(sorted(surfaces.items())),
        rlimits=hard_rlimits(),
        image_build=imagebuild.gather(policy, ws.real),
    )


@functools.cache   # a process's hard limits only ever go down, and the launcher lowers none
def hard_rlimits() -> tuple[tuple[str, int], ...]:
    """This process's hard limits of the rlimits a plan sets (-1: unlimited)."""
    return tuple((name, resource.getrlimit(which)[1]) for name, which in
                 (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)))
