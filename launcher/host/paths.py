"""Runtime and credential locations, the one list: the launcher refuses to mount them from the
host, and the probe (which gets these lists in its arguments) proves none exists inside."""

from __future__ import annotations

# Host paths that are, or hold, a container runtime's socket or state: never mounted, also not
# through a parent directory.
RUNTIME_HOST_PATHS = (
    "/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/var/run/containerd",
    "/run/podman", "/var/run/podman", "/run/buildkit", "/run/crio", "/var/run/crio",
    "/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
)
# Socket paths the probe looks for inside the sandbox (shell globs).
RUNTIME_SOCKETS = (
    "/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock", "/run/docker/containerd/containerd.sock",
    "/run/podman/podman.sock", "/var/run/podman/podman.sock", "/run/buildkit/buildkitd.sock",
    "/var/run/buildkit/buildkitd.sock", "/run/crio/crio.sock", "/var/run/crio/crio.sock",
    "/run/k3s/containerd/containerd.sock", "/run/dockershim.sock",
    "/run/user/*/docker.sock", "/run/user/*/podman/podman.sock", "/run/user/*/buildkit/buildkitd.sock",
    "/run/user/*/containerd/containerd.sock", "/var/run/user/*/docker.sock",
)
# Credential locations below a home directory: never mounted from the host's, and none may exist
# in the sandbox's (.npmrc only with an auth entry in it: a plain one is just configuration).
CREDENTIAL_PATHS = (
    ".ssh", ".aws", ".config/gcloud", ".azure", ".kube", ".docker", ".gnupg", ".netrc",
    ".git-credentials", ".npmrc", ".pypirc", ".config/gh", ".password-store", ".vault-token",
)
