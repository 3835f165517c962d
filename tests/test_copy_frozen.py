"""Tools containers on the real engine: each one has a time limit, after which it is killed and
removed and the launcher says what timed out."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

pytestmark = pytest.mark.engine


def test_a_tools_container_that_overruns_its_time_is_killed_and_removed(engine):
    from launcher.errors import EngineError
    from launcher.tools import run_tool

    name = f"slow-{os.getpid()}"
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"sleeping timed out after 2 s"):
        run_tool(engine, name=name, entrypoint=("sleep", "60"), argv=[], mounts=[], caps=(), labels={},
                 what="sleeping", timeout=2)
    assert time.monotonic() - started < 30
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={name}-tool-"], capture_output=True, text=True)
    assert left.stdout.strip() == ""
