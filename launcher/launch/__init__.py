"""A plan meets the engine: the library's session (`run`, `up`, `prepare`; the CLI and the selftest
call it), the launch itself (create, compare with the plan, start, probe, run the agent, remove
everything on every way out), the verdict on the proof, the agent's home volume, long-lived
sandboxes (list, exec, down, gc, what `up` was started with, host ports forwarded, a terminal) and
the attestation records of runs and of `up` sandboxes.

May import: agents, copies, egress, engine, host, pipeline, plan, policy, targets."""
