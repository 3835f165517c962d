"""The one list of probe check ids against every place that names them: the probe script, the
explain table, the README table and the tamper matrix. Any difference fails."""

from __future__ import annotations

import re
from pathlib import Path

from launcher import checks, explain

ROOT = Path(__file__).resolve().parent.parent


def test_the_explain_table_names_exactly_the_probes_checks():
    assert explain.checks_named() == set(checks.ALL)


def test_the_readme_table_lists_every_check_in_order():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| check | proves |"):]
    table = table[:table.index("\n\n")]
    ids = [i for row in table.splitlines()[2:] for i in re.findall(r"[a-z]+\.[a-z_0-9]+|\bnnp\b", row.split("|")[1])]
    assert ids == list(checks.ALL)


def test_the_tamper_matrix_has_a_tamper_for_every_none_mode_check():
    import test_tamper

    assert list(test_tamper.TAMPERS) == list(checks.for_mode("none"))


def test_the_probe_script_runs_exactly_these_checks_in_this_order():
    probe = (ROOT / "images" / "probe" / "probe.sh").read_text()
    assert probe_order(probe) == list(checks.ALL)


def probe_order(probe: str) -> list[str]:
    """The check ids in the order the probe script reports them (its `_p_line ID` calls)."""
    return [m.group(1) for m in re.finditer(r"_p_line\s+([a-z]+(?:\.[a-z_0-9]+)?)\b", probe)]
