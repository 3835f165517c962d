"""The commands that act on what exists — `down`, `gc` and the copy's `diff`, `apply`, `discard` —
as library calls: each does the whole of its command's work and returns what happened as frozen
data; nothing here prints or exits. `launcher/cli/` parses flags for them and prints their answers;
`run` and `up` are launcher.launch.session's.

May import: copies, engine, host, launch, policy."""
