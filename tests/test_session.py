"""The library session: a launch from Python without click, its progress on a listener, nothing printed."""

from __future__ import annotations

from pathlib import Path

import pytest

import launcher
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import Check, ProbeReport
from launcher.errors import ExitCode, PolicyError
from launcher.launch import session
from launcher.launch.launch import Outcome


class Heard:
    def __init__(self):
        self.said, self.out = [], b""

    def status(self, message: str) -> None:
        self.said.append(message)

    def output(self, stream: str, data: bytes) -> None:
        self.out += data


def test_the_package_names_the_session():
    assert launcher.run is session.run and launcher.Request is session.Request
    with pytest.raises(AttributeError):
        launcher.no_such_name


def test_every_command_that_acts_is_one_library_call_the_docs_show():
    from launcher.copies import store
    from launcher.usecases import copywork, remove

    assert (launcher.down, launcher.gc, launcher.diff, launcher.apply, launcher.discard, launcher.checkpoint) == (
        remove.down, remove.gc, copywork.diff, copywork.apply, copywork.discard, store.checkpoint)
    text = (Path(__file__).resolve().parent.parent / "docs" / "library.md").read_text()
    missing = [name for name in launcher.CALLS if f"launcher.{name}" not in text]
    assert not missing, f"docs/library.md does not show {missing}"


def test_a_bad_policy_is_a_result_not_an_exception(tmp_path, capsys):
    result = session.run(session.Request(policy="no-such-preset", workspace=str(tmp_path), command=("true",)), Heard())
    assert result.status == "policy-invalid" and result.exit_code == ExitCode.POLICY_INVALID
    assert isinstance(result.error, PolicyError) and not result.internal and result.outcome is None
    assert result.report["status"] == "policy-invalid" and "no such preset" in result.report["error"]
    assert capsys.readouterr() == ("", "")   # the library printed nothing


def test_a_run_reports_to_its_listener_and_returns_the_agents_status(tmp_path, monkeypatch, capsys):
    from launcher.launch import launch

    probe = ProbeReport(checks=(Check(id="identity.uid", ok=True, expected="1000", observed="1000"),),
                        finished=True, verdict_ok=True)
    ran = []

    def fake_run(engine, plan, listener, forwarding=None):
        ran.append(plan)
        listener.output("stdout", b"agent says hi\n")
        return Outcome(container=plan.container.name, probe=probe, exit_code=3, timed_out=False)

    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "run", fake_run)
    heard = Heard()
    request = session.Request(policy="untrusted", workspace=str(tmp_path), command=("make", "test"))
    result = session.run(request, heard, engine=FakeEngine())
    assert (result.status, result.exit_code, result.report["agent"]["exit_code"]) == ("agent-failed", 3, 3)
    assert ran[0].container.command[-2:] == ("make", "test") and heard.out == b"agent says hi\n"
    assert result.planned.plan is ran[0] and capsys.readouterr() == ("", "")
