"""The LaunchPlan as a compose file (format 2.4: Debian's docker-compose 1.29 and `docker compose`
both read it): the same sandbox container, proxy and networks, without the launcher's own checks."""

from __future__ import annotations

from launcher import labels as label
from launcher.plan.plan import LaunchPlan, Mount, MountKind, ProxySpec, proxy_env, unwatched
from launcher.plan.runtimes import GVISOR_SECCOMP, GVISOR_SECCOMP_FILE
from launcher.targets.portable import WSROOT_ENV, Places, network_labels, portable_labels, probe_start, workspace_of

PROBE_VOLUME_KEY = "sandbox-probe"
SECRET_DIR = "/run/sandbox-secrets"


def _text(value: str) -> str:
    return value.replace("$", "$$")    # compose interpolates $VAR; what the plan says is literal


def _mount(mount: Mount, places: Places) -> dict:
    out: dict = {"type": mount.kind.value, "target": mount.target, "read_only": mount.read_only}
    if mount.kind is MountKind.TMPFS:
        if mount.size_bytes:
            out["tmpfs"] = {"size": mount.size_bytes}
    elif mount.kind is MountKind.VOLUME:
        out["source"] = PROBE_VOLUME_KEY
    else:
        out["source"] = places.source(mount.source, _text)
    return out


def _proxy_service(proxy: ProxySpec, workspace: str | None) -> dict:
    env = proxy_env(proxy)   # the configuration and any CA bundles, base64
    volumes = []
    for secret in proxy.secrets:
        if secret.from_env:
            # Interpolated by compose from the caller's environment; the file holds only the name.
            env[secret.var] = "${%s:?secret %s: set %s}" % (secret.from_env, secret.name, secret.from_env)
        else:
            env[secret.var + "_FILE"] = f"{SECRET_DIR}/{secret.name}"
            volumes.append({"type": "bind", "source": _text(secret.from_file), "read_only": True,
                            "target": f"{SECRET_DIR}/{secret.name}"})
    return {
        "image": proxy.image, "container_name": proxy.name, "user": proxy.user, "read_only": True,
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "pids_limit": proxy.pids_limit,
        "mem_limit": proxy.memory_bytes, "memswap_limit": proxy.memory_bytes, "logging": _logging(proxy.log_options),
        "tmpfs": [f"{d}:{proxy.scratch_options}" for d in proxy.scratch_dirs],
        "labels": _labels(proxy.labels, workspace),
        "environment": env, **({"volumes": volumes} if volumes else {}),
        "networks": {"internal": {"aliases": [proxy.alias]}, "egress": {}},
        # The sandbox starts only once Squid accepts connections: its probe checks the proxy first.
        "healthcheck": {"test": ["CMD", "perl", "-MIO::Socket::INET", "-e",
                                 f"IO::Socket::INET->new(q({proxy.alias}:{proxy.port})) or exit 1"],
                        "interval": "1s", "timeout": "2s", "retries": 30},
    }


def _security_opt(option: str, places: Places) -> str:
    """An inline seccomp profile (gVisor's) by its file, as the launcher's files are named."""
    return f"seccomp={places.source(GVISOR_SECCOMP_FILE, _text)}" if option == f"seccomp={GVISOR_SECCOMP}" else option


def _labels(labels: tuple[tuple[str, str], ...], workspace: str | None) -> dict:
    """Labels with the workspace's as compose interpolates it (None: without it)."""
    return {k: (v if k == label.WORKSPACE else _text(v)) for k, v in network_labels(labels, workspace).items()}


def _logging(options: tuple[tuple[str, str], ...]) -> dict:
    return {"driver": "json-file", "options": dict(options)}


def to_compose(plan: LaunchPlan, base: str = ".", files: dict[str, str] | None = None,
               workspace: str | None = "${PWD}") -> dict:
    """A compose document equivalent to what `sandbox run` creates for this plan, naming no host
    path (portable.py): the workspace is `base` (relative to the compose file), the launcher's files
    are `files` (host path -> name), and `workspace` (compose-interpolated, or None: the tool that
    starts it sets $SANDBOX_WSROOT) is the host path the probe and the labels get."""
    c = plan.container
    places = Places(workspace=workspace_of(plan), base=base, files=files or {})
    entrypoint, command = probe_start(plan)
    sandbox = {
        "image": c.image, "container_name": c.name, "hostname": c.hostname, "user": c.user,
        "entrypoint": [_text(a) for a in entrypoint], "command": [_text(a) for a in command],
        "working_dir": c.working_dir,
        "environment": {k: _text(v) for k, v in c.env} | ({WSROOT_ENV: workspace} if workspace else {}),
        "labels": {k: (v if k == label.WORKSPACE else _text(v)) for k, v in portable_labels(plan, workspace).items()},
        "read_only": c.read_only_root,
        "cap_drop": list(c.cap_drop), **({"cap_add": list(c.cap_add)} if c.cap_add else {}),
        **({"runtime": c.runtime} if c.runtime != "runc" else {}),   # compose file format 2.x has runtime
        "security_opt": [_security_opt(o, places) for o in c.security_opt], "pids_limit": c.pids_limit,
        "mem_limit": c.memory_bytes, "memswap_limit": c.memory_bytes, "cpus": c.nano_cpus / 1e9,
        "volumes": [_mount(m, places) for m in c.mounts if not m.owned_tmpfs],
        **({"tmpfs": owned} if (owned := [f"{m.target}:{m.tmpfs_options}" for m in c.mounts if m.owned_tmpfs]) else {}),
        "stdin_open": False, "tty": False,
        "logging": _logging(c.log_options),
    }
    doc: dict = {"version": "2.4", "services": {}, "volumes": {
        PROBE_VOLUME_KEY: {"external": True, "name": next(m.source for m in c.mounts if m.kind is MountKind.VOLUME)}}}
    if plan.proxy is None:
        sandbox["network_mode"] = c.network_mode
    else:
        p = plan.proxy
        sandbox.update(networks=["internal"], dns=list(c.dns), **({"sysctls": dict(c.sysctls)} if c.sysctls else {}),
                       depends_on={"proxy": {"condition": "service_healthy"}})
        doc["services"]["proxy"] = _proxy_service(p, workspace)
        internal = next(n for n in plan.networks if n.name == p.internal_network)
        egress = next((n for n in plan.networks if n.name == p.egress_network), None)
        doc["networks"] = {
            "internal": {"name": internal.name, "internal": True, "driver_opts": dict(internal.options),
                         "labels": _labels(internal.labels, workspace)},
            "egress": ({"name": egress.name, "labels": _labels(egress.labels, workspace)} if egress
                       else {"external": True, "name": p.egress_network}),
        }
    doc["services"]["sandbox"] = sandbox
    return doc


def compose_text(plan: LaunchPlan, files: dict[str, str] | None = None) -> str:
    """The compose file `compile --format compose` prints; `files`: the launcher's files by host path,
    as the file names them (the CLI's: under ${HOME})."""
    import yaml

    plan = unwatched(plan)   # compose starts it: no launcher gives the probe its word

    head = (f"# sandbox: policy {plan.policy_name} (sha256 {plan.policy_digest[:12]}). Equivalent to `sandbox run`,\n"
            "# but nothing compares the created containers with the plan: the probe (the entrypoint) still\n"
            "# refuses to start the agent unless every check passes. The probe volume must exist\n"
            "# (`sandbox images build`). Paths are relative to the project directory, which must be the\n"
            "# workspace: run `docker compose` there (its $PWD is the workspace the probe expects).\n")
    return head + yaml.safe_dump(to_compose(plan, files=files), sort_keys=False, width=1000)
