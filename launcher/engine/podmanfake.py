"""podman 4.3's side of enginefake: what its compat inspect (and its libpod inspect) report for a
container made by its libpod create from a specgen body, as podman 4.3.1 answered here."""

from __future__ import annotations

import hashlib

# The capabilities podman reports as dropped for a cap_drop of ALL (its default_capabilities).
from launcher.plan.dialects.podman import RLIMITS as PODMAN_RLIMITS
from launcher.plan.dialects.podman import DEFAULT_CAPS as PODMAN_DEFAULT_CAPS, local_name as podman_local_name


def compat_inspect_of(spec: dict, ref: str, image: dict) -> dict:
    """Compat inspect: every tmpfs in HostConfig.Tmpfs (notmpcopyup left out, its rprivate,nosuid,nodev
    added), every bind and volume in Binds and Mounts, Runtime "oci", the dropped defaults, "private"
    for the default namespaces, HOSTNAME, TERM and container=podman in the environment, NetworkMode
    `bridge` for any bridge network (the network by name in NetworkSettings), no Sysctls."""
    mounts = spec.get("mounts") or []
    tmpfs = {m["destination"]: ",".join(o for o in m["options"] if o != "notmpcopyup") + ",rprivate,nosuid,nodev"
             for m in mounts if m["type"] == "tmpfs"}
    binds = [f"{m['source']}:{m['destination']}:{','.join(m['options'])}" for m in mounts if m["type"] == "bind"]
    binds += [f"{v['Name']}:{v['Dest']}:{','.join(v['Options'])},rprivate,nosuid,nodev,rbind" for v in spec.get("volumes") or []]
    seen = [{"Type": "bind", "Destination": m["destination"], "RW": "rw" in m["options"], "Source": m["source"]}
            for m in mounts if m["type"] == "bind"]
    seen += [{"Type": "volume", "Destination": v["Destination" if "Destination" in v else "Dest"], "Name": v["Name"],
              "RW": "rw" in v["Options"], "Source": v["Name"]} for v in spec.get("volumes") or []]
    limits = spec.get("resource_limits") or {}
    network = (spec.get("netns") or {}).get("nsmode", "bridge")
    host = {
        "Privileged": False, "IpcMode": "private", "Runtime": "oci", "PidMode": (spec.get("pidns") or {}).get("nsmode", "private"),
        # an added default capability is one not dropped, and CapAdd stays empty (4.3.1, recorded)
        "UTSMode": "private", "CapDrop": [c for c in PODMAN_DEFAULT_CAPS if c not in (spec.get("cap_add") or [])]
        if "ALL" in spec.get("cap_drop", []) else spec.get("cap_drop"),
        "CapAdd": [], "ReadonlyRootfs": spec.get("read_only_filesystem", False),
        "SecurityOpt": ["no-new-privileges"] * bool(spec.get("no_new_privileges")),   # never its seccomp
        "NetworkMode": network, "Tmpfs": tmpfs, "Binds": binds,   # "bridge" for any bridge network
        "PidsLimit": (limits.get("pids") or {}).get("limit", 0), "Memory": (limits.get("memory") or {}).get("limit", 0),
        "NanoCpus": (limits.get("cpu") or {}).get("quota", 0) * 10_000, "Dns": spec.get("dns_server") or [],
        "Sysctls": None, "ExtraHosts": spec.get("hostadd") or [],   # its inspects report no sysctl
        "GroupAdd": spec.get("groups") or [],
        "Devices": [d["path"] for d in spec.get("devices") or []], "LogConfig": {"Type": "json-file", "Config": {}},
        # named as its OCI spec names them; its rootful defaults for the ones the body does not set
        "Ulimits": [{"Name": f"RLIMIT_{name.upper()}", "Soft": soft, "Hard": hard} for name, (soft, hard) in
                    {**{n: (v, v) for n, v in PODMAN_RLIMITS},
                     **{r["type"]: (r["soft"], r["hard"]) for r in spec.get("r_limits") or []}}.items()],
    }
    env = [f"{k}={v}" for k, v in (spec.get("env") or {}).items()] + ["HOSTNAME=x", "container=podman"]
    if "TERM" not in (spec.get("env") or {}):   # containers.conf's default env, where the plan has none
        env.append("TERM=xterm")
    if not any(e.startswith("PATH=") for e in image["Config"]["Env"]):   # its default, where the image has none
        env.append("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return {
        "Id": ref, "Name": spec["name"], "Image": image["Id"], "LogPath": f"/fake/{ref}-json.log",
        "State": {"Running": False, "Status": "created", "ExitCode": 0}, "HostConfig": host,
        "Config": {"User": spec.get("user", ""), "Image": podman_local_name(spec["image"]), "Entrypoint": spec.get("entrypoint"),
                   "Cmd": spec.get("command"), "Env": env + list(image["Config"]["Env"]),
                   "Labels": {**image["Config"]["Labels"], **(spec.get("labels") or {})}},
        "Mounts": seen, "NetworkSettings": {"Networks": {n: {"IPAddress": ""} for n in spec.get("networks") or {network: {}}}},
    }


def network_of(body: dict) -> tuple[dict, dict]:
    """A libpod network create's network (as the compat list shows it) and answer: the subnet asked
    or one of its own, a gateway only for a network that is not internal."""
    subnet = (body.get("subnets") or [{}])[0].get("subnet") or "10.89.0.0/24"
    made = {"subnet": subnet, **({} if body.get("internal") else {"gateway": subnet.rsplit(".", 1)[0] + ".1"})}
    network = {"Name": body["name"], "Id": hashlib.sha256(body["name"].encode()).hexdigest(),
               "Labels": dict(body.get("labels") or {}), "Internal": bool(body.get("internal")),
               "IPAM": {"Config": [{"Subnet": subnet}]}, "Containers": []}
    return network, {"name": body["name"], "subnets": [made], "internal": bool(body.get("internal")),
                     "dns_enabled": bool(body.get("dns_enabled"))}


def libpod_inspect_of(spec: dict) -> dict:
    """libpod inspect: the OCI runtime and the log size (decimal units, as podman prints them)."""
    size = (spec.get("log_configuration") or {}).get("size")
    drop, add = spec.get("cap_drop") or [], spec.get("cap_add") or []
    # as recorded: the sets the process gets, null for none; a non-root user's effective set holds only the adds
    bounding = sorted({f"CAP_{c}" for c in (add if "ALL" in drop else set(PODMAN_DEFAULT_CAPS) - set(drop) | set(add))})
    return {"OCIRuntime": spec.get("oci_runtime"), "BoundingCaps": bounding or None,
            "EffectiveCaps": sorted(f"CAP_{c}" for c in add) or None,
            "HostConfig": {"LogConfig": {"Size": f"{size // 10**6}MB" if size else "0B"}}}
