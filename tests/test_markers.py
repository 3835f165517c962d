"""tests/markers.py's hook on a tiny test directory of its own (a pytest subprocess): a test marked
`engine` without an engine fixture, one using the fixture unmarked, or one running `gc` unmarked
`exclusive`, stops the run at collection; the engine groups and their lock hold on two workers."""

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



def on_two_workers(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
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


def test_the_engine_tests_run_one_after_another_on_one_worker(tmp_path):
    # pytest-xdist's loadgroup keeps a group on one worker only where its "@group" node id takes
    # (it did not under pytest 9.2 with xdist 3.8: every engine test ran beside another)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_tiny.py").write_text(
        "import os, time\nimport pytest\n\n"
        "@pytest.mark.parametrize('i', range(6))\n@pytest.mark.engine\ndef test_e(engine, i):\n"
        "    time.sleep(0.1)\n    print('WORKER', os.environ['PYTEST_XDIST_WORKER'])\n\n"
        "@pytest.mark.parametrize('i', range(6))\ndef test_u(i):\n    time.sleep(0.1)\n")
    done = on_two_workers(tmp_path)
    assert done.returncode == 0 and "12 passed" in done.stdout, done.stdout + done.stderr
    workers = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("WORKER ")}
    assert len(workers) == 1, done.stdout


def test_a_beside_test_runs_beside_the_serial_ones_but_never_beside_an_exclusive_one(tmp_path):
    # test_up_engine.py is a file of the beside group (markers.BESIDE_FILES); each test writes when
    # it began and ended, and an exclusive test must overlap no beside one
    (tmp_path / "conftest.py").write_text(CONFTEST + "from markers import turn\n\n@pytest.fixture(autouse=True)\n"
                                          "def engine_turn(request):\n    with turn(request.node):\n        yield\n")
    record = ("import os, time\nimport pytest\n\ndef span(name):\n"
              "    start = time.monotonic(); time.sleep(0.4)\n"
              f"    with open({str(tmp_path / 'spans')!r}, 'a') as out:\n"
              "        out.write(f'{name} {os.environ[\"PYTEST_XDIST_WORKER\"]} {start} {time.monotonic()}\\n')\n\n")
    (tmp_path / "test_up_engine.py").write_text(
        record + "@pytest.mark.parametrize('i', range(4))\n@pytest.mark.engine\ndef test_beside(engine, i):\n    span('beside')\n")
    (tmp_path / "test_tiny.py").write_text(
        record + "@pytest.mark.parametrize('i', range(4))\n@pytest.mark.engine\ndef test_serial(engine, i):\n    span('serial')\n\n"
        "@pytest.mark.exclusive\n@pytest.mark.engine\ndef test_sweep(engine):\n    span('exclusive')\n")
    done = on_two_workers(tmp_path)
    assert done.returncode == 0 and "9 passed" in done.stdout, done.stdout + done.stderr
    spans = [(n, w, float(a), float(b)) for n, w, a, b in
             (line.split() for line in (tmp_path / "spans").read_text().splitlines())]
    workers = {n: {w for m, w, _, _ in spans if m == n} for n in ("beside", "serial", "exclusive")}
    assert len(workers["beside"]) == 1 and workers["beside"] != workers["serial"] == workers["exclusive"], spans
    [(_, _, x0, x1)] = [s for s in spans if s[0] == "exclusive"]
    assert all(b <= x0 or a >= x1 for n, _, a, b in spans if n == "beside"), spans


def test_a_test_that_runs_gc_unmarked_stops_the_run(tmp_path):
    done = collect(tmp_path, "@pytest.mark.engine\ndef test_a(engine):\n    sandbox = print\n    sandbox(\"gc\")\n")
    assert done.returncode == 4 and "runs `sandbox gc` unmarked (mark it exclusive)" in done.stderr, done.stderr
