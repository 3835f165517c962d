"""`sandbox devcontainer`: devcontainer.json (+ Dockerfile, compose.yaml) from the effective policy,
and the real Dev Containers CLI bringing up a probed sandbox that cannot reach a denied host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import yaml

from conftest import BIND, ROOT, external_tool, fake_facts, untrusted_bind, preset
from launcher.engine import images
from launcher.engine.verify import parse_probe
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import unwatched
from launcher.policy.model import WorkspaceMode
from launcher.policy.policy import with_allowed
from launcher.targets import devcontainer
from launcher.targets.portable import probe_start

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
    # no host path: the checkout as the Dev Containers tools name it
    assert config["workspaceMount"] == "type=bind,src=${localWorkspaceFolder},dst=/workspace" and config["workspaceFolder"] == "/workspace"
    assert "/home/dev" not in json.dumps(files)
    assert "type=tmpfs,dst=/workspace/.git,readonly,tmpfs-size=4096" in config["mounts"]
    assert "type=volume,src=sandbox-probe-test,dst=/.sandbox/probe,readonly" in config["mounts"]
    # the writable tmpfs are the agent's (the Mount API, so "mounts", cannot set an owner)
    assert "--tmpfs=/home/agent:rw,size=536870912,uid=1000,gid=1000,mode=0700" in args
    assert "--tmpfs=/tmp:rw,size=268435456,uid=1000,gid=1000,mode=0700" in args
    assert not any("dst=/home/agent" in m or "dst=/tmp," in m for m in config["mounts"])
    assert config["overrideCommand"] is False and config["updateRemoteUserUID"] is False
    assert config["containerEnv"] == dict(plan.container.env) | {"SANDBOX_WSROOT": "${localWorkspaceFolder}"}
    assert "--label=dev.sandbox.workspace=${localWorkspaceFolder}" in args
    entrypoint, command = probe_start(plan)
    assert f"ENTRYPOINT {json.dumps(entrypoint)}" in files["Dockerfile"]
    assert f"CMD {json.dumps(command)}" in files["Dockerfile"]   # probe expectations but wsroot, then sleep


def test_gvisor_seccomp_profile_is_copied_beside_devcontainer_json_and_named_from_there():
    policy = preset("untrusted-gvisor")
    policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND))
    plan = compile_policy(policy, fake_facts(), kind="up")
    files = devcontainer.files(plan)
    args = json.loads(files["devcontainer.json"])["runArgs"]
    assert "--security-opt=seccomp=${localWorkspaceFolder}/.devcontainer/gvisor-seccomp.json" in args
    assert files["gvisor-seccomp.json"] == (ROOT / "launcher" / "plan" / "gvisor-seccomp.json").read_text()
    assert str(ROOT) not in json.dumps(files)


def test_proxy_mode_uses_compose_with_the_proxy_and_builds_the_probe_image():
    plan = compile_policy(preset("devcontainer"), fake_facts(), kind="up")
    files = devcontainer.files(plan)
    config, compose = json.loads(files["devcontainer.json"]), yaml.safe_load(files["compose.yaml"])
    assert config["dockerComposeFile"] == ["compose.yaml"] and config["service"] == "sandbox"
    assert config["runServices"] == ["proxy", "sandbox"] and not set(HOOKS) & set(config)
    sandbox = compose["services"]["sandbox"]
    assert sandbox["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert compose["services"]["proxy"]["networks"]["internal"]["aliases"] == ["sandbox-proxy"]
    # the checkout is the compose file's parent; $SANDBOX_WSROOT comes from containerEnv (the tools'
    # override file), and no label names a host path the file cannot know
    assert {"type": "bind", "target": "/workspace", "read_only": False, "source": ".."} in sandbox["volumes"]
    assert config["containerEnv"]["SANDBOX_WSROOT"] == "${localWorkspaceFolder}"
    assert "SANDBOX_WSROOT" not in sandbox["environment"] and "dev.sandbox.workspace" not in sandbox["labels"]
    assert "/home/dev" not in json.dumps(files)


def test_the_probe_gets_the_same_arguments_with_wsroot_from_the_environment(tmp_path):
    """The entrypoint's shell adds wsroot=$SANDBOX_WSROOT and execs the probe: run it with a stand-in
    busybox that is a shell the first time and prints its arguments the second."""
    plan = unwatched(compile_policy(preset("devcontainer"), fake_facts(), kind="up"))
    entrypoint, command = probe_start(plan)
    fake = tmp_path / "busybox"
    fake.write_text('#!/bin/sh\nif [ "$1 $2" = "sh -c" ]; then shift; exec /bin/sh "$@"; fi\nprintf "%s\\0" "$@"\n')
    fake.chmod(0o755)
    argv = [str(fake) if a == entrypoint[0] else a for a in entrypoint] + command
    done = subprocess.run(argv, capture_output=True, text=True, env={"SANDBOX_WSROOT": "/home/dev/repo"})
    said = done.stdout.split("\0")[:-1]   # an argument may hold lines (the main loop's script)
    assert said[:2] == ["sh", "/.sandbox/probe/probe.sh"]
    cut = said.index("--")
    want = list(plan.container.command)
    assert sorted(said[2:cut]) == sorted(want[:want.index("--")]) and said[cut:] == want[want.index("--"):]
    # unset: an empty wsroot, which the probe refuses (exit 97) before it checks anything
    bare = subprocess.run(argv, capture_output=True, text=True, env={}).stdout.split("\0")
    assert "wsroot=" in bare


def _write_in(checkout, home, *argv):
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_STATE_HOME", None)
    done = subprocess.run(SANDBOX + list(argv), capture_output=True, text=True, cwd=checkout, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("policy", ["devcontainer", "read-only", "ci"])
def test_the_files_are_the_same_bytes_in_any_checkout_and_name_no_host_path(tmp_path, policy):
    """Two checkouts at different paths, two users' homes: `sandbox devcontainer` and `compile
    --format compose` write the same bytes, and neither path nor home is in them."""
    written = []
    for side in ("one", "two"):
        checkout, home = tmp_path / f"{side}-place" / "repo", tmp_path / f"{side}-home"
        checkout.mkdir(parents=True)
        home.mkdir()
        subprocess.run(["git", "init", "-q", str(checkout)], check=True)
        _write_in(checkout, home, "devcontainer", "-p", policy, ".")
        out = {p.name: p.read_bytes() for p in sorted((checkout / ".devcontainer").iterdir())}
        out["compose"] = _write_in(checkout, home, "compile", "-p", policy, "--format", "compose").encode()
        for name, data in out.items():
            assert b"-place" not in data and b"-home" not in data and str(tmp_path).encode() not in data, name
        written.append(out)
    assert written[0] == written[1]
    if policy == "devcontainer":
        assert written[0]["empty-config.json"] == b"{}\n"   # what missing config files are bound from
        config = json.loads(written[0]["devcontainer.json"])
        compose = yaml.safe_load(written[0]["compose.yaml"])
        assert config["dockerComposeFile"] == ["compose.yaml"]
        assert {"type": "bind", "target": "/workspace/.mcp.json", "read_only": True,
                "source": "./empty-config.json"} in compose["services"]["sandbox"]["volumes"]
        assert "source: ${HOME}/.local/state/sandbox/empty-config.json" in written[0]["compose"].decode()


def test_a_copy_mode_policy_is_refused_with_the_nearest_commands_that_work(tmp_path):
    done = subprocess.run(SANDBOX + ["devcontainer", "-p", "untrusted", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 120 and not (tmp_path / ".devcontainer").exists()
    hint = " ".join(done.stderr.split())
    for said in ("`sandbox up -p untrusted`", "`sandbox diff` to review, `sandbox apply` to bring the changes",
                 "add --workspace-mode bind", "`sandbox devcontainer -p read-only`"):
        assert said in hint, done.stderr
    # a policy file: the commands name the file (its name is no preset)
    own = tmp_path / "mine.yaml"
    own.write_text((ROOT / "policies" / "untrusted.yaml").read_text().replace("name: untrusted", "name: mine"))
    done = subprocess.run(SANDBOX + ["compile", "-p", str(own), "-w", str(tmp_path), "--format", "compose"],
                          capture_output=True, text=True)
    hint = " ".join(done.stderr.split())
    assert done.returncode == 120 and f"`sandbox up -p {own}`" in hint and "the same command with `-p read-only`" in hint, hint


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
    # by the sandbox's name: in compose mode no label names the workspace (the file cannot know it)
    label = f"dev.sandbox.sandbox={name}"
    assert engine.list(label) == [] and engine.list_networks(label) == []


def _checkout(at):
    """A clone of the example repository in `at` (owned by uid 1000, as the agent runs), named for this
    process: the same folder name in both checkouts, but not another test run's `repo` on this engine."""
    from conftest import make_workspace

    at.mkdir(parents=True)
    made = make_workspace(at)
    return made.rename(made.with_name(f"repo-{os.getpid()}"))


def _probe_passed(engine, ref: str, policy: str) -> None:
    """The probe's report in container `ref`: every check passes but what it was told it cannot
    observe (gVisor: nnp, mounts.workspace, limits.pids), and the workspace check is among them."""
    deadline = time.monotonic() + 60   # `devcontainer up` may return before the probe has finished
    while "PROBE-END" not in engine.logs(ref) and time.monotonic() < deadline:
        time.sleep(0.2)
    told = next((a[3:] for a in engine.inspect(ref).command if a.startswith("na=")), "")
    report = parse_probe(engine.logs(ref).splitlines(), tuple(x for x in told.split(",") if x))
    assert report.ok, [c for c in report.checks if not c.ok]
    want = {"fs.protected", "kernel.runtime"} if policy == "untrusted-gvisor" else {"fs.protected", "mounts.workspace"}
    assert want <= {c.id for c in report.checks if c.verdict == "pass"}


@pytest.mark.engine
@pytest.mark.parametrize("policy", ["read-only", "devcontainer", "untrusted-gvisor"])   # runArgs; compose; runsc
def test_files_written_in_one_checkout_open_from_another_with_the_probe_passing(engine, cli, tmp_path, policy):
    """Issue 44: what `sandbox devcontainer` and `compile --format compose` write in two checkouts at
    different paths is the same bytes, and the second checkout opens both, with the real Dev
    Containers CLI and docker-compose: the probe's every check passes (mounts.workspace: the bind is
    the second checkout, as $SANDBOX_WSROOT says)."""
    from launcher.selftest.testnet import Internet

    compose_bin = external_tool("docker-compose", "apt-get install docker-compose")
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    internet = Internet(engine, f"sandbox-test-dc-portable-{os.getpid()}") if policy == "devcontainer" else None
    try:
        _open_from_a_second_checkout(engine, cli, tmp_path, policy, compose_bin, internet)
    finally:   # also when an assertion stops it early: our upstream containers and their network go
        if internet:
            internet.close()


def _open_from_a_second_checkout(engine, cli, tmp_path, policy: str, compose_bin: str, internet) -> None:
    """The test above, once its test network is up."""
    flags = ["--egress-network", internet.network] if internet else []
    flags += ["--workspace-mode", "bind"] if policy == "untrusted-gvisor" else []   # copy mode is refused
    first, second = _checkout(tmp_path / "alice"), _checkout(tmp_path / "bob" / "src" / "work")
    written = []
    for checkout in (first, second):
        made = subprocess.run(SANDBOX + ["devcontainer", "-p", policy, *flags, str(checkout)], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        out = {p.name: p.read_bytes() for p in sorted((checkout / ".devcontainer").iterdir())}
        composed = subprocess.run(SANDBOX + ["compile", "-p", policy, *flags, "-w", str(checkout), "--format", "compose",
                                             "--", "/.sandbox/probe/busybox", "true"], capture_output=True, text=True, cwd=checkout)
        assert composed.returncode == 0, composed.stderr
        out["compose (compile)"] = composed.stdout.encode()
        assert not [name for name, data in out.items() if str(tmp_path).encode() in data or str(ROOT).encode() in data]
        written.append(out)
    assert written[0] == written[1] and "devcontainer.json" in written[0]
    (second / "SECOND-CHECKOUT").write_text("bob\n")
    os.chown(second / "SECOND-CHECKOUT", 1000, 1000)
    # compose as a developer runs it: the committed file in the checkout, docker-compose run there
    (second / "compose.yaml").write_bytes(written[0]["compose (compile)"])
    composed_name = yaml.safe_load(written[0]["compose (compile)"])["services"]["sandbox"]["container_name"]
    project = [compose_bin, "-p", f"sandbox-test-portable-{os.getpid()}", "-f", "compose.yaml"]
    in_second = {"cwd": second, "env": {**os.environ, "PWD": str(second)}, "capture_output": True, "text": True}
    names = (f"sandbox-{second.name}", composed_name)
    built = set()
    try:
        up = subprocess.run([cli, "up", "--workspace-folder", str(second)], capture_output=True, text=True, timeout=600)
        assert json.loads(up.stdout.strip().splitlines()[-1])["outcome"] == "success", up.stderr[-3000:]
        [box] = [c for c in engine.list(f"dev.sandbox.sandbox={names[0]}") if c.labels.get("dev.sandbox.kind") != "proxy"]
        built.add(engine.inspect(box.id).image)
        _probe_passed(engine, box.id, policy)
        inside = subprocess.run([cli, "exec", "--workspace-folder", str(second), "cat", "/workspace/SECOND-CHECKOUT"],
                                capture_output=True, text=True, timeout=120)
        assert inside.stdout == "bob\n", inside.stderr
        started = subprocess.run(project + ["up", "-d"], timeout=300, **in_second)
        assert started.returncode == 0, started.stderr
        assert engine.wait(composed_name) == 0   # the probe passed and exec'd the command
        _probe_passed(engine, composed_name, policy)
    finally:
        down = subprocess.run(project + ["down", "--timeout", "1"], timeout=120, **in_second)
        launch.remove_sandbox(engine, names[0])
        for image in built:
            subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
    assert down.returncode == 0, down.stderr
    for name in names:
        assert engine.list(f"dev.sandbox.sandbox={name}") == [] and engine.list_networks(f"dev.sandbox.sandbox={name}") == []
