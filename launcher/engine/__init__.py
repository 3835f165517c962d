"""The container engine behind one protocol: the Docker API, its bodies, the fake, images."""

# docs/library.md names launcher.engine.Engine: kept here, loaded on first use.
_FACE = ('Engine',)


def __getattr__(name: str):
    if name in _FACE:
        from launcher.engine import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
