"""`sandbox doctor`: is this host fit to run sandboxes? Each finding ok, warn or fail with a one-line
fix, the engine's own view the source of truth; and gVisor's registration in the engine, which
`doctor --fix` merges into daemon.json.

May import: engine, host, plan."""
