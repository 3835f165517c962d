"""The plan: the typed `LaunchPlan` and the pure compiler that makes it from a `Policy` and `HostFacts`
(host-side refusals first, then names, mounts, network, environment, probe, container), the proxy's
Squid configuration (squid.conf.j2), the OCI runtimes (gVisor's seccomp profile beside them), how
long a sandbox lives, the trust key, the files a plan binds (the CA store, podman's seccomp profile),
the probe's check list and what enforces each field. The same policy and facts give the same plan.

May import: host, policy."""
