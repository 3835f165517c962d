"""A fake Engine for unit tests of the launch stage (the one seam where Docker may be faked)."""

from __future__ import annotations

from launcher.plan import ContainerSpec, MountKind


def inspect_of(spec: ContainerSpec, image_env=("PATH=/usr/bin",)) -> dict:
    """What `docker inspect` reports for a container created faithfully from `spec`."""
    return {
        "State": {"Running": False},
        "HostConfig": {
            "Privileged": False, "Runtime": spec.runtime, "CapDrop": list(spec.cap_drop), "CapAdd": list(spec.cap_add) or None,
            "ReadonlyRootfs": spec.read_only_root, "SecurityOpt": list(spec.security_opt),
            "NetworkMode": spec.network_mode, "PidMode": spec.pid_mode, "IpcMode": "private", "UTSMode": "",
            "UsernsMode": "", "Devices": None, "GroupAdd": list(spec.group_add) or None, "Dns": list(spec.dns) or None, "PortBindings": None, "Binds": None,
            "PidsLimit": spec.pids_limit, "Memory": spec.memory_bytes, "NanoCpus": spec.nano_cpus,
            "LogConfig": {"Type": "json-file", "Config": dict(spec.log_options)},
            "Tmpfs": {m.target: m.tmpfs_options for m in spec.mounts if m.owned_tmpfs} or None,
        },
        "Config": {"User": spec.user, "Image": spec.image, "Entrypoint": list(spec.entrypoint),
                   "Cmd": list(spec.command), "Env": [f"{k}={v}" for k, v in spec.env] + list(image_env)},
        "Mounts": [{"Type": m.kind.value, "Destination": m.target, "RW": not m.read_only,
                    "Source": "" if m.kind is MountKind.TMPFS else m.source,
                    **({"Name": m.source} if m.kind is MountKind.VOLUME else {})}
                   for m in spec.mounts if not m.owned_tmpfs],   # those are HostConfig.Tmpfs
    }


class FakeEngine:
    """Records calls; plays back the probe output and exit code it is given."""

    def __init__(self, output=(), exit_code=0, tamper=None):
        self.output_chunks = list(output)
        self.exit_code = exit_code
        self.tamper = tamper or (lambda attrs: None)
        self.calls: list[str] = []
        self.spec = None

    def create(self, spec):
        self.calls.append("create")
        self.spec = spec
        return "cid"

    def inspect(self, ref):
        attrs = inspect_of(self.spec)
        self.tamper(attrs)
        return attrs

    def image_env(self, ref):
        return ["PATH=/usr/bin"]

    def start(self, ref):
        self.calls.append("start")

    def output(self, ref):
        return iter(self.output_chunks)

    def wait(self, ref):
        return self.exit_code

    def stop(self, ref, grace):
        self.calls.append("stop")

    def remove(self, ref):
        self.calls.append("remove")
        self.spec = None

    def list(self, *filters):
        if self.spec is None:
            return []
        return [{"Id": "cid", "Names": [f"/{self.spec.name}"], "State": "exited", "Labels": dict(self.spec.labels)}]

    def list_networks(self, *filters):
        return []


class Recorder:
    """A launch Listener that keeps the agent's output and ignores status lines."""

    def __init__(self):
        self.out = b""

    def status(self, message):
        pass

    def output(self, stream, data):
        self.out += data
