"""The probe's checks, in the order the probe reports them: one list that the probe script, the
explain table, docs/security.md and the tamper matrix are each tested against; and what to do when one
fails, where the probe's line alone does not say it."""

from __future__ import annotations

# Every mode, in order; the proxy-only checks are reported after net.routes.
FIRST = ("kernel.runtime", "identity.uid", "identity.gid", "identity.groups")
# Only on an engine that maps ids (rootless, userns-remap): uid 0 inside is not root outside.
USERNS = ("identity.userns",)
ALWAYS = FIRST + (
    "caps.process", "caps.bnd", "nnp", "seccomp.mode",
    "seccomp.unshare", "fs.root_ro", "fs.rofs", "fs.sysfs_ro", "mounts.inventory", "mounts.writable",
    "mounts.workspace", "ws.access", "home.private", "fs.protected", "sockets.mounts", "sockets.runtime",
    "env.secrets", "env.runtime", "creds.files", "net.interfaces", "net.routes",
)
PROXY_ONLY = ("egress.proxy", "egress.denied", "egress.direct", "egress.dns")
# Proxy mode with rules per request (network.allow[].http) only, each when the plan gives it
# something to try (launcher/probehttp.py checks_for): after the proxy-only ones.
HTTP_ONLY = ("egress.bump_ca", "egress.http_refused", "egress.tunnel", "egress.key_refused", "egress.key_hidden")
# The Pod modes (the Kubernetes target only): what a Pod's network lets through, judged by answers.
POD_ONLY = ("pod.reach", "pod.dns")
LAST = ("limits.pids", "limits.memory", "proc.pid1", "dev.nodes")
# The probe's net= modes: Docker's two, and the Kubernetes target's two for a Pod's network
# (images/probe/CONTRACT.md, "The Pod modes"), one per policy mode.
DOCKER_MODES = ("none", "proxy")
POD_MODES = {"none": "pod", "proxy": "podproxy"}
_BY_MODE = {
    "none": (),
    "proxy": PROXY_ONLY,
    "pod": POD_ONLY,
    # the proxy answers and refuses as in proxy mode; pod.* replaces the direct and DNS checks
    "podproxy": ("egress.proxy", "egress.denied") + POD_ONLY,
}


