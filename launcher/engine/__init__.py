"""The container engine behind one protocol (`engineproto.Engine` and its typed answers): the
implementation over the Docker Engine API (engine.py, the one module that imports `docker`), the
request bodies for Docker and podman, the in-memory fake every unit test uses (podman's side
included), the bundled and extended images, short-lived tool containers, the engines on this host,
and a created container's inspect compared with the plan. `launcher.engine.Engine` (docs/library.md)
is kept here, loaded on first use.

May import: host, plan, policy."""

# docs/library.md names launcher.engine.Engine: kept here, loaded on first use.
_FACE = ('Engine',)


def __getattr__(name: str):
    if name in _FACE:
        from launcher.engine import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
