"""The one list of probe check ids against every place that names them: the probe script, the
explain table, the check table of docs/security.md and the tamper matrix. Any difference fails."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.check import explain
from launcher.plan import checks

ROOT = Path(__file__).resolve().parent.parent


def test_the_explain_table_names_exactly_the_probes_checks():
    assert explain.checks_named() == set(checks.ALL)


def test_the_security_pages_table_lists_every_check_in_order():
    page = (ROOT / "docs" / "security.md").read_text()
    table = page[page.index("| check | proves |"):]
    table = table[:table.index("\n\n")]
    ids = [i for row in table.splitlines()[2:] for i in re.findall(r"[a-z]+\.[a-z_0-9]+|\bnnp\b", row.split("|")[1])]
    assert ids == list(checks.ALL)


def test_the_tamper_matrix_has_a_tamper_for_every_none_mode_check():
    import test_tamper

    assert list(test_tamper.TAMPERS) == list(checks.for_mode("none"))


def test_the_probe_script_has_one_function_per_check_and_no_list_of_its_own():
    probe = (ROOT / "images" / "probe" / "probe.sh").read_text()
    functions = re.findall(r"^check_([a-z_0-9]+)\(\)", probe, re.M)
    assert functions == [c.replace(".", "_") for c in checks.ALL]   # in report order, one each
    # the probe runs what the launcher passes (checks=...), and the lists come from the launcher too
    assert "for id in $A_checks" in probe
    for hand_kept in ("identity.uid identity.gid", "*[Tt][Oo][Kk][Ee][Nn]*", "DOCKER_HOST |", '"$h.ssh"',
                      "/run/docker.sock /run/containerd", "10250", "169.254.169.254"):
        assert hand_kept not in probe, hand_kept


def test_the_compiler_passes_the_launchers_lists_to_the_probe():
    from conftest import fake_facts, preset
    from launcher.host.paths import CREDENTIAL_PATHS, RUNTIME_SOCKETS
    from launcher.plan.compiler import compile_policy
    from launcher.policy.secrets import SECRET_VALUES

    for name, mode in (("untrusted", "none"), ("ci", "proxy")):
        probe = compile_policy(preset(name), fake_facts()).probe
        assert probe.checks == checks.for_mode(mode)
        assert probe.secretvalues == SECRET_VALUES and probe.runtimesockets == RUNTIME_SOCKETS
        assert probe.credpaths == CREDENTIAL_PATHS and "*_[Kk][Ee][Yy]" in probe.secretnames


def test_an_na_verdict_passes_only_where_the_plan_said_so():
    from launcher.engine.verify import parse_probe

    lines = ["PROBE\tnnp\tn/a\t1\tnot shown (gvisor has no NoNewPrivs line)", "PROBE-END\tok\t1"]
    assert not parse_probe(lines).ok and parse_probe(lines).checks[0].verdict == "n/a"
    assert not parse_probe(lines, ("limits.pids",)).ok
    assert parse_probe(lines, ("nnp",)).ok


def test_every_na_check_has_a_reason_and_is_a_probe_check():
    for where, reasons in checks.NOT_APPLICABLE.items():
        assert set(reasons) <= set(checks.ALL) and all(reasons.values()), where
    assert checks.not_applicable("host") == ()
    assert checks.not_applicable("gvisor") == ("nnp", "mounts.workspace", "limits.pids")
    assert "Pod API" in checks.reason("limits.pids", kernel="gvisor", net="pod")
    assert "PidsLimit" in checks.reason("limits.pids", kernel="gvisor", net="none")


def test_the_run_report_shows_an_na_check_with_its_reason():
    import time

    from conftest import fake_facts, preset
    from launcher.engine.verify import parse_probe
    from launcher.plan.compiler import compile_policy
    from launcher.targets import report

    plan = compile_policy(preset("untrusted-gvisor"), fake_facts())
    probe = parse_probe(["PROBE\tnnp\tn/a\t1\tnot shown (gvisor has no NoNewPrivs line)",
                         "PROBE\tcaps.bnd\tpass\t0000000000000000\t0000000000000000", "PROBE-END\tok\t2"], plan.probe.na)
    checks_ = report.build(status="ok", exit_code=0, started=time.monotonic(), plan=plan, probe=probe)["probe"]["checks"]
    assert checks_[0]["verdict"] == "n/a" and checks_[0]["ok"] and "SecurityOpt" in checks_[0]["not_applicable"]
    assert checks_[1]["verdict"] == "pass" and "not_applicable" not in checks_[1]