def for_mode(mode: str, userns: bool = False, http: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ids the probe reports for a sandbox in probe network mode `mode` (with identity.userns
    on an engine that remaps ids, and the HTTP_ONLY checks in `http`), in order."""
    rest = ALWAYS[len(FIRST):] + _BY_MODE[mode] + tuple(c for c in HTTP_ONLY if c in http) + LAST
    return FIRST + (USERNS if userns else ()) + rest


ALL = FIRST + USERNS + ALWAYS[len(FIRST):] + PROXY_ONLY + HTTP_ONLY + POD_ONLY + LAST

# Checks that cannot observe, on a kernel or target, what they prove: the plan marks them not
# applicable (ProbeExpectations.na) with these reasons, the probe reports `n/a` (what it can see
# must still hold), and the proof is what each reason names. Never a silent pass: `sandbox
# explain` and the run's report show them.
NOT_APPLICABLE = {
    "gvisor": {
        "nnp": "gVisor shows no NoNewPrivs line (runsc sets no_new_privs on every process); docker inspect's "
               "SecurityOpt no-new-privileges is compared before the start",
        "mounts.workspace": "gVisor serves the workspace through its file proxy (9p, root /): one such mount must "
                            "be there, its host source is compared in docker inspect's Mounts before the start",
        "limits.pids": "gVisor mounts no cgroup files; docker inspect's PidsLimit (limits.pids + gVisor's own "
                       "threads) is compared before the start",
    },
    "pod": {
        "limits.pids": "the Pod API has no per-Pod pids limit: the node's podPidsLimit holds, or nothing does "
                       "(the loss report says so)",
        "mounts.workspace": "where the workspace claim's node path is not given (workspace_root), the launcher "
                            "cannot name it: one mount must be there, its source is the claim the Pod spec names",
    },
}


def not_applicable(kernel: str) -> tuple[str, ...]:
    """The n/a checks of a Docker plan on `kernel` (the probe's kernel=), in report order."""
    return tuple(c for c in ALL if c in NOT_APPLICABLE.get(kernel, {}))


def reason(check_id: str, *, kernel: str, net: str) -> str:
    """Why `check_id` is not applicable in a plan for `kernel` and probe network mode `net`."""
    pod = NOT_APPLICABLE["pod"].get(check_id) if net in POD_MODES.values() else None
    return pod or NOT_APPLICABLE.get(kernel, {}).get(check_id, "")


def _ws_access_hint(seen: dict[str, str], uid: int, workspace: str) -> str:
    cannot = "/".join(word for word, keys in (("read", ("r", "x", "list")), ("write", ("w",)))
                      if any(seen.get(k) in ("no", "refused") for k in keys)) or "use"
    owner = f"uid {seen['owner']} mode {seen['mode'].rjust(4, '0')}" if "owner" in seen and "mode" in seen \
        else "someone else"
    return (f"the agent (uid {uid}) cannot {cannot} {workspace}, which belongs to {owner}: set `user:` in the "
            "policy to a uid that can, or use copy mode (`--workspace-mode copy`: the agent works on a copy); the agent never "
            "runs as root")


def _home_hint(seen: dict[str, str], uid: int, workspace: str) -> str:
    if seen.get("mounts") != "1":
        return "the agent's home (home.target) must be exactly one mount, the one the plan declares"
    owner, mode = seen.get("owner", "-"), seen.get("mode", "-")
    if not owner.startswith(f"{uid}:"):
        return f"the agent's home belongs to {owner}, not to the agent (uid {uid})"
    if mode[-2:] != "00" and seen.get("type") == "tmpfs":
        return (f"the home tmpfs has mode {mode.rjust(4, '0')}: runc before 1.1.8 gives a tmpfs the mode of the directory "
                "the image has there (opencontainers/runc#3911); make it 0700 in the image (images/agent does), "
                "or use home: {target: ...} at a path the image does not have")
    if seen.get("type") != "tmpfs":
        return ("another volume than this workspace's home is mounted there: a home volume is never shared; "
                "`sandbox down --purge` starts it afresh")
    return ""


def _userns_hint(seen: dict[str, str], uid: int, workspace: str) -> str:
    return ("the plan was compiled for a rootless or userns-remapped engine, but this container's ids are the host's "
            "(a map line with outside id 0): the engine that ran it is not the one the plan was made for "
            "(DOCKER_HOST changed?); `sandbox explain --engine` says what the engine reports")


# An internal network that is a bridge without a gateway (podman's: a dialect's
# proxy_by_hosts_entry): the sandbox and the proxy reach each other only through it, which a host
# that passes bridged frames through iptables (Docker sets bridge-nf-call-iptables) with Docker's
# FORWARD policy DROP silently cuts (netavark adds no rule for an internal network).
BRIDGE_ONLY_HINT = ("on podman the proxy is reached over its internal network's bridge: if Docker runs on this host "
                    "too, its iptables FORWARD policy DROP (with bridged frames passing iptables) drops that traffic; "
                    "allow traffic within podman's bridges, e.g. `iptables -I DOCKER-USER -m physdev "
                    "--physdev-is-bridged -i podman+ -j ACCEPT` (docs/engines.md#proxy-mode-on-podman)")

# check id -> what the user can do when it fails, from its observed "key=value,..." fields (only
# where expected/observed alone do not say it)
_HINTS = {"ws.access": _ws_access_hint, "home.private": _home_hint, "identity.userns": _userns_hint}


def hint(check_id: str, observed: str, *, uid: int, workspace: str, remapped: bool = False,
         bridge_only_proxy: bool = False) -> str:
    """The hint for a failed check, or "". remapped: the plan is for a rootless or userns-remapped engine;
    bridge_only_proxy: a proxy reached over its internal network's bridge alone (ProxySpec.hosts_entry)."""
    if check_id == "egress.proxy" and bridge_only_proxy and "timed out" in observed:
        return BRIDGE_ONLY_HINT
    make = _HINTS.get(check_id)
    if make is None:
        return ""
    seen = dict(item.partition("=")[::2] for item in observed.split(","))
    if check_id == "ws.access" and remapped and seen.get("owner") == "0":
        return (f"on this rootless engine {workspace} belongs to uid 0 inside: files of the user who runs the engine "
                "are root's in the container, and the agent never runs as root; hand the tree to the subordinate id "
                "that is the agent's uid inside (`podman unshare chown -R 1000:1000 DIR`), or use a rootful engine")
    return make(seen, uid, workspace)
