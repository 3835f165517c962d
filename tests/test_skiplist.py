"""The skip list's hooks (tests/skiplist.py), each run on a tiny test directory of its own in a
pytest subprocess: under CI=true a skip fails the run unless allowed_skips.txt lists it with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import skiplist

TESTS = Path(__file__).resolve().parent
SKIPS = '''import pytest

def test_passes():
    pass

def test_skips_for_lack_of_a_tool():
    pytest.skip("no frobnicator here")

@pytest.mark.skipif(True, reason="the host decides")
def test_marked():
    pass
'''


def run(tmp_path: Path, listed: str, ci: bool, tests: str = SKIPS) -> subprocess.CompletedProcess:
    (tmp_path / "allowed.txt").write_text(listed)
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport skiplist\nskiplist.LIST = skiplist.Path({str(tmp_path / 'allowed.txt')!r})\n"
        "from skiplist import pytest_runtest_logreport, pytest_sessionfinish, pytest_sessionstart, pytest_terminal_summary\n")
    (tmp_path / "test_tiny.py").write_text(tests)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")} | ({"CI": "true"} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)


def test_under_ci_an_unlisted_skip_fails_the_run_and_is_named(tmp_path):
    done = run(tmp_path, "test_tiny.py::test_marked | the host decides\n", ci=True)
    assert done.returncode == 1, done.stdout
    assert "not allowed: test_tiny.py::test_skips_for_lack_of_a_tool | no frobnicator here" in done.stdout
    assert "not allowed: test_tiny.py::test_marked" not in done.stdout
    assert "SKIPPED" in done.stdout and "2 skipped" in done.stdout   # -ra shows every skip and its reason


def test_under_ci_listed_skips_with_their_reasons_pass(tmp_path):
    done = run(tmp_path, "# comment\n\ntest_tiny.py::test_marked | the host decides\ntest_tiny.py::test_skips_* | no frobnicator\n",
               ci=True)
    assert done.returncode == 0, done.stdout
    assert "2 skipped, 0 of them not in allowed.txt" in done.stdout


def test_a_listed_test_skipped_for_another_reason_fails(tmp_path):
    done = run(tmp_path, "test_tiny.py::* | the host decides\n", ci=True)
    assert done.returncode == 1 and "test_skips_for_lack_of_a_tool | no frobnicator here" in done.stdout, done.stdout


def test_without_ci_a_skip_is_shown_and_does_not_fail(tmp_path):
    done = run(tmp_path, "", ci=False)
    assert done.returncode == 0 and "2 skipped, 2 of them not in allowed.txt" in done.stdout, done.stdout


def test_failures_keep_their_exit_code(tmp_path):
    done = run(tmp_path, "", ci=True, tests="def test_fails():\n    assert False\n")
    assert done.returncode == 1 and "not allowed" not in done.stdout


def test_no_tests_collected_still_fails(tmp_path):
    done = run(tmp_path, "", ci=True, tests="")
    assert done.returncode == 5, done.stdout


def test_a_malformed_line_is_a_usage_error_without_a_traceback(tmp_path):
    done = run(tmp_path, "test_tiny.py::test_marked\n", ci=True)
    assert done.returncode == 4 and "allowed.txt:1: expected `test id | reason`" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout


def test_the_repositorys_list_parses_and_names_existing_test_files():
    for entry in skiplist.allowed(skiplist.LIST):
        assert "::" in entry.pattern and (TESTS.parent / entry.pattern.split("::")[0]).is_file(), entry
