"""A podman "node" for the Kubernetes tests: `podman kube play` runs a compiled agent Pod on this
machine. The node's own settings live here, never in the manifests: rlimits within the host's
(this host lacks CAP_SYS_RESOURCE, and podman's defaults exceed its limits), and as the node's
RuntimeDefault seccomp profile podman's own with the namespace rules Docker's and containerd's
default has (podman's allows unshare and clone of new namespaces to everyone). podman 4.3's kube
play reads no seccompProfile field, only the older per-Pod annotation, so that annotation names
this profile in podman's copy of the Pod."""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import yaml

from launcher.plan.seccompfiles import docker_semantics as runtime_default_profile   # the launcher's own, for podman

CONMON_NPROC = 32768
PROFILE = "runtime-default.json"
SECCOMP_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
# podman 4.3 has no status.hostIP for the Downward API: the node's copy says the address itself
# (an address of the closed test network, tests/podman_closed.py; unreachable elsewhere).
NODE_IP = "10.89.78.254"
KIND = "dev.sandbox.kind"


class Node:
    def __init__(self, podman: str, root: Path, *, link_local_ipv6: bool = False, network_backend: str = ""):
        self.podman = podman
        root.mkdir(parents=True, exist_ok=True)
        self.profiles = root
        seccomp = root / PROFILE
        seccomp.write_text(json.dumps(runtime_default_profile(
            json.loads(Path("/usr/share/containers/seccomp.json").read_text()))))
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        # conmon, which starts runc, ran with a process limit of 32768 here (podman sets it): a
        # container asking for more is refused with "error setting rlimit type 6".
        nproc = tuple(min(v, CONMON_NPROC) if v != resource.RLIM_INFINITY else CONMON_NPROC
                      for v in resource.getrlimit(resource.RLIMIT_NPROC))
        conf = root / "containers.conf"
        conf.write_text("[containers]\n"
                        f'default_ulimits = ["nofile={nofile[0]}:{nofile[1]}", "nproc={nproc[0]}:{nproc[1]}"]\n'
                        f'seccomp_profile = "{seccomp}"\n'
                        # Docker turns IPv6 off in a container unless asked; podman leaves the kernel's
                        # link-local address on eth0, which the probe's net.routes refuses in Docker's
                        # modes (rightly) and accepts in the Pod modes (link_local_ipv6: left on).
                        + ('' if link_local_ipv6 else 'default_sysctls = ["net.ipv6.conf.all.disable_ipv6=1"]\n')
                        # "cni": the networks are CNI's bridge plugin's, as on a kubelet node (podman
                        # picks netavark when both are installed)
                        + (f'[network]\nnetwork_backend = "{network_backend}"\n' if network_backend else ''))
        self.env = {"CONTAINERS_CONF": str(conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

    def run(self, *args: str, check: bool = True, timeout: int = 120, **kw) -> subprocess.CompletedProcess:
        result = subprocess.run([self.podman, *args], env=self.env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and result.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def load(self, image: str) -> None:
        """Docker's image into podman's store, unless podman has that image id already."""
        wanted = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], capture_output=True,
                                text=True, check=True).stdout.strip().removeprefix("sha256:")
        have = self.run("image", "inspect", "--format", "{{.Id}}", f"localhost/{image}", check=False).stdout.strip()
        if have != wanted:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            self.run("load", "-q", stdin=save.stdout, timeout=300)
            assert save.wait() == 0

    def _copy(self, obj: dict, node_seccomp: bool, node_env: dict[str, str]) -> dict:
        """podman's copy of an object; the agent container is told what the kubelet tells every
        container (node_env: its address, the API server's Service)."""
        obj = json.loads(json.dumps(obj))
        if obj["kind"] == "Pod":
            for container in obj["spec"]["containers"] if obj["metadata"]["labels"].get(KIND) == "kubernetes" else ():
                env = [e for e in container.get("env", []) if e["name"] not in node_env
                       and "fieldRef" not in e.get("valueFrom", {})]
                container["env"] = env + [{"name": k, "value": v} for k, v in node_env.items()]
            # podman 4.3 refuses annotation values longer than 63 characters (Kubernetes allows
            # 256 KiB in all): the metadata-only annotations stay out of podman's copy.
            obj["metadata"].pop("annotations", None)
            if node_seccomp:
                obj["metadata"]["annotations"] = {SECCOMP_ANNOTATION: f"localhost/{PROFILE}"}
        return obj

    def play(self, objects: list[dict], workdir: Path, *, node_seccomp: bool = True, network: str = "none",
             proxy_ip: str = "", agent_ip: str = "", node_env: dict[str, str] | None = None,
             agent_also: str = "") -> tuple[int, str]:
        """Run the agent Pod of `objects` to its end, after their proxy Pod (at proxy_ip on
        `network`) when there is one; returns the agent container's exit code and output.
        podman runs Pods and reads ConfigMaps; it has no Services and ignores NetworkPolicy, so
        those stay out (`network` is what isolates here: none, or an internal network). All that
        was made goes again, volumes too. node_seccomp False: podman's own built-in default
        seccomp profile instead of the containerd-like one. agent_also: a second network the agent
        Pod joins too (a second interface)."""
        node_env = {"SANDBOX_NODE_IP": NODE_IP} if node_env is None else node_env
        objects = [self._copy(o, node_seccomp, node_env) for o in objects if o["kind"] in ("Pod", "ConfigMap")]
        maps = [o for o in objects if o["kind"] == "ConfigMap"]
        pods = {o["metadata"]["labels"]["dev.sandbox.kind"]: o for o in objects if o["kind"] == "Pod"}
        agent_pod = pods.pop("kubernetes")
        files = []
        for role, pod in [*pods.items(), ("agent", agent_pod)]:
            path = workdir / f"{role}.yaml"
            path.write_text(yaml.safe_dump_all(maps + [pod], sort_keys=False))
            address = proxy_ip if role == "proxy" else agent_ip if role == "agent" else ""
            nets = ["--network", f"{network}:ip={address}" if address else network]
            if role == "agent" and agent_also:
                nets += ["--network", agent_also]
            files.append((path, pod, nets))
        agent = f"{agent_pod['metadata']['name']}-agent"
        try:
            for path, _, extra in files:
                self.run("kube", "play", *extra, "--seccomp-profile-root", str(self.profiles),
                         str(path))
            code = int(self.run("wait", agent, timeout=300).stdout.strip())
            return code, self.run("logs", agent).stdout
        finally:
            for path, pod, _ in reversed(files):
                self.run("kube", "down", str(path), check=False)
                self.run("volume", "rm", "-f", *map(_podman_volume, pod["spec"]["volumes"]), check=False)

    def network(self, name: str, subnet: str):
        """An internal podman network (no gateway, no default route): the Pods' only way out is
        the proxy Pod on it."""
        return _Network(self, name, subnet)


def _podman_volume(volume: dict) -> str:
    """The named volume podman makes for a Pod volume: the claim's, the ConfigMap's, or its own name."""
    return volume.get("persistentVolumeClaim", {}).get("claimName") or volume.get("configMap", {}).get("name") \
        or volume["name"]


class _Network:
    def __init__(self, node: Node, name: str, subnet: str):
        self.node, self.name, self.subnet = node, name, subnet

    def __enter__(self) -> str:
        self.node.run("network", "create", "--internal", "--subnet", self.subnet, self.name)
        # Between the Pods on this bridge only. A host where dockerd set the FORWARD policy to DROP
        # (it does when it turns IP forwarding on itself) with bridged traffic passing iptables
        # (bridge-nf-call-iptables=1) drops it, and the agent's probe finds no proxy: seen on one
        # CI machine of two. The rule goes with the network.
        bridge = self.node.run("network", "inspect", self.name, "--format", "{{.NetworkInterface}}").stdout.strip()
        self.rule = ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]
        subprocess.run(["iptables", "-I", *self.rule], check=True, capture_output=True)
        return self.name

    def __exit__(self, *exc) -> None:
        subprocess.run(["iptables", "-D", *self.rule], check=False, capture_output=True)
        self.node.run("network", "rm", "-f", self.name, check=False)
