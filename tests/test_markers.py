"""tests/markers.py's hook on a tiny test directory of its own (a pytest subprocess): a test marked
`engine` without an engine fixture, or one using the fixture unmarked, stops the run at collection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CONFTEST = f'''import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from markers import pytest_collection_modifyitems

@pytest.fixture
def engine():
    return "an engine"
'''


def collect(tmp_path: Path, tests: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_tiny.py").write_text("import pytest\n\n" + tests)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not engine",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})


def test_marked_and_using_the_engine_or_neither_runs(tmp_path):
    done = collect(tmp_path, "@pytest.mark.engine\ndef test_a(engine):\n    pass\n\ndef test_b():\n    pass\n")
    assert done.returncode == 0 and "1 passed, 1 deselected" in done.stdout, done.stdout + done.stderr


def test_a_test_marked_engine_that_never_uses_it_stops_the_run(tmp_path):
    done = collect(tmp_path, "pytestmark = pytest.mark.engine\n\ndef test_a(engine):\n    pass\n\ndef test_pure():\n    pass\n")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "test_tiny.py::test_pure: marked engine without an engine fixture" in done.stderr
    assert "test_a" not in done.stderr and "Traceback" not in done.stderr


def test_a_test_using_the_engine_unmarked_stops_the_run(tmp_path):
    done = collect(tmp_path, "@pytest.fixture\ndef built(engine):\n    return engine\n\ndef test_a(built):\n    pass\n")
    assert done.returncode == 4 and "test_tiny.py::test_a: uses the engine unmarked" in done.stderr, done.stderr
