"""Bad input to the commands that need no engine: a clear message and the documented exit code,
never an internal error (125) or a success that hides the mistake (issue 26).

Most cases call the CLI in this process (click's CliRunner: the same main(), the same error handler,
SystemExit codes come back as exit_code); a few run `python -m launcher` in a real process, so the
end-to-end path (the process's exit code, nothing printed as a traceback) stays covered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner, Result

from launcher.cli import main

SANDBOX = [sys.executable, "-m", "launcher"]


def run_process(*argv: str, cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m launcher ARGV` in a real process."""
    return subprocess.run([*SANDBOX, *argv], capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={**os.environ, **(env or {})})


def run(*argv: str, cwd, env: dict | None = None) -> Result:
    """The same command in this process, in `cwd` with the same environment; an exception that
    escapes the CLI's error handler fails the test."""
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(argv), env=env or {},
                             catch_exceptions=False)
    finally:
        os.chdir(before)


@pytest.fixture
def place(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "not-json.json").write_text("nope\n")
    (tmp_path / "other.json").write_text("{}\n")
    (tmp_path / "none-mode.json").write_text(json.dumps({"sandbox_version": "0", "egress": None}))
    return tmp_path


BAD_INPUT = [
    (["devcontainer", "--policy", "untrusted", "ws"], 120, "add --workspace-mode bind"),
    (["compile", "--policy", "untrusted", "-w", "ws", "--format", "argv"], 120, "add --workspace-mode bind"),
    (["logs", "--report", "not-json.json"], 120, "found no JSON"),
    (["logs", "--report", "other.json"], 120, "not a run report"),
    (["verify-attestation", "missing.json"], 2, "does not exist"),
]


@pytest.mark.parametrize("argv, code, said", BAD_INPUT)
def test_bad_input_gets_its_exit_code_and_a_sentence(argv, code, said, place):
    done = run(*argv, cwd=place)
    assert done.exit_code == code and said in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv, code, said", [BAD_INPUT[3], BAD_INPUT[4]])   # the error handler; click's usage error
def test_a_real_process_exits_with_the_code_and_prints_no_traceback(argv, code, said, place):
    done = run_process(*argv, cwd=place)
    assert done.returncode == code and said in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_logs_writes_its_data_on_stdout_and_needs_no_egress_flag(place):
    done = run_process("logs", "--report", "none-mode.json", "--allowed", cwd=place)   # a real process's stdout
    assert done.returncode == 0, done.stderr
    assert done.stdout == "egress: 0 refused, 0 would be refused (audit mode), 0 allowed\n"


def test_a_devcontainer_for_the_bind_variant_is_written(place):
    done = run("devcontainer", "--policy", "untrusted", "--workspace-mode", "bind", "ws", cwd=place)
    assert done.exit_code == 0, done.stderr
    assert json.loads((place / "ws" / ".devcontainer" / "devcontainer.json").read_text())["name"] == "sandbox: untrusted"


def policy_file(place, body: str):
    (place / "p.yaml").write_text("version: 1\nname: x\ndescription: d\n" + body)
    return run("check", "./p.yaml", cwd=place)


@pytest.mark.parametrize("body, said", [
    ("network: {mode: proxy, allow: [localhost]}\n", "no loopback name"),
    ("network: {mode: proxy, allow: ['*.localhost']}\n", "no loopback name"),
    ("network: {mode: proxy, allow: [metadata.google.internal]}\n", "no cloud metadata service"),
    ("limits: {timeout: 100000h}\n", "at most 168h"),
    ("image: ubuntu latest\n", "an image reference"),
    ("\tname: y\n", "YAML indents with spaces only"),
    ("mounts:\n  - {source: ~, target: /x}\n", "quoted if it is '~'"),
])
def test_check_refuses_what_the_proxy_or_the_engine_would_and_says_why(body, said, place):
    done = policy_file(place, body)
    assert done.exit_code == 120 and said in done.stdout, done.stdout


