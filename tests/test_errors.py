"""One error handler for every command: stable exit codes, one line for a bug (the traceback only
with --debug), 130/143 for signals, and a clean-up failure never masking the primary error."""

from __future__ import annotations

import json
import os

import click
import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.errors import EngineError, ExitCode, PolicyError, ProbeFailed, Problem, Terminated, also_failed
from launcher.launch import launch
from launcher.pipeline import pipeline


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("raised, code", [
    (RuntimeError("boom"), ExitCode.INTERNAL),
    (KeyboardInterrupt(), 130),
    (Terminated(), 143),
    (PolicyError([Problem(file="f", path="p", expected="e", found="x")]), ExitCode.POLICY_INVALID),
    (EngineError("no engine"), ExitCode.ENGINE),
])
@pytest.mark.parametrize("command", [["compile"], ["explain"], ["check"], ["devcontainer", "."]])
def test_every_command_maps_errors_and_signals_to_their_codes(monkeypatch, tmp_path, raised, code, command):
    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(pipeline, "layered", fail)
    monkeypatch.setattr("launcher.check.lintstack.check", fail)
    monkeypatch.chdir(tmp_path)
    result = invoke(*command)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if code == ExitCode.INTERNAL:
        assert result.stderr.strip().splitlines() == [
            "sandbox: error: internal error: RuntimeError: boom (run with --debug for the traceback)"]


def test_debug_shows_the_traceback_of_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.setattr(pipeline, "layered", lambda *a, **k: 1 / 0)
    result = invoke("--debug", "compile", "-w", str(tmp_path))
    assert result.exit_code == ExitCode.INTERNAL and "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_run_report_and_exit_code_agree_on_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.setattr(pipeline, "compiled", lambda *a, **k: {}["missing"])
    report = tmp_path / "report.json"
    result = invoke("run", "-w", str(tmp_path), "--report", str(report), "--", "true")
    data = json.loads(report.read_text())
    assert result.exit_code == data["exit_code"] == ExitCode.INTERNAL
    assert data["status"] == "error" and "KeyError" in data["error"]


def test_a_clean_up_failure_is_reported_beside_the_primary_error(monkeypatch):
    from conftest import fake_facts
    from launcher.engine.enginefake import FakeEngine
    from launcher.plan.compiler import compile_policy
    from conftest import preset

    plan = compile_policy(preset("untrusted"), fake_facts())
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, env, podman=False: ["ReadonlyRootfs: expected True, found False"])
    with pytest.raises(ProbeFailed) as info:
        launch.create_verified(FakeEngine(fail={"DELETE /containers/": "the engine went away"}), plan)
    assert info.value.exit_code == ExitCode.PROBE_FAILED

    @click.command()
    def boom():
        raise info.value

    main.add_command(boom)
    try:
        result = invoke("boom")
    finally:
        main.commands.pop("boom")
    assert result.exit_code == ExitCode.PROBE_FAILED
    assert "does not match the plan" in result.stderr and "also: removing" in result.stderr
    assert "the engine went away" in result.stderr


def test_also_failed_keeps_every_message():
    error = KeyboardInterrupt()
    also_failed(error, "one")
    also_failed(error, "two")
    from launcher.errors import secondary_failures

    assert secondary_failures(error) == ["one", "two"] and secondary_failures(None) == []


def test_version_names_the_commit_of_a_checkout():
    import re
    from pathlib import Path

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("sandbox 0.")
    if (Path(__file__).resolve().parent.parent / ".git").is_dir():
        assert re.search(r"\(commit [0-9a-f]{12}(-dirty)?\)$", result.stdout.strip()), result.stdout


# The CLI refuses before it reaches an engine (moved from tests/test_engine.py: no engine needed).
def sandbox(*args, **kwargs):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=300, **kwargs)


def _refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stale_socket(tmp_path) -> str:
    """A socket file nobody listens on (as a crashed engine leaves it)."""
    import socket

    with socket.socket(socket.AF_UNIX) as left:
        left.bind(f"{tmp_path}/stale.sock")
    return f"unix://{tmp_path}/stale.sock"


