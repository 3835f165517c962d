"""A pytest hook (imported by conftest.py): the `engine` marker and the fixtures that reach a real
engine agree, so `-m "not engine"` runs exactly the tests that need none."""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import os
import tempfile

import pytest

# The fixtures that reach a real engine (conftest's, tests/test_rootless_engine.py's): without one
# they fail under CI=true or skip, never pass.
ENGINE_FIXTURES = {"engine", "rootless_host"}


# pytest-xdist (`-n 2 --dist loadgroup`, pyproject.toml): every test that reaches an engine or the
# host's packages is in this one group, so they run one after another on one worker, exactly as
# without xdist (they share the engine, its probe volume, gc); the rest run on the other worker
# meanwhile. xdist adds "@engine" to their node ids.
SERIAL_GROUP = "engine"
# ...but for these files' tests, which run one after another on the other worker, beside the serial
# group and before the unit tests there. Each works only on what it made (its own workspaces,
# sandbox names, networks with the worker's pid in their names), never sweeps (`sandbox gc`), never
# replaces the probe volume, uses no fixed subnet and no podman; most of their time is waiting on a
# sandbox's clock or an agent. On podman (.ci/podman) they stay in the serial group: there each
# proxy sandbox makes networks of its own, and these files were never tried two at a time.
BESIDE_GROUP = "engine-beside"
BESIDE_FILES = frozenset({
    "test_agents_real.py", "test_attest_engine.py", "test_copy_wayback.py", "test_day_engine.py",
    "test_egress_change_engine.py", "test_egress_http_engine.py", "test_extend_engine.py",
    "test_layers_engine.py", "test_registries_engine.py", "test_secrets_engine.py",
    "test_session_limits.py", "test_shell_engine.py", "test_up_engine.py",
})
# A serial test that sweeps what every launcher left (`sandbox gc`) or replaces the probe volume is
# marked `exclusive`: it holds the beside group off while it runs (`turn`). A test whose source runs
# `gc` unmarked stops the run at collection.
SWEEPS = ('"gc"',)


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the group
def pytest_collection_modifyitems(items):
    """A test marked `engine` uses an engine fixture, and one using it is marked: otherwise a test
    that needs no engine hides among the engine tests, or one that needs it runs with -m 'not engine'."""
    wrong = []
    for item in items:
        if any(item.get_closest_marker(m) for m in ("engine", "slow", "rootless")):
            beside = item.path.name in BESIDE_FILES and os.environ.get("SANDBOX_TEST_ENGINE", "docker") == "docker"
            item.add_marker(pytest.mark.xdist_group(BESIDE_GROUP if beside else SERIAL_GROUP))
            exclusive = item.get_closest_marker("exclusive") is not None
            if exclusive and beside:
                wrong.append(f"{item.nodeid}: marked exclusive in a file of the beside group")
            elif not exclusive and _sweeps(item):
                wrong.append(f"{item.nodeid}: runs `sandbox gc` unmarked (mark it exclusive)")
        marked = item.get_closest_marker("engine") is not None
        if marked != bool(ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))):
            wrong.append(f"{item.nodeid}: " + ("marked engine without an engine fixture" if marked else "uses the engine unmarked"))
    if wrong:
        raise pytest.UsageError("the engine tests' markers are wrong:\n  " + "\n  ".join(wrong))


def _sweeps(item) -> bool:
    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return any(word in source for word in SWEEPS)


@contextlib.contextmanager
def turn(item):
    """Around one engine test: an exclusive one holds the lock alone, a beside one shares it, so no
    beside test runs while a sweep does. Outside xdist (`-n 0`) there is one process and no lock."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    exclusive = item is None or item.get_closest_marker("exclusive") is not None
    if not run or not (exclusive or item.path.name in BESIDE_FILES):
        yield
        return
    with open(os.path.join(tempfile.gettempdir(), f"sandbox-tests-{run}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
