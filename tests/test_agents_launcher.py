"""The real CLIs through today's launcher: `sandbox run` with a proxy-mode policy whose secrets entry
injects the model key, the CLI's agent image, and HOME moved to the writable /tmp (as before the
launcher had an agent home; `--agent` below uses it). The probe passes, the stand-in model API (upstream api.test) sees
the real key from the proxy while the sandbox holds only a placeholder, and the marker appears. Keys go
the profile's way that passes the probe's env.secrets check (a home file or a harmless name). aider
and opencode open their missing, protected config files: those are read-only files holding {}."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
import sys
import time
import uuid

import pytest

from conftest import owned_workspace, read_until
from launcher import agents
from launcher.engine import images

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SANDBOX = [sys.executable, "-m", "launcher"]
UPSTREAM = "api.test"
EXTRA_ARGS = {"aider": ["--edit-format", "whole", "--no-git"]}


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def upstream(engine):
    """The stand-in model API as api.test on an internal network the proxy joins (--egress-network)."""
    from conftest import model_api_network

    images.build(engine, images.model_api_image(), lambda line: None)
    key = "real-" + uuid.uuid4().hex
    network = f"sandbox-test-agents-launcher-{os.getpid()}"
    with model_api_network(network, UPSTREAM, "dev.sandbox.test=agents-launcher", key) as (log, reset):
        yield network, key, log, reset


def policy(profile: agents.AgentProfile, tag: str, static_env: dict[str, str]) -> dict:
    header = profile.model.header
    return {"version": 1, "name": f"{profile.name}-real", "description": f"The real {profile.name} CLI, its key injected by the proxy.",
            "image": tag, "workspace": {"target": "/workspace", "access": "read-write"},
            "tmpfs": [{"target": "/tmp", "size": "512m"}], "network": {"mode": "proxy", "allow": []},
            "secrets": [{"name": profile.model.secret, "env": "MODEL_KEY", "upstream": f"http://{UPSTREAM}", "header": header}],
            "env": {"pass": ["LANG"], "set": {"CI": "true", "HOME": "/tmp/home", **static_env}},
            "limits": {"pids": 512, "memory": "4g", "cpus": 2, "timeout": "10m"}, "user": "auto", "command": ["bash"]}


def command(profile: agents.AgentProfile, key_in_file: bool) -> tuple[dict[str, str], list[str]]:
    """(env.set, the sandbox's command): values naming the endpoint and the home files are made by a
    small sh wrapper at run time, from $SANDBOX_ENDPOINT_MODEL; the CLI itself runs unchanged."""
    endpoint = "$" + profile.endpoint_var()
    env = profile.environment(endpoint, key_in_file)
    static = {k: v for k, v in env.items() if endpoint not in v}
    script = "".join(f"export {k}={shlex.quote(v)}; ".replace(endpoint, "'\"" + endpoint + "\"'")
                     for k, v in env.items() if endpoint in v)
    for path, text in profile.home_files(endpoint, key_in_file).items():
        script += (f'mkdir -p "$HOME/$(dirname {path})"; printf %s {shlex.quote(text)} > "$HOME/{path}"; '
                   .replace(endpoint, "'\"" + endpoint + "\"'"))
    at = profile.headless.index("{task}")
    at -= profile.headless[at - 1].startswith("-")
    argv = [*profile.headless[:at], *EXTRA_ARGS.get(profile.name, []), *profile.headless[at:]]
    argv = [a.replace("{task}", "Create the marker file.").replace("openai/MODEL", "openai/stand-in") for a in argv]
    return static, ["sh", "-c", script + "exec " + shlex.join(argv)]


@pytest.mark.parametrize("name, key_in_file", [
    ("claude-code", True), ("codex", False), ("gemini-cli", True), ("opencode", False), ("aider", True),
])
def test_real_cli_through_the_launcher_gets_the_key_from_the_proxy(name, key_in_file, engine, upstream, tmp_path):
    network, key, log, reset = upstream
    profile = agents.get(name)
    image = images.build_agent(engine, profile.image, lambda line: None, images.extra_ca_files())
    workspace = owned_workspace(tmp_path)
    static, argv = command(profile, key_in_file)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(json.dumps(policy(profile, image.tag, static)))   # JSON is YAML
    report = tmp_path / "report.json"
    reset()

    done = subprocess.run([*SANDBOX, "run", "--policy", str(policy_file), "--egress-network", network,
                           "--report", str(report), "-w", str(workspace), "--", *argv],
                          env={**os.environ, "MODEL_KEY": key}, capture_output=True, text=True, timeout=300)

    said = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, said
    data = json.loads(report.read_text())
    assert data["probe"]["ok"] and data["agent"]["exit_code"] == 0
    marker = workspace / f"marker-{name}.txt"
    assert marker.is_file() and marker.stat().st_uid == 1000, said
    header, _, template = profile.model.header.partition(": ")
    api = [r for r in log() if r["method"] == "POST"]
    assert api and all(r["headers"].get(header.lower()) == template.format(value=key) for r in api), said
    assert all(agents.PLACEHOLDER_KEY not in json.dumps(r["headers"]) for r in api)   # the proxy dropped it
    assert key not in report.read_text() and key not in said
    # The hosts the profile says it still tries are the ones the proxy blocked, and nothing else.
    assert ("egress: nothing was blocked" in done.stderr) == (not profile.blocked), said
    assert all(fnmatch.filter(done.stderr.split(), f"{p}:443") for p in profile.blocked), said
    # Learn mode turns what was refused into entries: exactly the hosts the profile says it tries.
    learned = subprocess.run([*SANDBOX, "logs", "--egress", "--suggest", "--report", str(report)], capture_output=True,
                             text=True, timeout=60)
    entries = [line.split("- ", 1)[1] for line in learned.stdout.splitlines() if line.startswith("    - ")]
    assert learned.returncode == 0 and len(entries) == len(profile.blocked), learned.stdout
    assert all(fnmatch.filter(entries, p) for p in profile.blocked), learned.stdout


@pytest.mark.parametrize("preset", ["ci", "devcontainer"])
@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_agent_flag_runs_the_real_cli_with_its_key_injected(name, preset, engine, upstream, tmp_path):
    """`--agent NAME --model-key-env VAR`: the profile's image, variables and home files, the key
    only in the proxy; the CLI's own exit code; the marker in the host workspace, the owner's."""
    network, key, log, reset = upstream
    profile = agents.get(name)
    workspace = owned_workspace(tmp_path)
    task = [a.replace("{task}", "Create the marker file.") for a in profile.headless]
    reset()
    done = subprocess.run([*SANDBOX, "run", "--policy", preset, "--agent", name, "--model-key-env", "MODEL_KEY",
                           "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network,
                           "--json", "-w", str(workspace), "--", *task],
                          env={**os.environ, "MODEL_KEY": key}, capture_output=True, text=True, timeout=600)
    said = done.stdout[-2000:] + done.stderr[-3000:]
    assert done.returncode == 0, said
    marker = workspace / f"marker-{name}.txt"
    assert marker.is_file() and marker.stat().st_uid == 1000, said
    header, _, template = profile.model.header.partition(": ")
    api = [r for r in log() if r["method"] == "POST"]
    assert api and all(r["headers"].get(header.lower()) == template.format(value=key) for r in api), said
    assert key not in done.stdout and key not in done.stderr
    report = json.loads(done.stdout)
    assert report["probe"]["ok"] and report["agent"]["exit_code"] == 0
    assert any(c["id"] == "home.private" and c["ok"] for c in report["probe"]["checks"])


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_in_the_default_preset_a_key_reaches_the_model_api_alone_and_the_work_lands_in_a_copy(
        name, engine, upstream, tmp_path):
    """`sandbox run --agent NAME --model-key-env VAR` with no --policy: untrusted, on a copy, proxy mode
    for the model endpoint alone (probed as proxy mode); the marker reaches the host tree only by
    `sandbox apply`; the key reaches only the stand-in."""
    network, key, log, reset = upstream
    profile = agents.get(name)
    workspace = owned_workspace(tmp_path)
    (workspace / "README.md").write_text("x\n")
    os.chown(workspace / "README.md", 1000, 1000)
    copy = f"sandbox-test-model-api-{name}-{os.getpid()}"
    task = [a.replace("{task}", "Create the marker file.") for a in profile.headless]
    reset()
    try:
        done = subprocess.run([*SANDBOX, "run", "--agent", name, "--model-key-env", "MODEL_KEY", "--name", copy,
                               "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network,
                               "--json", "-w", str(workspace), "--", *task],
                              env={**os.environ, "MODEL_KEY": key}, capture_output=True, text=True, timeout=600)
        said = done.stdout[-2000:] + done.stderr[-3000:]
        assert done.returncode == 0, said
        report = json.loads(done.stdout)
        checks = {c["id"]: c["ok"] for c in report["probe"]["checks"]}
        assert report["policy"]["name"] == "untrusted" and report["probe"]["ok"], said
        assert checks["egress.direct"] and checks["egress.proxy"] and checks["env.secrets"], said
        header, _, template = profile.model.header.partition(": ")
        api = [r for r in log() if r["method"] == "POST"]
        assert api and all(r["headers"].get(header.lower()) == template.format(value=key) for r in api), said
        assert key not in done.stdout + done.stderr
        marker = f"marker-{name}.txt"
        assert not (workspace / marker).exists()      # a copy: nothing reached the host tree yet
        applied = subprocess.run([*SANDBOX, "apply", copy], capture_output=True, text=True, timeout=300)
        assert applied.returncode == 0, applied.stderr[-2000:]
        assert (workspace / marker).is_file()
    finally:
        subprocess.run([*SANDBOX, "discard", "--yes", copy], capture_output=True, timeout=120)


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_the_github_workflow_runs_a_real_cli_headless_step_by_step(name, engine, upstream, tmp_path):
    """examples/ci/github-actions.yml's real-CLI step, as the runner would run it (bash -e), with
    `sandbox` this checkout's launcher and the stand-in model API as the internet."""
    from test_ci_example import checkout, step

    network, key, log, reset = upstream
    repo = checkout(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "sandbox"
    shim.write_text(f'#!/bin/sh\nif [ "$1" = run ]; then shift; set -- run --egress-network {network} '
                    f'--model-upstream http://{UPSTREAM} "$@"; fi\n'
                    f'PYTHONPATH={os.path.dirname(os.path.dirname(__file__))} exec {sys.executable} -m launcher "$@"\n')
    shim.chmod(0o755)
    reset()
    runner_temp = tmp_path / "runner-temp"       # $RUNNER_TEMP: outside the checkout, where the key goes
    runner_temp.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MODEL_API_KEY": key, "AGENT": name,
           "TASK": "Create the marker file.", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "RUNNER_TEMP": str(runner_temp)}
    said = []
    for name_of_step in ("Prepare the signing key", "Run a real agent CLI in a sandbox", "Verify the record"):
        done = subprocess.run(["bash", "-e", "-c", step(name_of_step)], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, name_of_step + ": " + done.stdout + done.stderr[-3000:]
        said += [done.stdout, done.stderr]
    assert "agent succeeded" in said[2], said[2]   # the run step's stdout
    assert (repo / f"marker-{name}.txt").is_file()
    report = json.loads((repo / "sandbox-report.json").read_text())
    assert report["status"] == "ok" and report["agent"]["exit_code"] == 0
    header, _, template = agents.get(name).model.header.partition(": ")
    assert any(r["headers"].get(header.lower()) == template.format(value=key) for r in log() if r["method"] == "POST")
    for text in (*said, (tmp_path / "summary.md").read_text(), (repo / "sandbox-report.json").read_text()):
        assert key not in text


def test_up_with_the_agent_flag_opens_claudes_tui_where_a_task_gets_done(engine, upstream, tmp_path):
    """`sandbox up --agent claude-code --model-key-env VAR` in the default preset, through a pty: the
    terminal is the CLI's own TUI (its interactive form, behind the wrapper that gives it its home
    files and endpoint), started without a dialog; a typed task gets done in the copy, the key only
    in the proxy. Leaving it leaves the sandbox, and `up` with no option attaches with the stored ones."""
    from conftest import claude_tui_task, up_in_a_pty

    network, key, log, reset = upstream
    workspace = owned_workspace(tmp_path)
    name = f"sandbox-test-up-agent-{os.getpid()}"
    reset()
    command = [*SANDBOX, "up", "--agent", "claude-code", "--model-key-env", "MODEL_KEY",
               "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network, "--name", name, str(workspace)]
    try:
        def marked() -> bool:   # in the copy: the host tree gets it only by `sandbox apply`
            return subprocess.run(["docker", "exec", name, "test", "-f", "/workspace/marker-claude-code.txt"]).returncode == 0

        with up_in_a_pty(command, {"MODEL_KEY": key}) as (fd, shown):
            shown = claude_tui_task(fd, workspace, shown, marked, started=True)
            assert b"opening claude-code's CLI in " + name.encode() in shown, shown[-3000:]
            assert not (workspace / "marker-claude-code.txt").exists()
            assert any(r["headers"].get("x-api-key") == key for r in log() if r["method"] == "POST")
            inspect = subprocess.run(["docker", "inspect", name], capture_output=True, text=True).stdout
            environ = subprocess.run(["docker", "exec", name, "sh", "-c", "cat /proc/*/environ; cat ~/.claude.json "
                                      "~/.claude/settings.json"], capture_output=True, text=True).stdout
            assert key not in inspect and key not in environ and key not in shown.decode(errors="replace")
            # Leave it as a user does: while Claude's TUI runs it holds a socket in /tmp (/tmp/cc-socks/N.sock),
            # which a re-probe refuses (sockets.mounts); /exit removes it.
            os.write(fd, b"/exit")
            time.sleep(1)
            os.write(fd, b"\r")
            shown += read_until(fd, b"\x00never", 5)
        again = subprocess.run([*SANDBOX, "up", "--no-shell", "--json", "--name", name], capture_output=True, text=True,
                               timeout=300, env={**os.environ, "MODEL_KEY": key})   # from elsewhere: by its name
        assert again.returncode == 0 and "probe passed again" in again.stderr, again.stderr
        attached = json.loads(again.stdout)
        assert attached["reused"] and attached["options"]["agent"] == "claude-code", attached
        assert attached["options"]["key_env"] == "MODEL_KEY" and key not in again.stdout + again.stderr
    finally:
        subprocess.run([*SANDBOX, "down", name], capture_output=True, timeout=120)
        subprocess.run([*SANDBOX, "discard", "--yes", name], capture_output=True, timeout=120)


def test_in_untrusted_the_real_cli_has_no_network_and_says_so(engine, tmp_path):
    """The default preset: copy mode, no network. Claude Code starts, has no model to reach and says
    so; its own exit code comes back, and neither the copy nor the host tree changed."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("x\n")
    name = f"sandbox-test-untrusted-agent-{os.getpid()}"
    try:
        done = subprocess.run([*SANDBOX, "run", "--agent", "claude-code", "--name", name, "-w", str(workspace), "--",
                               "claude", "-p", "Create the marker file.", "--dangerously-skip-permissions"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and "Not logged in" in done.stdout + done.stderr, done.stderr[-2000:]
        assert "probe passed" in done.stderr and "no model key for claude-code" in done.stderr
        assert f"no changes: copy {name} dropped" in done.stderr
        assert sorted(os.listdir(workspace)) == ["README.md"]
    finally:
        subprocess.run([*SANDBOX, "discard", "--yes", name], capture_output=True, timeout=120)

