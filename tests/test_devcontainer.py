"""`sandbox devcontainer`: devcontainer.json (+ Dockerfile, compose.yaml) from the effective policy,
and the real Dev Containers CLI bringing up a probed sandbox that cannot reach a denied host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from conftest import BIND, external_tool, fake_facts, untrusted_bind, preset
from launcher import images, launch
from launcher.targets import devcontainer
from launcher.compiler import compile_policy
from launcher.policy import with_allowed
from launcher.verify import parse_probe

SANDBOX = [sys.executable, "-m", "launcher"]
HOOKS = ("initializeCommand", "onCreateCommand", "updateContentCommand", "postCreateCommand", "postStartCommand",
         "postAttachCommand", "features", "forwardPorts", "appPort", "privileged", "capAdd", "securityOpt")


def test_none_mode_puts_every_protection_into_run_arguments_and_mounts():
    plan = compile_policy(untrusted_bind(), fake_facts(), kind="up")
    files = devcontainer.files(plan)
    config = json.loads(files["devcontainer.json"])
    assert set(files) == {"devcontainer.json", "Dockerfile"} and not set(HOOKS) & set(config)
    args = config["runArgs"]
    for flag in ("--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges", "--network=none",
                 "--pids-limit=256", "--user=1000:1000", "--memory=2147483648", "--memory-swap=2147483648"):
        assert flag in args
    assert config["workspaceMount"] == "type=bind,src=/home/dev/repo,dst=/workspace" and config["workspaceFolder"] == "/workspace"
    assert "type=tmpfs,dst=/workspace/.git,readonly,tmpfs-size=4096" in config["mounts"]
    assert "type=volume,src=sandbox-probe-test,dst=/.sandbox/probe,readonly" in config["mounts"]
    # the writable tmpfs are the agent's (the Mount API, so "mounts", cannot set an owner)
    assert "--tmpfs=/home/agent:rw,size=536870912,uid=1000,gid=1000,mode=0700" in args
    assert "--tmpfs=/tmp:rw,size=268435456,uid=1000,gid=1000,mode=0700" in args
    assert not any("dst=/home/agent" in m or "dst=/tmp," in m for m in config["mounts"])
    assert config["overrideCommand"] is False and config["updateRemoteUserUID"] is False
    assert config["containerEnv"] == dict(plan.container.env)
    assert 'ENTRYPOINT ["/.sandbox/probe/busybox", "sh", "/.sandbox/probe/probe.sh"]' in files["Dockerfile"]
    assert json.dumps(list(plan.container.command)) in files["Dockerfile"]   # probe expectations, then sleep


def test_proxy_mode_uses_compose_with_the_proxy_and_builds_the_probe_image():
    plan = compile_policy(preset("devcontainer"), fake_facts(), kind="up")
    files = devcontainer.files(plan)
    config, compose = json.loads(files["devcontainer.json"]), yaml.safe_load(files["compose.yaml"])
    assert config["dockerComposeFile"] == ["compose.yaml"] and config["service"] == "sandbox"
    assert config["runServices"] == ["proxy", "sandbox"] and not set(HOOKS) & set(config)
    assert compose["services"]["sandbox"]["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert compose["services"]["proxy"]["networks"]["internal"]["aliases"] == ["sandbox-proxy"]


def test_the_command_writes_the_files_and_never_overwrites_without_force(tmp_path):
    ws = tmp_path / "repo"
    ws.mkdir()
    first = subprocess.run(SANDBOX + ["devcontainer", "-p", "untrusted", *BIND, str(ws)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert json.loads((ws / ".devcontainer" / "devcontainer.json").read_text())["name"] == "sandbox: untrusted"
    again = subprocess.run(SANDBOX + ["devcontainer", "-p", "untrusted", *BIND, str(ws)], capture_output=True, text=True)
    assert again.returncode == 120 and "--force" in again.stderr
    forced = subprocess.run(SANDBOX + ["devcontainer", "-p", "untrusted", *BIND, "--force", str(ws)], capture_output=True, text=True)
    assert forced.returncode == 0


@pytest.fixture
def cli():
    return external_tool("devcontainer", "npm install -g @devcontainers/cli")


@pytest.mark.engine
def test_devcontainer_up_with_the_real_cli_yields_a_probed_sandbox_that_cannot_reach_a_denied_host(engine, cli, workspace):
    from launcher.selftest.testnet import Internet

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    internet = Internet(engine, f"sandbox-test-devcontainer-{os.getpid()}")
    policy = with_allowed(preset("devcontainer"), ({"host": "allowed.test", "private": True},))
    name = f"sandbox-{workspace.name}"
    try:
        made = subprocess.run(SANDBOX + ["devcontainer", "-p", "devcontainer", "--allow-private", "allowed.test",
                                         "--egress-network", internet.network, str(workspace)], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        up = subprocess.run([cli, "up", "--workspace-folder", str(workspace)], capture_output=True, text=True, timeout=600)
        assert json.loads(up.stdout.strip().splitlines()[-1])["outcome"] == "success", up.stderr[-3000:]
        deadline = time.monotonic() + 60   # `devcontainer up` may return before the probe has finished
        while "PROBE-END" not in engine.logs(name) and time.monotonic() < deadline:
            time.sleep(0.2)
        report = parse_probe(engine.logs(name).splitlines())
        assert report.ok and {"egress.denied", "egress.direct", "fs.protected", "env.secrets",
                              "home.private"} <= {c.id for c in report.checks}
        script = ('echo "denied=$(curl -s -o /dev/null -w %{http_code} -m 10 http://denied.test/)"; '
                  'echo "allowed=$(curl -s -m 10 http://allowed.test/)"; '
                  'curl -s -m 3 --noproxy "*" http://denied.test/ && echo DIRECT-OK; id -u; touch .git/hooks/x || echo RO; '
                  'mkdir -p ~/.claude && touch ~/.claude.json && echo "home=$HOME:$(stat -c %u:%a ~)"; '
                  'touch /home/x 2>/dev/null && echo HOME-PARENT-WRITABLE')
        inside = subprocess.run([cli, "exec", "--workspace-folder", str(workspace), "bash", "-c", script],
                                capture_output=True, text=True, timeout=120)
        assert "denied=403" in inside.stdout and "allowed=upstream allowed.test 80" in inside.stdout, inside.stderr
        assert "DIRECT-OK" not in inside.stdout and "RO" in inside.stdout.split() and "1000" in inside.stdout.split()
        assert "home=/home/agent:1000:700" in inside.stdout.split() and "HOME-PARENT-WRITABLE" not in inside.stdout
        assert internet.seen_by_canary() == []
        assert policy.network.mode.value == "proxy"
    finally:
        launch.remove_sandbox(engine, name)
        internet.close()
        subprocess.run(["docker", "image", "rm", "-f", f"{workspace.name}_devcontainer_sandbox"], capture_output=True)
    label = f"dev.sandbox.workspace={os.path.realpath(workspace)}"
    assert engine.list(label) == [] and engine.list_networks(label) == []
