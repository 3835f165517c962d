"""Other outputs of the same LaunchPlan: a JSON document and the equivalent `docker run` argv."""

from __future__ import annotations

import enum
import shlex
from dataclasses import asdict, is_dataclass

from launcher.plan.plan import LaunchPlan, Mount, MountKind, proxy_env, unwatched
from launcher.plan.runtimes import as_file


def plain(value):
    """A dataclass (enums, tuples) as JSON-ready dicts, lists and scalars."""
    if is_dataclass(value):
        return {k: plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


def plan_to_dict(plan: LaunchPlan) -> dict:
    data = plain(plan)
    data["container"]["env"] = dict(plan.container.env)
    data["container"]["labels"] = dict(plan.container.labels)
    return data


def _csv_field(text: str) -> str:
    # `--mount` values are CSV: quote a field holding a comma, a quote or a line break (inside
    # quotes, Docker's CSV reader keeps a line break as part of the field).
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text


def mount_flag(mount: Mount) -> str:
    fields = [f"type={mount.kind.value}"]
    if mount.kind is not MountKind.TMPFS:
        fields.append(_csv_field(f"src={mount.source}"))
    fields.append(_csv_field(f"dst={mount.target}"))
    if mount.read_only:
        fields.append("readonly")
    if mount.kind is MountKind.TMPFS and mount.size_bytes:
        fields.append(f"tmpfs-size={mount.size_bytes}")
    if mount.no_copy:
        fields.append("volume-nocopy")
    return ",".join(fields)


def tmpfs_flag(mount: Mount) -> str:
    """`--tmpfs` value of an owned tmpfs (the Mount API, hence `--mount`, cannot set its owner)."""
    return f"{mount.target}:{mount.tmpfs_options}"


def log_flags(options: tuple[tuple[str, str], ...]) -> list[str]:
    return ["--log-driver=json-file", *[f"--log-opt={k}={v}" for k, v in options]]


def to_argv(plan: LaunchPlan) -> list[str]:
    """The `docker run` command that creates the same container (without the launcher's checks)."""
    c = unwatched(plan).container   # docker starts it: no launcher gives the probe its word
    argv = ["docker", "run", "--rm", "--name", c.name, "--hostname", c.hostname, "--user", c.user,
            "--network", c.network_mode, "--workdir", c.working_dir]
    if c.runtime != "runc":   # runc is every engine's default; another runtime must be named
        argv.append(f"--runtime={c.runtime}")
    if c.read_only_root:
        argv.append("--read-only")
    argv += [f"--cap-drop={cap}" for cap in c.cap_drop] + [f"--cap-add={cap}" for cap in c.cap_add]
    argv += [f"--security-opt={as_file(opt)}" for opt in c.security_opt]
    if c.pids_limit:
        argv += ["--pids-limit", str(c.pids_limit)]
    if c.memory_bytes:
        argv += ["--memory", str(c.memory_bytes), "--memory-swap", str(c.memory_bytes)]
    if c.nano_cpus:
        argv += ["--cpus", f"{c.nano_cpus / 1e9:g}"]
    argv += [f"--sysctl={k}={v}" for k, v in c.sysctls]
    for server in c.dns:
        argv += ["--dns", server]
    argv += log_flags(c.log_options)
    for mount in c.mounts:
        argv += ["--tmpfs", tmpfs_flag(mount)] if mount.owned_tmpfs else ["--mount", mount_flag(mount)]
    for name, value in c.env:
        argv += ["--env", f"{name}={value}"]
    for key, value in c.labels:
        argv += ["--label", f"{key}={value}"]
    argv += ["--entrypoint", c.entrypoint[0], c.image, *c.entrypoint[1:], *c.command]
    return argv


def proxy_argvs(plan: LaunchPlan) -> list[list[str]]:
    """Proxy mode: the networks and the proxy, created before the sandbox."""
    out = []
    for net in plan.networks:
        argv = ["docker", "network", "create", *(["--internal"] if net.internal else [])]
        argv += [f"--opt={k}={v}" for k, v in net.options] + [f"--label={k}={v}" for k, v in net.labels]
        out.append(argv + [net.name])
    p = plan.proxy
    out.append(["docker", "create", "--name", p.name, "--user", p.user, "--read-only", "--cap-drop=ALL",
                "--security-opt=no-new-privileges", "--pids-limit", str(p.pids_limit), "--memory", str(p.memory_bytes),
                "--memory-swap", str(p.memory_bytes), "--network", p.internal_network, "--network-alias", p.alias,
                *log_flags(p.log_options),
                *[f"--tmpfs={d}:{p.scratch_options}" for d in p.scratch_dirs],
                *[f"--label={k}={v}" for k, v in p.labels], *[a for k, v in proxy_env(p).items() for a in ("--env", f"{k}={v}")],
                # name only: docker takes the value from the caller's environment (export it first)
                *[a for s in p.secrets for a in ("--env", s.var)], p.image])
    out.append(["docker", "network", "connect", p.egress_network, p.name])
    out.append(["docker", "start", p.name])
    return out


def argv_text(plan: LaunchPlan) -> str:
    """The `docker` commands, one per line (the probe's result is not checked by plain docker)."""
    lines = proxy_argvs(plan) if plan.proxy else []
    notes = [f"# export {s.var} with the value of {'$' + s.from_env if s.from_env else s.from_file} (secret {s.name}) "
             "first: the proxy reads it from its environment" for s in (plan.proxy.secrets if plan.proxy else ())]
    return "\n".join(notes + [shlex.join(argv) for argv in lines + [to_argv(plan)]])