def test_a_home_size_a_volume_ignores_is_a_warning(place):
    done = policy_file(place, "home: {mode: volume, size: 1g}\n")
    assert done.exit_code == 0 and "home.size: ignored: a home volume has no size limit" in done.stdout


def test_a_later_preset_narrows_and_check_says_narrowed(place):
    done = policy_file(place, "extends: [ci, read-only]\n")
    assert "network.mode: narrowed by preset" in done.stdout and "widened" not in done.stdout


HEAD = "version: 1\nname: x\ndescription: d\nworkspace: {mode: bind}\n"
BAD_POLICIES = {
    "memory-unit": HEAD + "limits: {memory: 2GB}\n",
    "extends-path": HEAD + "extends: [./other.yaml]\n",
    "image-space": HEAD + "image: ubuntu latest\n",
    "allow-localhost": HEAD + "network: {mode: proxy, allow: [localhost]}\n",
    "allow-in-none": HEAD + "network: {mode: none, allow: [api.example.com]}\n",
    "timeout-huge": HEAD + "limits: {timeout: 100000h}\n",
    "secret-comment": HEAD + "# ghp_abcdefghijklmnopqrstu\n",
    "tab": HEAD + "\tcommand: [bash]\n",
    "null-source": HEAD + "mounts:\n  - {source: ~, target: /x}\n",
    "missing-source": HEAD + "mounts:\n  - {source: not-here, target: /x}\n",
    "unknown-key": HEAD + "limitz: {}\n",
    "capability-case": HEAD + "capabilities: [net_admin]\n",
    "capability-escape": HEAD + "capabilities: [SYS_ADMIN]\n",
    "reserved-target": HEAD + "tmpfs: [{target: /proc/x, size: 1m}]\n",
    "no-name": "version: 1\ndescription: d\n",
}
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}   # nothing can launch, whatever passes


def every_command(policy: str, ws: str) -> dict[str, list[str]]:
    return {"check": ["check", policy, "-w", ws], "explain": ["explain", policy, "-w", ws],
            "compile": ["compile", "--policy", policy, "-w", ws], "devcontainer": ["devcontainer", "--policy", policy, ws],
            "run": ["run", "--policy", policy, "-w", ws, "--", "true"], "up": ["up", "--policy", policy, ws]}


def verdicts(place, policy: str, ws: str = "ws") -> dict[str, int]:
    return {name: run(*argv, cwd=place, env=NO_ENGINE).exit_code for name, argv in every_command(policy, ws).items()}


@pytest.mark.parametrize("case", sorted(BAD_POLICIES))
def test_every_command_gives_a_bad_policy_the_same_verdict(case, place):
    """One validation path: what one command refuses, every command refuses, before any engine."""
    (place / "p.yaml").write_text(BAD_POLICIES[case])
    assert set(verdicts(place, "./p.yaml").values()) == {120}, case


def test_a_missing_workspace_is_refused_by_every_command(place):
    (place / "p.yaml").write_text(HEAD)
    assert set(verdicts(place, "./p.yaml", ws="nowhere").values()) == {120}


def test_the_control_passes_validation_everywhere(place):
    (place / "p.yaml").write_text(HEAD)
    os.chown(place / "ws", 1000, 1000)
    found = verdicts(place, "./p.yaml")
    assert found == {"check": 0, "explain": 0, "compile": 0, "devcontainer": 0, "run": 121, "up": 121}, found


@pytest.mark.parametrize("policy, command, code", [(HEAD, "run", 121), (BAD_POLICIES["unknown-key"], "run", 120),
                                                   (BAD_POLICIES["unknown-key"], "check", 120)],
                         ids=["control-run", "unknown-key-run", "unknown-key-check"])
