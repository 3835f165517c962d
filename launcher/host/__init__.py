"""Facts about this machine and the workspace, read once, and what the launcher keeps on this host: the
one module that reads the environment (host.py), paths resolved and stat'ed, host files read safely,
the engine's identity, the workspace's git directories and host-executed surfaces, a policy's image
extension read by content, all gathered into `HostFacts` for the pure compiler; every git command
the launcher runs, inert by construction; and the state kept outside every workspace (state files,
approvals, session extensions, proofs, baselines, shared placeholders).

May import: policy."""
