"""The one path from a policy reference to a plan: the stack of layers, host facts, compile."""

# docs/library.md names launcher.pipeline.LayerOptions: kept here, loaded on first use.
_FACE = ('LayerOptions',)


def __getattr__(name: str):
    if name in _FACE:
        from launcher.pipeline import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
