"""Files for another tool are the same bytes for the same inputs (issue 26): every `compile`
format and `sandbox devcontainer`, each run twice in a fresh process with a different hash seed.
`sandbox run` keeps a unique name per launch; that is tested here too, on the compiled plan."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.pipeline import pipeline
from tests.test_secrets import TEST_CA

# Something of every kind that reaches the files: proxy networks and allow list, both kinds of
# secret, a CA file, an extra mount, passed and set variables, a capability.
POLICY = """\
version: 1
name: every-part
description: Something of every kind that reaches the files.
extends: [ci]
mounts:
  - {source: tools, target: /opt/tools}
network:
  mode: proxy
  allow: [pypi.org, "*.pythonhosted.org", "registry.npmjs.org:443", files.example.com]
secrets:
  - {name: model, env: MODEL_KEY, upstream: https://api.example.com, header: "Authorization: Bearer {value}"}
  - {name: other, file: key.txt, upstream: https://other.example.com, header: "X-Key: {value}"}
ca_certificates: [ca.pem]
env:
  pass: [LANG, TERM]
  set: {B: "2", A: "1", Z: "$literal"}
capabilities: [CHOWN]
"""


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "README").write_text("hello\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "key.txt").write_text("secret\n")
    (tmp_path / "ca.pem").write_text(TEST_CA)
    (tmp_path / "every.yaml").write_text(POLICY)
    # A Pod under the restricted profile reads no host path: the same without the mount and CA file.
    (tmp_path / "every-pod.yaml").write_text(POLICY.replace("  - {source: tools, target: /opt/tools}\n", "")
                                             .replace("mounts:", "mounts: []").replace("[ca.pem]", "[]"))
    return tmp_path


def _start(cwd, args: tuple[str, ...], seed: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": str(seed), "MODEL_KEY": "k", "LANG": "C.UTF-8", "TERM": "xterm"}
    return subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _output(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def _sandbox(cwd, *args: str, seed: int) -> str:
    return _output(_start(cwd, args, seed))


CASES = [(policy, fmt) for policy in ("untrusted", "every.yaml") for fmt in ("json", "argv", "compose")] + \
    [(policy, "kubernetes") for policy in ("untrusted", "every-pod.yaml")] + [("untrusted", "agent-sandbox")]


@pytest.mark.parametrize("policy,fmt", CASES)
def test_compile_gives_the_same_bytes_in_two_fresh_processes(setup, policy, fmt):
    args = ["compile", "--policy", policy, "-w", "ws", "--format", fmt, "--workspace-mode", "bind"]
    first, second = [_output(p) for p in [_start(setup, args, seed) for seed in (1, 2)]]   # at once: quicker
    assert first == second
    assert "owner-pid" not in first


def _devcontainer(setup, policy: str, seed: int) -> dict[str, bytes]:
    _sandbox(setup, "devcontainer", "--policy", policy, "--force", "ws", seed=seed)
    folder = setup / "ws" / ".devcontainer"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("policy", ["devcontainer", "every.yaml"])
def test_devcontainer_files_are_the_same_bytes_in_two_fresh_processes(setup, policy):
    first = _devcontainer(setup, policy, seed=3)
    assert first == _devcontainer(setup, policy, seed=4)
    assert not any(b"owner-pid" in text for text in first.values())


def test_the_name_follows_the_policy_and_the_workspace(setup, monkeypatch):
    monkeypatch.chdir(setup)
    (setup / "other").mkdir()
    options = pipeline.LayerOptions(workspace_mode="bind")

    def name(policy: str, workspace: str) -> str:
        return pipeline.plan(policy, workspace, options=options, launched=False).plan.container.name

    assert name("untrusted", "ws") == name("untrusted", str(setup / "ws"))
    assert len({name("untrusted", "ws"), name("untrusted", "other"), name("untrusted-gvisor", "ws")}) == 3


def test_a_launch_keeps_a_unique_name_and_its_owner(setup, monkeypatch):
    monkeypatch.chdir(setup)
    monkeypatch.setenv("MODEL_KEY", "k")
    options = pipeline.LayerOptions(workspace_mode="bind")
    names = {pipeline.plan("untrusted", "ws", options=options).plan.container.name for _ in range(2)}
    assert len(names) == 2
    labels = dict(pipeline.plan("untrusted", "ws", options=options).plan.container.labels)
    assert labels["dev.sandbox.owner-pid"] == str(os.getpid())


def test_compiling_writes_nothing_the_compile_commands_output_step_makes_what_the_files_bind(setup, monkeypatch):
    from click.testing import CliRunner

    from launcher.cli import main

    monkeypatch.chdir(setup)
    monkeypatch.setenv("MODEL_KEY", "k")
    state = setup / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    planned = pipeline.plan("every.yaml", "ws", options=pipeline.LayerOptions(workspace_mode="bind"), launched=False)
    assert not state.exists(), "compiling wrote into the state directory"
    named = {f.path for f in planned.files}
    assert set(planned.facts.ca_store) <= named and planned.facts.config_placeholder in named
    result = CliRunner().invoke(main, ["compile", "--policy", "every.yaml", "-w", "ws", "--format", "compose",
                                       "--workspace-mode", "bind"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert all(os.path.isfile(path) and os.stat(path).st_mode & 0o777 == 0o444 for path in named)


def test_check_and_explain_gather_and_compile_and_write_nothing(setup, monkeypatch):
    from click.testing import CliRunner

    from launcher.cli import main

    monkeypatch.chdir(setup)
    monkeypatch.setenv("MODEL_KEY", "k")
    state = setup / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    for args in (["check", "--policy", "every.yaml", "-w", "ws"], ["explain", "--policy", "every.yaml", "-w", "ws"]):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert not state.exists(), f"sandbox {args[0]} wrote into the state directory"


def test_the_workspace_is_resolved_once_and_every_later_stage_takes_it_from_the_stack(tmp_path):
    """A link swapped between the layers and the compile changes nothing: the plan binds what the
    layers were read from (issue 41: the workspace path resolved once)."""
    first, second = tmp_path / "first", tmp_path / "second"
    for ws in (first, second):
        ws.mkdir()
        os.chown(ws, 1000, 1000)
    link = tmp_path / "link"
    link.symlink_to(first)
    result = pipeline.layered("read-only", str(link))
    assert result.workspace == str(first)
    link.unlink()
    link.symlink_to(second)
    planned = pipeline.compiled(result, str(link), kind="external", launched=False)
    c = planned.plan.container
    assert next(m.source for m in c.mounts if m.target == c.working_dir) == str(first)
    assert planned.facts.workspace.real == str(first)
