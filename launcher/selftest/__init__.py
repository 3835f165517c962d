"""`sandbox selftest`: hostile cases as data, their runner and shell library, scratch workspaces, the
test network; real sandboxes per preset through the library's session, judged from inside and out.

May import: copies, engine, host, launch, pipeline, plan, policy, usecases."""
