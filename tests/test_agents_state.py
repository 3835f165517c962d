"""The agent's own state across runs (issue 25 part 6): with `home: {mode: volume}` the real Claude
Code and Codex CLIs continue their last session in a new sandbox on the same workspace (the profile's
`resume` command), through `sandbox run` and through `sandbox up` after `down`. The stand-in model
API (upstream api.test, key injected by the proxy) records each request: the resumed run's first one
carries the first session's prompt and tool call, and its own tool call lands in the workspace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from launcher import agents
from launcher.launch import home
from conftest import owned_workspace
from test_agents_launcher import UPSTREAM, upstream  # noqa: F401  (the stand-in fixture)

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SANDBOX = [sys.executable, "-m", "launcher"]
# ci (proxy mode, bind workspace at /workspace) with the home kept per workspace and agent.
POLICY = "version: 1\nname: agentstate\ndescription: d\nextends: [ci]\nhome: {mode: volume}\n"


def sandbox(*args: str, key: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*SANDBOX, *args], env={**os.environ, "MODEL_KEY": key}, capture_output=True, text=True,
                          timeout=timeout)


def task(argv: tuple[str, ...], text: str) -> list[str]:
    return [a.replace("{task}", text) for a in argv]


@pytest.mark.parametrize("how", ["run", "up"])
@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_the_next_sandbox_on_the_workspace_continues_the_cli_session(name, how, engine, upstream, tmp_path):  # noqa: F811
    network, key, log, reset = upstream
    profile = agents.get(name)
    workspace = owned_workspace(tmp_path)
    policy = tmp_path / "agentstate.yaml"
    policy.write_text(POLICY)
    common = ["--policy", str(policy), "--agent", name, "--model-key-env", "MODEL_KEY",
              "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network]
    box = f"sandbox-test-agentstate-{name}-{os.getpid()}"
    exports = int(any(agents.ENDPOINT in v for v in profile.model.env.values()))   # Claude's base URL
    token = f"session-{uuid.uuid4().hex[:12]}"   # only the first session's prompt holds it

    def session(argv: list[str]) -> subprocess.CompletedProcess:
        """One sandbox on the workspace, the CLI run once in it: `run`, or `up`, exec (through the
        shell's ~/.bashrc, where `up` puts the endpoint variables) and `down`."""
        if how == "run":
            return sandbox("run", *common, "-w", str(workspace), "--", *argv, key=key)
        started = sandbox("up", *common, "--name", box, "--no-shell", str(workspace), key=key)
        assert started.returncode == 0, started.stderr[-3000:]
        try:
            done = sandbox("exec", box, "--", "bash", "-c", '[ ! -f ~/.bashrc ] || . ~/.bashrc; exec "$@"', "-", *argv,
                           key=key)
            lines = sandbox("exec", box, "--", "sh", "-c", "cat ~/.bashrc 2>/dev/null | grep -c SANDBOX_ENDPOINT", key=key)
            assert lines.stdout.split() == [str(exports)], lines   # a kept home gets them once, not once per up
        finally:
            assert sandbox("down", box, key=key).returncode == 0
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, started.stderr + done.stderr)

    try:
        reset()
        first = session(task(profile.headless, f"Create the marker file ({token})."))
        said = first.stdout[-2000:] + first.stderr[-3000:]
        made = re.search(r"created the home volume (\S+):", first.stderr)
        assert first.returncode == 0 and made and made.group(1).endswith(f"-{name}"), said   # per trust key and profile
        volume = made.group(1)
        assert (workspace / f"marker-{name}.txt").read_text() == "done\n", said
        reset()
        second = session(task(profile.resume, "Go on."))
        said = second.stdout[-2000:] + second.stderr[-3000:]
        assert second.returncode == 0 and f"using the home volume {volume}" in second.stderr, said
        api = [r for r in log() if r["method"] == "POST" and r["answer"] != "text"]
        assert [r["answer"] for r in api] == ["continued", "final"], said
        # The resumed session's first request resends the first one: its prompt, the tool call, the result.
        sent = json.dumps(api[0]["body"])
        assert token in sent and f"echo done > marker-{name}.txt" in sent and "Go on." in sent, sent[-2000:]
        # Its own tool call ran with the headless run's permissions, in the same workspace.
        assert (workspace / f"marker-{name}.txt").read_text() == "done\ncontinued\n", said
        assert key not in second.stdout + second.stderr
    finally:
        if how == "up":
            sandbox("down", box, key=key)
        home.remove_unused(engine, os.path.realpath(workspace))
