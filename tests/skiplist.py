"""Pytest hooks (imported by conftest.py): under CI=true a skipped test fails the run unless
tests/allowed_skips.txt lists it with its reason, so a pipeline never goes green by skipping."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from markers import SERIAL_GROUP

LIST = Path(__file__).resolve().parent / "allowed_skips.txt"
_SEEN: list[tuple[str, str]] = []   # (node id, reason) of each skip of this session


@dataclass(frozen=True, kw_only=True)
class Allowed:
    pattern: str   # fnmatch pattern of a node id
    reason: str    # a part of the skip's message


def allowed(path: Path) -> list[Allowed]:
    """The list's entries; a malformed line is a usage error naming the file and line."""
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, bar, reason = (part.strip() for part in line.partition("|"))
        if not (bar and pattern and reason):
            raise pytest.UsageError(f"{path}:{number}: expected `test id | reason`, found {line.strip()!r}")
        entries.append(Allowed(pattern=pattern, reason=reason))
    return entries


def _reason(report) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def unlisted(seen: list[tuple[str, str]], entries: list[Allowed]) -> list[tuple[str, str]]:
    return [(node, why) for node, why in seen
            if not any(fnmatch.fnmatchcase(node, e.pattern) and e.reason in why for e in entries)]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true")


def pytest_sessionstart(session):
    _SEEN.clear()
    allowed(LIST)   # a malformed list stops the run before any test


def pytest_runtest_logreport(report):
    if report.skipped:   # the node id without pytest-xdist's "@group" (tests/markers.py)
        _SEEN.append((report.nodeid.removesuffix("@" + SERIAL_GROUP), _reason(report)))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if _in_ci() and unlisted(_SEEN, allowed(LIST)) and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if not _SEEN:
        return
    bad = unlisted(_SEEN, allowed(LIST))
    terminalreporter.write_line(f"{len(_SEEN)} skipped, {len(bad)} of them not in {LIST.name}"
                                + (" (CI=true: the run fails)" if bad and _in_ci() else ""))
    for node, why in bad:
        terminalreporter.write_line(f"  not allowed: {node} | {why}", red=_in_ci())
