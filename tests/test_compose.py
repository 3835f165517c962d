"""`sandbox compile --format compose`: the same containers as `sandbox run`, brought up by Debian's
docker-compose; the probe passes inside and `docker inspect` agrees with the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

from pathlib import Path

import pytest
import yaml

import launcher

from conftest import docker_sdk, external_tool, fake_facts, preset, untrusted_bind
from launcher.engine import images
from launcher.engine.verify import compare_inspect, parse_probe
from launcher.host import hostfacts, workspaces
from launcher.launch import sandboxes
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import unwatched
from launcher.policy.policy import parse_policy, with_allowed
from launcher.targets.compose import compose_text, to_compose
from launcher.targets.portable import WSROOT_ENV, probe_start, without_host
from test_secrets_engine import model_api  # noqa: F401 - the recorder upstream fixture

SANDBOX = [sys.executable, "-m", "launcher"]


def test_compose_for_none_mode_uses_no_network_and_the_probe_volume():
    plan = compile_policy(untrusted_bind(), fake_facts())
    doc = yaml.safe_load(compose_text(plan))
    sandbox = doc["services"]["sandbox"]
    assert doc["version"] == "2.4" and list(doc["services"]) == ["sandbox"]
    assert sandbox["network_mode"] == "none" and sandbox["read_only"] and sandbox["cap_drop"] == ["ALL"]
    entrypoint, command = probe_start(unwatched(plan))   # gate=-: compose starts it
    assert sandbox["entrypoint"] == [a.replace("$", "$$") for a in entrypoint] and sandbox["command"] == command
    # no host path: the workspace is the project directory, the probe's wsroot its $PWD
    assert sandbox["environment"]["SANDBOX_WSROOT"] == "${PWD}" == sandbox["labels"]["dev.sandbox.workspace"]
    assert {"type": "bind", "target": "/workspace", "read_only": False, "source": "."} in sandbox["volumes"]
    assert "/home/dev" not in compose_text(plan)
    assert doc["volumes"]["sandbox-probe"] == {"external": True, "name": "sandbox-probe-test"}
    assert {"type": "tmpfs", "target": "/workspace/.git", "read_only": True, "tmpfs": {"size": 4096}} in sandbox["volumes"]
    # compose's short tmpfs syntax carries the owner and mode the long one cannot
    assert sandbox["tmpfs"] == ["/tmp:rw,size=268435456,uid=1000,gid=1000,mode=0700",
                                "/home/agent:rw,size=536870912,uid=1000,gid=1000,mode=0700"]
    assert not any(v["target"] in ("/tmp", "/home/agent") for v in sandbox["volumes"])


def test_compose_for_proxy_mode_has_proxy_networks_and_secret_sources_but_no_values(monkeypatch):
    monkeypatch.setenv("MODEL_API_KEY", "never-in-the-file")
    policy = parse_policy(b"""version: 1
name: c
description: c
network: {mode: proxy, allow: [api.example.com]}
env: {set: {PRICE: "$5"}}
secrets:
  - {name: model, env: MODEL_API_KEY, upstream: "https://api.example.com", header: "x-api-key: {value}"}
  - {name: search, file: /srv/keys/search, upstream: "https://search.example.com", header: "x-api-key: {value}"}
