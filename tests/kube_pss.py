"""The Pod Security Standards' Baseline and Restricted controls, field by field, as the Kubernetes
documentation's page "Pod Security Standards" lists them (restricted includes baseline). A Pod
passes when pod_violations() returns nothing."""

from __future__ import annotations

BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_CAPS = {"NET_BIND_SERVICE"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                      "secret"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}
APPARMOR_OK = {"RuntimeDefault", "Localhost"}


def _containers(spec: dict):
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, c in enumerate(spec.get(kind) or []):
            yield f"spec.{kind}[{index}]", c


def pod_violations(pod: dict) -> list[str]:
    """Every Baseline and Restricted control the Pod breaks, as 'field: found'."""
    spec, meta = pod["spec"], pod.get("metadata", {})
    psc = spec.get("securityContext") or {}
    out: list[str] = []

    def bad(field: str, found) -> None:
        out.append(f"{field}: {found!r}")

    # Baseline: HostProcess
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad("spec.securityContext.windowsOptions.hostProcess", True)
    # Baseline: host namespaces
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            bad(f"spec.{field}", spec[field])
    # Baseline: hostPath volumes; Restricted: volume types
    for index, volume in enumerate(spec.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            bad(f"spec.volumes[{index}].hostPath", volume["hostPath"])
        if not kinds <= RESTRICTED_VOLUMES or len(kinds) != 1:
            bad(f"spec.volumes[{index}]", sorted(kinds))
    # Baseline: AppArmor (annotations and fields), SELinux, sysctls, seccomp not Unconfined
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            bad(f"metadata.annotations[{key}]", value)
    for index, sysctl in enumerate(psc.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            bad(f"spec.securityContext.sysctls[{index}].name", sysctl.get("name"))
    contexts = [("spec.securityContext", psc)] + [(f"{w}.securityContext", c.get("securityContext") or {})
                                                    for w, c in _containers(spec)]
    for where, sc in contexts:
        if "appArmorProfile" in sc and sc["appArmorProfile"].get("type") not in APPARMOR_OK:
            bad(f"{where}.appArmorProfile.type", sc["appArmorProfile"].get("type"))
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            bad(f"{where}.seLinuxOptions.type", se["type"])
        for field in ("user", "role"):
            if se.get(field):
                bad(f"{where}.seLinuxOptions.{field}", se[field])
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            bad(f"{where}.seccompProfile.type", "Unconfined")
        if "runAsUser" in sc and sc["runAsUser"] == 0:       # Restricted: running as non-root user
            bad(f"{where}.runAsUser", 0)
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad(f"{where}.windowsOptions.hostProcess", True)
    pod_nonroot = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in SECCOMP_OK
    for where, c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):                                     # Baseline: privileged
            bad(f"{where}.securityContext.privileged", True)
        for pi, port in enumerate(c.get("ports") or []):            # Baseline: host ports
            if port.get("hostPort"):
                bad(f"{where}.ports[{pi}].hostPort", port["hostPort"])
        if sc.get("procMount", "Default") != "Default":              # Baseline: /proc mount type
            bad(f"{where}.securityContext.procMount", sc["procMount"])
        caps = sc.get("capabilities") or {}
        added = set(caps.get("add") or [])
        if not added <= BASELINE_CAPS:                               # Baseline: capabilities
            bad(f"{where}.securityContext.capabilities.add", sorted(added - BASELINE_CAPS))
        if not added <= RESTRICTED_CAPS:                             # Restricted: capabilities
            bad(f"{where}.securityContext.capabilities.add", sorted(added - RESTRICTED_CAPS))
        if "ALL" not in (caps.get("drop") or []):
            bad(f"{where}.securityContext.capabilities.drop", caps.get("drop"))
        if sc.get("allowPrivilegeEscalation") is not False:          # Restricted: privilege escalation
            bad(f"{where}.securityContext.allowPrivilegeEscalation", sc.get("allowPrivilegeEscalation"))
        nonroot = sc.get("runAsNonRoot")                             # Restricted: running as non-root
        if nonroot is False or (nonroot is None and not pod_nonroot):
            bad(f"{where}.securityContext.runAsNonRoot", nonroot)
        seccomp = (sc.get("seccompProfile") or {}).get("type")       # Restricted: seccomp
        if seccomp not in SECCOMP_OK and not (seccomp is None and pod_seccomp):
            bad(f"{where}.securityContext.seccompProfile.type", seccomp)
    return out
