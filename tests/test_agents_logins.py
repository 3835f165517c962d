"""Subscription logins brokered by the proxy, with the real CLIs: `sandbox run --agent NAME
--model-key-env VAR` where VAR holds a subscription's token. The stand-in model API (api.test on
--egress-network) accepts only the real token in exactly the header the real API wants; the sandbox
holds a placeholder login. After the CLI's tool call, the sandbox's environment and every file of its
home, workspace and /tmp are printed (from inside) and searched here: the token is in none of them,
nor in anything the launcher printed or reported."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from launcher import agents, images

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SANDBOX = [sys.executable, "-m", "launcher"]
UPSTREAM = "api.test"
# After the CLI: what the sandbox holds, printed for the test to search (the CLI's exit code kept).
DUMP = ('rc=$?; echo "== environment"; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"; '
        'echo "== files"; find "$HOME" /workspace /tmp -type f -size -4096k -exec cat {} + 2>/dev/null; exit $rc')


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=check)


@contextlib.contextmanager
def stand_in(expected: str, extra_env: dict[str, str] | None = None):
    """The stand-in model API as api.test on an internal network of its own, accepting only `expected`."""
    network = f"sandbox-test-logins-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    docker("network", "create", "--internal", "--label", "dev.sandbox.test=logins",
           "-o", "com.docker.network.bridge.inhibit_ipv4=true", network)
    name = f"{network}-model-api"
    env = [f"--env={k}={v}" for k, v in {"MODEL_API_EXPECTED_KEY": expected, **(extra_env or {})}.items()]
    try:
        docker("run", "-d", "--name", name, "--network", network, "--network-alias", UPSTREAM, *env,
               images.model_api_image().tag)
        deadline = time.monotonic() + 30
        while "READY" not in docker("logs", name).stdout and time.monotonic() < deadline:
            time.sleep(0.2)

        def log() -> list[dict]:
            out = docker("exec", name, "cat", "/tmp/requests.jsonl", check=False).stdout
            return [json.loads(line) for line in out.splitlines()]

        yield network, log
    finally:
        docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)


@pytest.fixture(scope="module")
def model_api_image(engine):
    images.build(engine, images.model_api_image(), lambda line: None)


def run_agent(name: str, network: str, workspace, report, env: dict[str, str], *flags: str) -> tuple[int, str]:
    profile = agents.get(name)
    task = " ".join(__import__("shlex").quote(a.replace("{task}", "Create the marker file.")) for a in profile.headless)
    done = subprocess.run([*SANDBOX, "run", "--policy", "ci", "--agent", name, *flags,
                           "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network,
                           "--report", str(report), "-w", str(workspace), "--", "sh", "-c", f"{task}; {DUMP}"],
                          env={**os.environ, **env}, capture_output=True, timeout=600)
    return done.returncode, done.stdout.decode(errors="replace") + "\n" + done.stderr.decode(errors="replace")


def workspace_for(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    return workspace


def test_claude_code_with_a_setup_token_signs_in_as_a_subscriber_through_the_proxy(engine, model_api_image, tmp_path):
    """An sk-ant-oat01-… token (`claude setup-token`) is recognised by its shape: upstream it is
    Authorization: Bearer with Claude's own oauth beta header, never x-api-key; inside, the CLI
    holds a placeholder login (~/.claude/.credentials.json) and no secret-shaped variable."""
    token = "sk-ant-oat01-" + uuid.uuid4().hex
    workspace = workspace_for(tmp_path)
    report = tmp_path / "report.json"
    with stand_in(token) as (network, log):
        rc, said = run_agent("claude-code", network, workspace, report, {"CLAUDE_CODE_OAUTH_TOKEN": token},
                             "--model-key-env", "CLAUDE_CODE_OAUTH_TOKEN")
        requests = log()
    assert rc == 0, said[-4000:]
    assert (workspace / "marker-claude-code.txt").is_file(), said[-4000:]
    api = [r for r in requests if r["method"] == "POST"]
    assert len(api) >= 2 and all(r["status"] == 200 for r in api), said[-4000:]
    for r in api:
        assert r["headers"].get("authorization") == f"Bearer {token}"
        assert "x-api-key" not in r["headers"]
        assert "oauth-2025-04-20" in r["headers"].get("anthropic-beta", "").split(",")
    assert [r for r in requests if r["method"] == "CONNECT"] == []   # no profile fetch, nothing else tried
    assert "== environment" in said and "== files" in said and "claudeAiOauth" in said   # the dump ran
    assert agents.PLACEHOLDER_KEY in said   # the placeholder login is what the sandbox holds ...
    assert token not in said   # ... and the token is in no variable, file or line printed
    assert token not in report.read_text() and json.loads(report.read_text())["probe"]["ok"]


def test_claude_code_an_api_key_still_goes_as_x_api_key(engine, model_api_image, tmp_path):
    """The other kind, said explicitly: the same variable holding an API key, --model-key-kind api-key."""
    key = "sk-ant-api03-" + uuid.uuid4().hex
    workspace = workspace_for(tmp_path)
    with stand_in(key) as (network, log):
        rc, said = run_agent("claude-code", network, workspace, tmp_path / "report.json", {"MODEL_KEY": key},
                             "--model-key-env", "MODEL_KEY", "--model-key-kind", "api-key")
        api = [r for r in log() if r["method"] == "POST"]
    assert rc == 0, said[-4000:]
    assert api and all(r["headers"].get("x-api-key") == key and "authorization" not in r["headers"] for r in api)
    assert key not in said
