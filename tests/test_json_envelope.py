"""--json in one envelope (issue 44): command, ok, exit_code, sandbox and error first on every
object a command answers with, its own fields after them; an error under --json is such an object
on stdout too, with the exit code unchanged and the words still on stderr."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fakes import one_sandbox
from launcher.cli import main
from launcher.copies import store
from launcher.engine import engine, images
from launcher.errors import ExitCode, PolicyError, Problem
from launcher.host import proven
from launcher.launch import sandboxes, session

HEAD = ("command", "ok", "exit_code", "sandbox", "error")


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def answer(result, command: str, code: int = 0, sandbox: str | None = "box") -> dict:
    """The one JSON object on stdout, checked against the envelope."""
    data = json.loads(result.stdout)
    assert list(data)[:5] == list(HEAD), data
    assert (data["command"], data["exit_code"], data["ok"], data["sandbox"]) == (command, code, code == 0, sandbox)
    assert result.exit_code == code, result.stderr
    return data


@pytest.fixture
def fake(monkeypatch):
    made = one_sandbox()
    monkeypatch.setattr(engine, "connect", lambda **_: made)
    return made


def test_exec_json_is_the_commands_exit_code_and_its_last_proof_its_output_on_stderr(fake):
    proven.save("box", 41, "at its start")
    result = invoke("exec", "box", "--json", "--", "make", "test")
    data = answer(result, "exec", code=3)
    assert data["error"] == "" and data["argv"] == ["make", "test"]   # the command's own code is no error of ours
    assert data["proven"]["checks"] == 41 and data["proven"]["how"] == "at its start"
    assert "out\n" in result.stderr and "err\n" in result.stderr and "last proven" in result.stderr


def test_an_error_under_json_is_the_commands_object_and_keeps_its_exit_code(fake):
    result = invoke("exec", "nope", "--json", "--", "true")
    data = answer(result, "exec", code=ExitCode.NO_SANDBOX, sandbox="nope")
    assert "no sandbox named 'nope'" in data["error"] and data["problems"] == [] and "hint" in data
    assert "no sandbox named 'nope'" in result.stderr   # the words stay on stderr
    assert invoke("exec", "nope", "--", "true").stdout == ""   # without --json, stdout stays empty


def test_a_policy_error_lists_its_problems_and_a_usage_error_is_json_too(monkeypatch, fake):
    refused = PolicyError([Problem(file="f", path="p", expected="e", found="x", hint="h")])
    monkeypatch.setattr(sandboxes, "exec_in", lambda *a, **k: (_ for _ in ()).throw(refused))
    data = answer(invoke("exec", "box", "--json", "--", "true"), "exec", code=ExitCode.POLICY_INVALID)
    assert data["problems"] == [{"file": "f", "path": "p", "expected": "e", "found": "x", "hint": "h"}]
    usage = invoke("logs", "--json")
    assert usage.exit_code == 2 and "give a sandbox NAME or --report FILE" in usage.stderr
    assert json.loads(usage.stdout)["error"] == "give a sandbox NAME or --report FILE"


def test_an_internal_error_under_json_is_125_in_the_envelope(monkeypatch, fake):
    monkeypatch.setattr(sandboxes, "exec_in", lambda *a, **k: {}["missing"])
    data = answer(invoke("exec", "box", "--json", "--", "true"), "exec", code=ExitCode.INTERNAL)
    assert data["error"].startswith("internal error: KeyError")


def test_run_json_is_the_report_in_the_envelope_and_says_a_refusal_once(tmp_path):
    result = invoke("run", "-p", "no-such-preset", "-w", str(tmp_path), "--json", "--", "true")
    data = answer(result, "run", code=ExitCode.POLICY_INVALID, sandbox=None)
    assert data["status"] == "policy-invalid" and "no such preset" in data["error"]   # the report's fields stay
    assert data["problems"] and "sandbox_version" in data


def test_up_json_says_what_was_started_before_any_shell(monkeypatch, tmp_path):
    def up(request, listener, timings=None):
        proven.save("box", 40, "at its start")
        return session.UpResult(planned=session.prepare(request, listener, kind="up"), sandbox="box", reused=False,
                                ends=1234.0)

    monkeypatch.setattr(session, "up", up)
    data = answer(invoke("up", str(tmp_path), "-p", "ci", "--no-shell", "--json"), "up")
    assert data["reused"] is False and data["stops_at"] == 1234.0 and data["proven"]["checks"] == 40
    assert data["policy"]["name"] == "ci" and data["workspace"] == str(tmp_path.resolve())
    assert data["network"] == "proxy" and data["copy"] is None and data["shell"]


def test_port_json_is_a_stream_of_lines_listening_then_stopped(monkeypatch):
    from launcher.launch import forward

    monkeypatch.setattr(engine, "connect", lambda **_: one_sandbox(network="none"))
    monkeypatch.setattr(forward.Forwarder, "serve", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    result = invoke("port", "box", "0:8000", "--json")
    assert result.exit_code == 0, result.stderr
    listening, stopped = (json.loads(line) for line in result.stdout.splitlines())
    assert listening["state"] == "listening" and listening["port"] == 8000 and listening["host_port"] > 0
    assert stopped == listening | {"state": "stopped", "served": 0}
    assert "forwarding 127.0.0.1:" in result.stderr


@pytest.fixture
def copy_of_box(monkeypatch, fake):
    monkeypatch.setattr(images, "build", lambda *a, **k: False)
    monkeypatch.setattr(store, "find", lambda eng, name: store.Copy(name=name, workspace="/ws", policy="p",
                                                                    protected=(), created="", maker=1))
    monkeypatch.setattr(sandboxes, "unapplied", lambda eng, copy: 2)
    monkeypatch.setattr(store, "discard", lambda eng, name: None)


def test_discard_json_says_what_was_dropped_and_what_it_held(copy_of_box):
    dry = answer(invoke("discard", "box", "--dry-run", "--json"), "discard")
    assert (dry["dropped"], dry["dry_run"], dry["unapplied"], dry["workspace"]) == (False, True, 2, "/ws")
    refused = answer(invoke("discard", "box", "--json"), "discard", code=ExitCode.POLICY_INVALID)
    assert "a yes to drop 2 changes" in refused["error"] and refused["problems"][0]["path"] == "--yes"
    dropped = answer(invoke("discard", "box", "--yes", "--json"), "discard")
    assert dropped["dropped"] is True and dropped["error"] == ""


def test_checkpoint_and_rewind_json_name_the_checkpoints(monkeypatch, copy_of_box):
    taken = {"id": 3, "time": 1.0, "entries": 5, "message": "m"}
    monkeypatch.setattr(store, "checkpoint", lambda *a, **k: taken)
    monkeypatch.setattr(store, "rewind", lambda *a, **k: taken)
    assert answer(invoke("checkpoint", "box", "-m", "m", "--json"), "checkpoint")["checkpoint"] == taken
    back = answer(invoke("rewind", "box", "1", "--json"), "rewind")
    assert back["checkpoint"] == 1 and back["before"] == taken