@pytest.mark.parametrize("address, reason", [
    (lambda tmp: f"unix://{tmp}/nothing.sock", "no such socket file"),
    (_stale_socket, "connection refused"),
    (lambda tmp: f"tcp://127.0.0.1:{_refused_port()}", "connection refused"),
], ids=["missing-socket", "stale-socket", "tcp-refused"])
def test_docker_host_pointing_nowhere_says_so_and_how_to_undo_it(workspace, tmp_path, address, reason):
    address = address(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")} | {"DOCKER_HOST": address}
    result = sandbox("run", "-w", str(workspace), "--", "true", env=env)
    assert result.returncode == ExitCode.ENGINE, result.stderr
    assert result.stderr.splitlines() == [
        f"sandbox: error: cannot reach the Docker engine: DOCKER_HOST is set to {address} and nothing answers there "
        f"({reason})",
        "    hint: unset DOCKER_HOST to use the default socket /var/run/docker.sock, or start the engine that should "
        "answer there"]


def test_docker_host_that_does_not_resolve_says_so(monkeypatch):
    import socket

    def unresolvable(*args, **kwargs):   # no lookup leaves this machine
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine.invalid:2375")
    result = invoke("ls")
    assert result.exit_code == ExitCode.ENGINE and "Traceback" not in result.stderr
    assert ("DOCKER_HOST is set to tcp://engine.invalid:2375 and nothing answers there (the host name does not "
            "resolve)") in result.stderr


def test_no_default_socket_says_which_and_to_start_the_engine(monkeypatch, tmp_path):
    from launcher.engine import engine

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.setattr(engine, "DEFAULT_SOCKET", f"{tmp_path}/docker.sock")
    result = invoke("ls")
    assert result.exit_code == ExitCode.ENGINE
    assert result.stderr.splitlines() == [
        f"sandbox: error: cannot reach the Docker engine: nothing answers at {tmp_path}/docker.sock (the default "
        "socket; DOCKER_HOST is unset): no such socket file",
        "    hint: start it (for example `sudo dockerd &` or `systemctl start docker`) and check `docker info`"]


@pytest.mark.parametrize("mode, joins", [(0o660, True), (0o600, False)])
def test_a_socket_the_user_may_not_use_says_whose_it_is_and_the_ways_in(monkeypatch, tmp_path, mode, joins):
    """Not in the socket's group: as the kernel answers connect() then (a test as root is never refused)."""
    import errno
    import grp
    import pwd

    from launcher.doctor import doctor
    from launcher.engine import engine, engineapi

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    path, gid = tmp_path / "docker.sock", os.getegid() or 65534
    path.touch(mode=mode)
    path.chmod(mode)
    if os.geteuid() == 0:
        os.chown(path, 0, gid)
    group = next((g.gr_name for g in grp.getgrall() if g.gr_gid == gid), str(gid))
    user, owner = pwd.getpwuid(os.geteuid()).pw_name, pwd.getpwuid(path.stat().st_uid).pw_name
    monkeypatch.setattr(engineapi.Unix, "call", denied)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    result = invoke("ls")
    assert result.exit_code == ExitCode.ENGINE and "Traceback" not in result.stderr
    said, hint = result.stderr.splitlines()
    assert said == (f"sandbox: error: cannot reach the Docker engine: permission denied on its socket {path} "
                    f"(DOCKER_HOST, owner {owner}, group {group}, mode {mode:04o}); user {user} may not use it")
    assert hint.endswith("run sandbox with sudo, or use a rootless engine (DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock)")
    assert (f"add {user} to group {group} (`sudo usermod -aG {group} {user}`" in hint) is joins
    fix = doctor.run(engine.connect)[0].fix   # doctor gives the same way in
    assert fix == hint.removeprefix("    hint: ")


def test_bad_policy_has_its_exit_code_and_no_traceback(workspace, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: bad\ndescription: x\nnetwork: {mode: host}\n")
    result = sandbox("run", "-p", str(bad), "-w", str(workspace), "--", "true")
    assert result.returncode == ExitCode.POLICY_INVALID
    assert f"{bad}: network.mode: expected one of 'none'" in result.stderr and "Traceback" not in result.stderr