def test_a_real_process_gives_the_same_verdict(policy, command, code, place):
    """The verdicts above, end to end: a refused policy and an engine that is not there."""
    (place / "p.yaml").write_text(policy)
    if policy == HEAD:
        os.chown(place / "ws", 1000, 1000)   # as the control above
    done = run_process(*every_command("./p.yaml", "ws")[command], cwd=place, env=NO_ENGINE)
    assert done.returncode == code, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_relative_paths_in_a_policy_are_relative_to_its_file(place, tmp_path_factory):
    (place / "policies").mkdir()
    (place / "data").mkdir()
    (place / "policies" / "p.yaml").write_text(HEAD + "mounts:\n  - {source: ../data, target: /data}\n")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    done = subprocess.run([*SANDBOX, "compile", "--policy", str(place / "policies" / "p.yaml"), "-w", str(place / "ws")],
                          capture_output=True, text=True, cwd=elsewhere, timeout=60)
    assert done.returncode == 0, done.stderr
    assert any(m["source"] == str(place / "data") for m in json.loads(done.stdout)["container"]["mounts"])


# Docker's rule for a container name, checked before the engine is asked anything (issue 44).
BAD_NAMES = ["a", "-lead", ".lead", "has space", "x/y", "é-accent", "a\x1b[31mred", "new\nline", "rtl\u202egnp"]


@pytest.mark.parametrize("command", ["run", "up"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_sandbox_name_is_refused_before_the_engine(command, name, place):
    argv = every_command("untrusted", "ws")[command]
    done = run(*argv[:1], "--name", name, *argv[1:], cwd=place, env=NO_ENGINE)   # 121 if it got as far as the engine
    assert done.exit_code == 2, done.stderr
    assert "Invalid value for '--name'" in done.stderr and "'_', '.' and '-'" in done.stderr
    assert f"found {name!r}" in done.stderr   # control characters escaped
    assert not any(c in done.stderr for c in "\x1b\u202e") and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["ok", "sandbox-my.repo_2", "A1"])
def test_a_good_sandbox_name_gets_as_far_as_the_engine(name, place):
    (place / "p.yaml").write_text(HEAD)
    os.chown(place / "ws", 1000, 1000)   # as the control above
    done = run("up", "--name", name, "--policy", "./p.yaml", "ws", cwd=place, env=NO_ENGINE)
    assert done.exit_code == 121 and "--name" not in done.stderr, done.stderr


def test_a_real_process_refuses_a_bad_sandbox_name(place):
    done = run_process("run", "--name", "a\x1b]0;title\x07", "-w", "ws", "--", "true", cwd=place, env=NO_ENGINE)
    assert done.returncode == 2 and r"found 'a\x1b]0;title\x07'" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("fmt", ["kubernetes", "agent-sandbox"])
@pytest.mark.parametrize("address", ["not an ip", "10.96.0.200\nevil: x", "fd00::1", "010.96.0.1", "10.96.0.256", ""])
def test_a_proxy_ip_that_is_no_ipv4_address_is_refused_and_nothing_written(fmt, address, place):
    state = {"XDG_STATE_HOME": str(place / "state")}
    done = run("compile", "-p", "ci", "-w", "ws", "--format", fmt, "--proxy-ip", address, cwd=place,
               env={**NO_ENGINE, **state})
    assert done.exit_code == 120 and not done.stdout, done.stderr
    assert "--proxy-ip: expected an IPv4 address (the proxy Service's ClusterIP" in done.stderr
    assert f"found {address!r}" in done.stderr and "\nevil" not in done.stderr
    assert not (place / "state").exists() and not list((place / "ws").iterdir())


def test_a_proxy_ip_goes_into_the_objects(place):
    done = run("compile", "-p", "ci", "-w", "ws", "--format", "kubernetes", "--proxy-ip", "10.100.0.9", cwd=place)
    assert done.exit_code == 0, done.stderr
    assert "clusterIP: 10.100.0.9\n" in done.stdout and "http://10.100.0.9:3128" in done.stdout
