"""The agent Pod: the plan's container under the restricted Pod Security profile, its mounts as
volumes (the workspace a PersistentVolumeClaim), and the probe, copied by an init container from
the probe image into a volume the agent container mounts read-only, as its entrypoint."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import replace

from launcher.errors import PolicyError, Problem
from launcher.plan import checks
from launcher.plan.plan import PROBE_DIR, LaunchPlan, Mount, MountKind

# The kubelet mounts a file for the termination message in every container. At its default,
# /dev/termination-log, it is a regular file in /dev (the probe's dev.nodes refuses any); here it
# sits next to the probe and is declared to the probe as a writable mount.
TERMINATION_LOG = "/.sandbox/termination-log"
# What each node agent mounts on its own, beside the engine's usual /etc/hosts, hostname and
# resolv.conf, which the probe knows already.
NODE_MOUNTS = {"kubelet": (TERMINATION_LOG,), "podman": ("/etc/passwd", "/etc/group", "/run/.containerenv")}
NODE_WRITABLE = {"kubelet": (TERMINATION_LOG,), "podman": ()}
PODMAN_VOLUMES = "/var/lib/containers/storage/volumes"   # podman's graph root: emptyDir and PVCs become named volumes
HOME_DIR = "home"        # the directory in the home volume the init container makes for the agent (mode 0700)
FILES_MAP = "files"      # the ConfigMap volume of small read-only files (the `{}` of a missing config file)
EMPTY_CONFIG = "empty-config.json"
FILE_PROBLEM_FILE = "policy"
# The node's address, from the Downward API: the probe's pod.reach tries the kubelet's ports on it.
NODE_IP_ENV = "SANDBOX_NODE_IP"
# The ports pod.reach tries on the node and on the default gateway (often the node itself): ssh,
# DNS (NodeLocal DNSCache, a node resolver), web, the kubelet. NetworkPolicy never covers the node.
NODE_PORTS = (22, 53, 80, 443, 10250)


def runtime_class_name(plan: LaunchPlan) -> str | None:
    """The Pod's runtimeClassName for the plan's runtime: none for runc (the node's default),
    "gvisor" (the RuntimeClass name gVisor's docs use) for `runtime: gvisor`."""
    return "gvisor" if plan.probe.kernel == "gvisor" else None


def restricted_context(uid: int, gid: int, add: tuple[str, ...] = ()) -> dict:
    """A container securityContext that meets the restricted profile (adds beyond NET_BIND_SERVICE
    do not; the loss report says so)."""
    caps: dict = {"drop": ["ALL"]}
    if add:
        caps["add"] = list(add)
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "privileged": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": caps,
            "seccompProfile": {"type": "RuntimeDefault"}, "procMount": "Default"}


def literal(text: str, node: str) -> str:
    """The kubelet expands $(NAME) in a container's command, args and env values and reads $$ as $:
    every $ doubled keeps the plan's text as it is. podman kube play expands nothing."""
    return text.replace("$", "$$") if node == "kubelet" else text


def _suffix(plan: LaunchPlan) -> str:
    # podman turns every emptyDir into a named volume of the same name, shared by all pods: the
    # sandbox's own suffix keeps two sandboxes apart (the kubelet does not need it, nor mind it).
    return hashlib.sha256(plan.container.name.encode()).hexdigest()[:8]


def _problem(path: str, found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file=FILE_PROBLEM_FILE, path=path, expected="what a Pod under the restricted profile "
                                "can hold", found=found, hint=hint)])


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Volumes:
    """The plan's mounts as Pod volumes and the agent container's volumeMounts."""

    def __init__(self, plan: LaunchPlan, claim: str):
        self.plan, self.suffix = plan, _suffix(plan)
        self.volumes: list[dict] = []
        self.mounts: list[dict] = []
        self.home_volume = ""
        self.probe_volume = ""
        self.files = False
        c = plan.container
        ws = c.mounts[0]
        self.ws_target, self.ws_source = ws.target, ws.source
        self._add("workspace", {"persistentVolumeClaim": {"claimName": claim, "readOnly": ws.read_only}})
        self.mounts.append({"name": "workspace", "mountPath": ws.target, "readOnly": ws.read_only})
        for index, mount in enumerate(c.mounts[1:], 1):
            self._one(index, mount)
        if self.files:
            self._add(FILES_MAP, {"configMap": {"name": f"{plan.container.name}-files", "defaultMode": 0o444}})

    def _add(self, name: str, source: dict) -> str:
        self.volumes.append({"name": name, **source})
        return name

    def _name(self, role: str) -> str:
        return f"{role}-{self.suffix}"

    def _memory(self, role: str, size: int | None) -> str:
        return self._add(self._name(role), {"emptyDir": {"medium": "Memory", **({"sizeLimit": str(size)} if size else {})}})

    def _one(self, index: int, m: Mount) -> None:
        if m.target == PROBE_DIR:
            self.probe_volume = self._add(self._name("probe"), {"emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}})
            self.mounts.append({"name": self.probe_volume, "mountPath": m.target, "readOnly": True})
        elif m.kind is MountKind.BIND and _under(m.source, self.ws_source) and self.plan.copy is None:
            sub = posixpath.relpath(m.source, self.ws_source)
            self.mounts.append({"name": "workspace", "mountPath": m.target, "subPath": sub, "readOnly": m.read_only})
        elif m.kind is MountKind.BIND and m.read_only and _under(m.target, self.ws_target) \
                and posixpath.basename(m.source) == EMPTY_CONFIG:
            self.files = True
            self.mounts.append({"name": FILES_MAP, "mountPath": m.target, "subPath": EMPTY_CONFIG, "readOnly": True})
        elif m.kind is MountKind.BIND and m.target.startswith("/etc/sandbox-ca/"):
            raise _problem("ca_certificates", "host CA files", "a Pod cannot read host files; build the CAs into "
                           "the agent image, or drop ca_certificates for this target")
        elif m.kind is MountKind.BIND:
            raise _problem("mounts", f"a host path ({m.target})", "hostPath volumes are refused by the restricted "
                           "profile; put the data in the workspace claim, or drop mounts for this target")
        elif m.kind is MountKind.TMPFS and not m.owned_tmpfs:
            # An empty read-only memory volume takes the name of a missing protected path.
            self.mounts.append({"name": self._memory(f"protect-{index}", m.size_bytes), "mountPath": m.target,
                                "readOnly": True})
        elif m.kind is MountKind.TMPFS and self.plan.probe.home == m.target:
            # Not a memory volume: the probe proves the home by its node path, which a tmpfs root
            # does not have (docs/targets.md, "Kubernetes").
            self.home_volume = self._add(self._name("home"), {"emptyDir": {"sizeLimit": str(m.size_bytes)}}
                                         if m.size_bytes else {"emptyDir": {}})
            self.mounts.append({"name": self.home_volume, "mountPath": m.target, "subPath": HOME_DIR})
        elif m.kind is MountKind.TMPFS:
            self.mounts.append({"name": self._memory(f"tmp-{index}", m.size_bytes), "mountPath": m.target})
        else:
            raise _problem("home.mode", "volume", "use home: {mode: tmpfs}: the home is an emptyDir of the Pod")


def expectations(plan: LaunchPlan, *, node: str, workspace_root: str, claim: str, proxy_address: str,
                 home_volume: str, forbidden: tuple[str, ...]) -> tuple[str, ...]:
    """The probe's arguments for this Pod on `node`: the plan's, where a Pod differs from Docker
    (mounts the node agent makes, the workspace and home sources, the proxy's address, pids, and
    the Pod mode of the network checks with the addresses it must not reach)."""
    p = plan.probe
    net = checks.POD_MODES[p.net]
    if node == "podman":
        wsroot = workspace_root or f"{PODMAN_VOLUMES}/{claim}/_data"
        homesrc = f"/{home_volume}/_data"      # podman mounts the volume itself and ignores subPath
    else:
        wsroot = workspace_root or "/"
        homesrc = f"/volumes/kubernetes.io~empty-dir/{home_volume}/{HOME_DIR}"
    return replace(
        p, mounts=p.mounts + NODE_MOUNTS[node], writable=p.writable + NODE_WRITABLE[node],
        wsroot=wsroot, wsupper="-", homesrc=homesrc,
        pids="max",       # no per-Pod pids limit in the Pod API: the node's podPidsLimit (loss report)
        # n/a, with checks.NOT_APPLICABLE["pod"]'s reasons: the pids limit, and the workspace's
        # source where the claim's node path is unknown
        na=tuple(c for c in checks.ALL if c in p.na or c == "limits.pids" or (c == "mounts.workspace" and wsroot == "/")),
        net=net, checks=checks.for_mode(net, userns=p.userns == "remapped"),
        resolver="-",     # egress.dns is Docker's: pod.dns asks every nameserver instead
        gate="-",         # no launcher watches a Pod: the probe's own verdict starts the agent
        forbidden=forbidden + tuple(f"{host}:{port}" for host in ("gateway", "node") for port in NODE_PORTS),
        **({"proxy": proxy_address} if p.proxy != "-" else {}),
    ).to_args()


def init_script(node: str, proxy_address: str) -> str:
    """The init container's shell (the probe image's busybox): the probe's two files into the
    probe volume, the agent's own home directory (mode 0700), and in proxy mode a wait (at most a
    minute) until the proxy accepts connections, as compose's healthcheck does."""
    bb = "/probe/busybox"
    home = f"{bb} chmod 0700 /into/home" if node == "podman" else f"{bb} mkdir -m 0700 /into/home/{HOME_DIR}"
    wait = ""
    if proxy_address != "-":
        host, port = proxy_address.rsplit(":", 1)
        wait = (f"; n=0; until {bb} nc -w 1 {host} {port} </dev/null >/dev/null 2>&1; do n=$((n + 1)); "
                f"[ $n -lt 60 ] || {{ echo 'sandbox: the proxy at {proxy_address} does not answer' >&2; exit 1; }}; "
                f"{bb} sleep 1; done")
    return (f"set -e; {bb} cp /probe/busybox /probe/probe.sh /into/probe/; {bb} chmod 0555 /into/probe/busybox; "
            f"{bb} chmod 0444 /into/probe/probe.sh; {home}{wait}")


def agent_pod(plan: LaunchPlan, *, claim: str, node: str, workspace_root: str, proxy_address: str,
              probe_image: str, env: dict[str, str], labels: dict, annotations: dict,
              forbidden: tuple[str, ...]) -> tuple[dict, bool]:
    """The agent Pod, and whether it needs the small-files ConfigMap."""
    c = plan.container
    uid, gid = plan.probe.uid, plan.probe.gid
    vols = _Volumes(plan, claim)
    args = expectations(plan, node=node, workspace_root=workspace_root, claim=claim, proxy_address=proxy_address,
                        home_volume=vols.home_volume, forbidden=forbidden) + ("--",) + tuple(plan.agent_command)
    limits = {"memory": str(c.memory_bytes), **({"cpu": f"{c.nano_cpus // 1_000_000}m"} if c.nano_cpus else {})}
    agent = {
        "name": "agent", "image": c.image, "command": list(c.entrypoint), "args": [literal(a, node) for a in args],
        "workingDir": c.working_dir,
        "env": [{"name": k, "value": literal(v, node)} for k, v in env.items()]
        + [{"name": NODE_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
        "securityContext": restricted_context(uid, gid, c.cap_add),
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": vols.mounts, "terminationMessagePath": TERMINATION_LOG,
        "stdin": False, "tty": False, "imagePullPolicy": "IfNotPresent",
    }
    init = {
        "name": "probe-files", "image": probe_image, "command": ["/probe/busybox", "sh", "-c",
                                                                 literal(init_script(node, proxy_address), node)],
        "securityContext": restricted_context(uid, gid),
        "resources": {"limits": {"memory": "32Mi", "cpu": "100m"}, "requests": {"memory": "32Mi", "cpu": "100m"}},
        "volumeMounts": [{"name": vols.probe_volume, "mountPath": "/into/probe"},
                         {"name": vols.home_volume, "mountPath": "/into/home"}],
        "imagePullPolicy": "IfNotPresent",
    }
    spec = {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
        "hostNetwork": False, "hostPID": False, "hostIPC": False, "shareProcessNamespace": False,
        "hostname": c.hostname, "activeDeadlineSeconds": plan.timeout_seconds, "terminationGracePeriodSeconds": 10,
        # No resolver at all: loopback, where nothing listens (the proxy is given by address).
        "dnsPolicy": "None", "dnsConfig": {"nameservers": ["127.0.0.11"], "searches": [], "options": []},
        "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [init], "containers": [agent], "volumes": vols.volumes,
    }
    runtime = runtime_class_name(plan)
    if runtime:
        spec["runtimeClassName"] = runtime
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": c.name, "labels": labels, "annotations": annotations}, "spec": spec}
    return pod, vols.files
