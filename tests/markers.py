"""A pytest hook (imported by conftest.py): the `engine` marker and the fixtures that reach a real
engine agree, so `-m "not engine"` runs exactly the tests that need none."""

from __future__ import annotations

import pytest

# The fixtures that reach a real engine (conftest's, tests/test_rootless_engine.py's): without one
# they fail under CI=true or skip, never pass.
ENGINE_FIXTURES = {"engine", "rootless_host"}


# pytest-xdist (`-n 2 --dist loadgroup`, pyproject.toml): every test that reaches an engine or the
# host's packages is in this one group, so they run one after another on one worker, exactly as
# without xdist (they share the engine, its probe volume, gc); the rest run on the other worker
# meanwhile. xdist adds "@engine" to their node ids.
SERIAL_GROUP = "engine"


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the group
def pytest_collection_modifyitems(items):
    """A test marked `engine` uses an engine fixture, and one using it is marked: otherwise a test
    that needs no engine hides among the engine tests, or one that needs it runs with -m 'not engine'."""
    wrong = []
    for item in items:
        if any(item.get_closest_marker(m) for m in ("engine", "slow", "rootless")):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        marked = item.get_closest_marker("engine") is not None
        if marked != bool(ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))):
            wrong.append(f"{item.nodeid}: " + ("marked engine without an engine fixture" if marked else "uses the engine unmarked"))
    if wrong:
        raise pytest.UsageError("the engine marker and the engine fixtures disagree:\n  " + "\n  ".join(wrong))
