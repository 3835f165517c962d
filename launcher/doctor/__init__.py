"""`sandbox doctor`: is this host fit to run sandboxes, and gVisor's registration."""
