"""Facts about this machine and the workspace, read once, and what the launcher keeps on the host."""
