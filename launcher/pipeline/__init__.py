"""The one path from a policy reference to a plan: which layers apply and in what order (the stack:
base and its `extends`, org, user, the repository's once approved, git, command line), an agent's
profile applied, host facts gathered, compiled. The library's session, the CLI, the selftest and
`sandbox check` all go through here. `launcher.pipeline.LayerOptions` (docs/library.md) is kept
here, loaded on first use.

May import: agents, engine, host, plan, policy."""

# docs/library.md names launcher.pipeline.LayerOptions: kept here, loaded on first use.
_FACE = ('LayerOptions',)


def __getattr__(name: str):
    if name in _FACE:
        from launcher.pipeline import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