""", "c.yaml")
    text = compose_text(compile_policy(policy, fake_facts()))
    doc = yaml.safe_load(text)
    proxy, sandbox = doc["services"]["proxy"], doc["services"]["sandbox"]
    assert "never-in-the-file" not in text
    assert proxy["environment"]["SANDBOX_SECRET_0"] == "${MODEL_API_KEY:?secret model: set MODEL_API_KEY}"
    assert proxy["environment"]["SANDBOX_SECRET_1_FILE"] == "/run/sandbox-secrets/search"
    assert proxy["networks"]["internal"]["aliases"] == ["sandbox-proxy"] and proxy["read_only"]
    assert sandbox["networks"] == ["internal"] and sandbox["dns"] == ["127.0.0.1"]
    assert sandbox["environment"]["PRICE"] == "$$5"          # literal, not interpolated by compose
    assert doc["networks"]["internal"]["internal"] is True
    assert doc["networks"]["internal"]["driver_opts"] == {"com.docker.network.bridge.inhibit_ipv4": "true",
                                                          "com.docker.network.driver.mtu": "65000"}


def test_the_cli_prints_compose():
    result = subprocess.run(SANDBOX + ["compile", "-p", "read-only", "-w", ".", "--format", "compose"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["services"]["sandbox"]["network_mode"] == "none"


def test_a_gvisor_compose_file_names_a_copy_of_the_profile_in_the_state_directory_by_home(tmp_path):
    """Not the launcher's package (a path of this machine's install): the copy, as ${HOME}/..., which
    compose interpolates from any directory (it reads a seccomp file from its own working directory)."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")} | {"HOME": str(home)}
    lines = []
    for ws in (tmp_path / "a", tmp_path / "b" / "c"):
        ws.mkdir(parents=True)
        done = subprocess.run(SANDBOX + ["compile", "-p", "untrusted-gvisor", "--workspace-mode", "bind", "-w", str(ws),
                                         "--format", "compose"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        lines.append(yaml.safe_load(done.stdout)["services"]["sandbox"]["security_opt"])
    assert lines[0] == lines[1] and lines[0][0] == "no-new-privileges"
    named = lines[0][1].removeprefix("seccomp=")
    assert named.startswith("${HOME}/") and named.endswith("-gvisor.json")
    copy = home / named.removeprefix("${HOME}/")
    assert copy.read_text() == (Path(launcher.__file__).parent / "plan" / "gvisor-seccomp.json").read_text()


def test_a_gvisor_dev_container_in_proxy_mode_is_refused_with_what_works(tmp_path):
    own = tmp_path / "p.yaml"
    own.write_text("version: 1\nname: p\ndescription: p\nruntime: gvisor\nnetwork: {mode: proxy, allow: [a.example]}\n")
    done = subprocess.run(SANDBOX + ["devcontainer", "-p", str(own), str(tmp_path)], capture_output=True, text=True)
    hint = " ".join(done.stderr.split())
    assert done.returncode == 120 and "runtime" in hint and "`sandbox up`" in hint and "network: {mode: none}" in hint, hint
    assert not (tmp_path / ".devcontainer").exists()


def test_user_auto_is_the_agent_images_user_in_files_for_another_tool_and_the_owner_under_run(tmp_path):
    facts = fake_facts(owner=(1001, 1002))
    assert compile_policy(untrusted_bind(), facts).container.user == "1001:1002"
    for kind in ("external", "devcontainer", "kubernetes"):
        plan = compile_policy(untrusted_bind(), facts, kind=kind)
        assert plan.container.user == "1000:1000" and "uid=1000" in " ".join(plan.container.command)
    os.chown(tmp_path, 1001, 1002)
    for args in (["compile", "-p", "read-only", "-w", str(tmp_path), "--format", "compose"],
                 ["devcontainer", "-p", "read-only", str(tmp_path)]):
        done = subprocess.run(SANDBOX + args, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        said = " ".join(done.stderr.split())
        assert "the agent runs as 1000:1000" in said and "owned by 1001:1002" in said and "user: 1001:1002" in said


@pytest.fixture
def compose_bin():
    return external_tool("docker-compose", "apt-get install docker-compose")


def compose_in(workspace, path, project: str, env: dict | None = None) -> tuple[list[str], dict]:
    """docker-compose as a developer runs it in the checkout: the project directory (what '.' in the
    file is) and $PWD (the probe's wsroot) are the workspace."""
    where = os.path.realpath(workspace)
    return (["docker-compose", "-p", project, "--project-directory", where, "-f", str(path)],
            {**(env or os.environ), "PWD": where})


def as_composed(plan, workspace):
    """The container compose creates from the file: the probe's wsroot from $PWD by its entrypoint's
    shell, and $SANDBOX_WSROOT in the environment."""
    c = without_host(unwatched(plan)).container
    return replace(c, env=c.env + ((WSROOT_ENV, os.path.realpath(workspace)),))


@pytest.mark.engine
def test_docker_compose_brings_up_a_probed_sandbox_equal_to_the_plan(engine, compose_bin, workspace, tmp_path):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    api, egress = docker_sdk().api, f"sandbox-test-compose-egress-{os.getpid()}"
    api.create_network(egress, driver="bridge", internal=True)   # stands in for the internet: leads nowhere
    policy = with_allowed(preset("ci"), ({"host": "allowed.test", "private": True},))
    facts = hostfacts.gather(policy, str(workspace), images.probe_volume_name(), images.proxy_image().tag,
                        launched=False)   # as `compile --format compose`: no nonce, no owner pid
    plan = compile_policy(policy, facts, egress_network=egress, kind="external",
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))
    path = tmp_path / "compose.yaml"
    path.write_text(compose_text(plan))
    project, env = compose_in(workspace, path, f"sandbox-test-compose-{os.getpid()}")
    try:
        up = subprocess.run(project + ["up", "-d"], capture_output=True, text=True, timeout=300, env=env)
        assert up.returncode == 0, up.stderr
        name = plan.container.name
        assert engine.wait(name) == 0
        report = parse_probe(engine.logs(name).splitlines())
        assert report.ok, [c for c in report.checks if not c.ok]
        assert {"egress.proxy", "egress.denied", "egress.direct", "egress.dns", "fs.protected"} <= {c.id for c in report.checks}
        assert (workspace / "AGENT-RAN").exists()
        assert compare_inspect(as_composed(plan, workspace), engine.inspect(name), engine.image_env(plan.container.image)) == []
        assert set(to_compose(plan)["services"]) == {"proxy", "sandbox"}
        # compose owns these containers: `sandbox gc` must not take them, though no launcher of ours lives.
        label = f"dev.sandbox.sandbox={name}"
        before = sorted(c.id for c in engine.list(label))
        sandboxes.gc(engine, everything=False)
        assert sorted(c.id for c in engine.list(label)) == before and len(before) == 2
    finally:
        down = subprocess.run(project + ["down", "--timeout", "1"], capture_output=True, text=True, timeout=120, env=env)
        workspaces.remove_placeholders(plan.placeholders)
        api.remove_network(egress)
    assert down.returncode == 0, down.stderr
    label = f"dev.sandbox.workspace={os.path.realpath(workspace)}"
    assert engine.list(label) == [] and engine.list_networks(label) == []


@pytest.mark.engine
def test_compose_passes_secrets_to_the_proxy_only(engine, compose_bin, model_api, workspace, tmp_path):
    """Both secret sources through docker-compose: an interpolated variable and a bound key file."""
    network, upstream_log, _ = model_api
    env_value, file_value = "env-" + os.urandom(8).hex(), "file-" + os.urandom(8).hex()
    key = tmp_path / "key"
    key.write_text(file_value + "\n")
    key.chmod(0o644)   # the proxy runs as uid 13
    policy = parse_policy(f"""version: 1
name: compose-secrets
description: secrets through compose
workspace: {{access: read-write}}
network: {{mode: proxy}}
secrets:
  - {{name: one, env: SANDBOX_TEST_COMPOSE_KEY, upstream: "http://model.test", header: "Authorization: Bearer {{value}}"}}
  - {{name: two, file: {key}, upstream: "http://model.test", header: "x-api-key: {{value}}"}}
""".encode(), str(tmp_path / "policy.yaml"))
    facts = hostfacts.gather(policy, str(workspace), images.probe_volume_name(), images.proxy_image().tag)
    script = 'curl -s "$SANDBOX_ENDPOINT_ONE/a" > /workspace/one.txt; curl -s "$SANDBOX_ENDPOINT_TWO/b" > /workspace/two.txt'
    plan = compile_policy(policy, facts, egress_network=network, command=("bash", "-c", script))
    text = compose_text(plan)
    assert env_value not in text and file_value not in text
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    project, env = compose_in(workspace, path, f"sandbox-test-compose-s-{os.getpid()}",
                              {**os.environ, "SANDBOX_TEST_COMPOSE_KEY": env_value})   # compose interpolates it for `down` too
    try:
        up = subprocess.run(project + ["up", "-d"], capture_output=True, text=True, timeout=300, env=env)
        assert up.returncode == 0, up.stderr
        assert engine.wait(plan.container.name) == 0
        assert parse_probe(engine.logs(plan.container.name).splitlines()).ok
        assert (workspace / "one.txt").read_text() == (workspace / "two.txt").read_text() == "model ok\n"
        log = upstream_log()
        assert f"REQ Authorization: Bearer {env_value}" in log and f"REQ x-api-key: {file_value}" in log
        assert env_value not in json.dumps(docker_sdk().api.inspect_container(plan.container.name))
    finally:
        down = subprocess.run(project + ["down", "--timeout", "1"], capture_output=True, text=True, timeout=120, env=env)
        workspaces.remove_placeholders(plan.placeholders)
    assert down.returncode == 0, down.stderr
    label = f"dev.sandbox.workspace={os.path.realpath(workspace)}"
    assert engine.list(label) == [] and engine.list_networks(label) == []
