"""The launcher's word starts the agent: a probe that leaves a check out but says ok, a probe volume
whose files changed, no word or a no from the launcher — the agent never runs, and what the
launcher says ("the agent was not started") is true (issue 39, part 1)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import replace

import pytest

from conftest import ROOT, docker_sdk, launch_facts, preset

from fakes import Recorder

from launcher import labels as label
from launcher.engine import images, probefiles
from launcher.errors import ProbeFailed
from launcher.launch import launch
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import unwatched
from launcher.policy.model import HomeMode, WorkspaceMode
from launcher.selftest import testnet

pytestmark = pytest.mark.engine
MARKER = "AGENT-RAN"
SCRIPT = (images.probe_image().context / "probe.sh").read_bytes()
# run_checks as a probe of another version might have it: the last planned check is never run,
# and PROBE-END still says ok
SKIPS_LAST = SCRIPT.replace(b'\tfor id in $A_checks; do\n', b'\tfor id in ${A_checks%,*}; do\n', 1)


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def probe_volume(engine):
    """make(files) -> a probe volume the way the launcher fills it (its label records the real
    busybox), whose files are then replaced by `files` (name -> (bytes, mode)), as someone with the
    engine could; removed at the end."""
    sdk, made = docker_sdk(), []
    real = sdk.volumes.get(images.probe_volume_name())
    busybox_sha = real.attrs["Labels"][label.PROBE_BUSYBOX]

    def make(files: dict[str, tuple[bytes, int]]) -> str:
        name = f"sandbox-probe-gatetest-{os.urandom(3).hex()}"
        sdk.volumes.create(name, labels={label.MANAGED: "1", label.PROBE_BUSYBOX: busybox_sha})
        made.append(name)
        helper = sdk.containers.create(images.probe_image().tag, ["/src/busybox", "chmod", "555", "/p"], user="0:0",
                                       network_mode="none", ulimits=testnet.tool_ulimits(engine),
                                       volumes={real.name: {"bind": "/src", "mode": "ro"},
                                                                     name: {"bind": "/p", "mode": "rw"}})
        try:   # the real files first, then the changed ones over them; the directory as the launcher's
            helper.put_archive("/p", b"".join(sdk.api.get_archive(helper.id, "/src/busybox")[0]))
            helper.put_archive("/p", _tar(files))
            helper.start()
            assert helper.wait()["StatusCode"] == 0
        finally:
            helper.remove(force=True)
        return name

    yield make
    for name in made:
        sdk.volumes.get(name).remove(force=True)


def _plan(engine, workspace, volume: str | None = None):
    policy = preset("untrusted")
    policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND),
                     home=replace(policy.home, mode=HomeMode.TMPFS))
    facts = launch_facts(engine, policy, workspace)
    if volume:
        facts = replace(facts, probe_volume=volume)
    return compile_policy(policy, facts, command=("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))


@pytest.fixture
def ready(engine):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None)


def test_a_probe_that_leaves_a_check_out_but_says_ok_never_starts_the_agent(engine, workspace, ready, probe_volume,
                                                                              monkeypatch):
    assert SKIPS_LAST != SCRIPT
    volume = probe_volume({"probe.sh": (SKIPS_LAST, 0o444)})
    # the files check would refuse this volume first: let it pass, the gate is what is tested here
    monkeypatch.setattr(probefiles, "script_digest", lambda: probefiles.sha256(SKIPS_LAST))
    plan = _plan(engine, workspace, volume)
    with pytest.raises(ProbeFailed, match="the agent was not started:\n  the probe reported 28 checks, not the 29 planned"):
        launch.run(engine, plan, Recorder())
    time.sleep(0.5)
    assert not (workspace / MARKER).exists(), "the agent ran although the launcher refused the report"
    assert engine.list(label.selector(label.SANDBOX, plan.container.name)) == []


def test_without_the_gate_that_probe_would_have_started_the_agent(engine, workspace, ready, probe_volume, monkeypatch):
    """The control: the same probe and plan with gate=- (as every launch had before the gate) starts
    the agent on its own ok. Started here, not by launch.run: the launcher's refusal of the report
    removed the container as the agent started, and now and then won that race (podman, in CI)."""
    volume = probe_volume({"probe.sh": (SKIPS_LAST, 0o444)})
    monkeypatch.setattr(probefiles, "script_digest", lambda: probefiles.sha256(SKIPS_LAST))
    code, logs = _ran_alone(engine, launch.create_verified(engine, unwatched(_plan(engine, workspace, volume))))
    assert code == 0 and "PROBE-END\tok\t28\n" in logs
    assert (workspace / MARKER).exists()


def _ran_alone(engine, ref: str) -> tuple[int, str]:
    """The created container `ref` started, waited for and removed by the test: its exit code and logs."""
    try:
        engine.start(ref)
        return engine.wait(ref), engine.logs(ref)
    finally:
        engine.remove(ref)


# the line that unsets, before the probe reads anything, each name of its own the environment holds
UNSET = b"\tA_* | S_* | MI_* | RT_* | CG_* | K_* | L_* | ENV_* | EG_* | RC_* | _* | BB) unset \"${__sbx_probe_e%%=*}\" ;;\n"


@pytest.mark.parametrize("unset", [True, False], ids=["as shipped", "control: without the unset"])
def test_an_environment_naming_the_gate_s_own_variable_is_no_word(engine, workspace, ready, probe_volume, monkeypatch,
                                                                 unset):
    """ash imports every variable of its environment (an image's ENV among them): __sbx_probe_go=go
    there must not stand for the launcher's word. The probe that leaves a check out says ok, the
    launcher refuses it, and the agent never runs; the control, the same probe without the line
    that unsets the name, started with nobody to give the word, shows what that line keeps out: the
    agent ran. (Started here, not by launch.run, for the reason the gate's control above gives.)"""
    script = SKIPS_LAST if unset else SKIPS_LAST.replace(UNSET, b"", 1)
    assert UNSET in SKIPS_LAST and script != SKIPS_LAST or unset
    volume = probe_volume({"probe.sh": (script, 0o444)})
    monkeypatch.setattr(probefiles, "script_digest", lambda: probefiles.sha256(script))
    plan = _plan(engine, workspace, volume)
    plan = replace(plan, container=replace(plan.container, env=plan.container.env + (("__sbx_probe_go", "go"),)))
    if unset:
        with pytest.raises(ProbeFailed, match="not the 29 planned"):
            launch.run(engine, plan, Recorder())
        time.sleep(0.5)
        assert not (workspace / MARKER).exists()
        return
    # nobody gives the word, and the gate waits 3 s for it: only the variable can start the agent
    code, logs = _ran_alone(engine, _started_without_the_launcher(engine, plan, "3"))
    assert code == 0 and "PROBE-END\tok\t28\n" in logs
    assert (workspace / MARKER).exists()


@pytest.mark.parametrize("unset", [True, False], ids=["as shipped", "control: without the unset"])
def test_an_environment_naming_an_optional_expectation_is_not_one(engine, workspace, ready, probe_volume, monkeypatch,
                                                                  unset):
    """keyvars= (a bound key's variable, holding its placeholder) is given only when keys are bound:
    an environment's A_keyvars must not stand in for it, or a secret the image or the container
    carries passes env.secrets as a placeholder. The probe fails and the agent never runs; the
    control, without the unset, shows what it keeps out: the probe passed and the agent ran."""
    script = SCRIPT if unset else SCRIPT.replace(UNSET, b"", 1)
    assert UNSET in SCRIPT and (script != SCRIPT or unset)
    volume = probe_volume({"probe.sh": (script, 0o444)})
    monkeypatch.setattr(probefiles, "script_digest", lambda: probefiles.sha256(script))
    plan = _plan(engine, workspace, volume)
    secret = ("GITHUB_TOKEN", "ghp_" + "x" * 36)
    plan = replace(plan, container=replace(plan.container, env=plan.container.env + (secret, ("A_keyvars", "=".join(secret)))))
    if unset:
        with pytest.raises(ProbeFailed, match="env.secrets"):
            launch.run(engine, plan, Recorder())
    else:
        assert launch.run(engine, plan, Recorder()).probe.ok
    time.sleep(0.5)
    assert (workspace / MARKER).exists() != unset


@pytest.mark.parametrize("change", [
    {"probe.sh": (SCRIPT + b"\n# one more line\n", 0o444)},
    {"probe.sh": (SCRIPT, 0o666)},
    {"busybox": (b"#!/bin/sh\nexec /bin/sh \"$@\"\n", 0o555)},
    {"extra.sh": (b"echo\n", 0o444)},
], ids=["probe.sh changed", "probe.sh writable", "busybox replaced", "a file added"])
def test_a_changed_probe_volume_is_refused_before_the_container_starts(engine, workspace, ready, probe_volume, change):
    plan = _plan(engine, workspace, probe_volume(change))
    with pytest.raises(ProbeFailed, match="the probe's files are not the launcher's; the agent was not started"):
        launch.run(engine, plan, Recorder())
    assert not (workspace / MARKER).exists()
    assert engine.list(label.selector(label.SANDBOX, plan.container.name)) == []


def test_the_launcher_s_own_volume_passes_and_the_word_comes_in_milliseconds(engine, workspace, ready):
    outcome = launch.run(engine, _plan(engine, workspace), Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0 and (workspace / MARKER).exists()


def _started_without_the_launcher(engine, plan, seconds: str):
    """The plan's container, created and started by the test (no launcher reads its report)."""
    command = tuple(f"gate={seconds}" if a.startswith("gate=") else a for a in plan.container.command)
    return launch.create_verified(engine, replace(plan, container=replace(plan.container, command=command)))


WORDS = {"no word": None, "a no": "TERM", "another line": b"gone\n", "go with a CR": b"go\r\n",
         "go without its line's end": b"go", "SIGUSR1, the word before": "USR1", "control: go": b"go\n"}


@pytest.mark.parametrize("word", WORDS.values(), ids=WORDS.keys())
def test_only_go_on_its_stdin_starts_the_agent(engine, workspace, ready, word):
    """The word is the line "go" on the probe's stdin, which the test holds here as the launcher does
    (attached before the start). Anything else in its place, a no (TERM) or nothing within the gate's
    3 s, and the probe exits 97 without starting the agent; the control, "go", starts it."""
    plan = _plan(engine, workspace)
    ref = _started_without_the_launcher(engine, plan, "3")
    try:
        attached = engine.output(ref, stdin=True)
        assert attached.writable
        engine.start(ref)
        deadline = time.monotonic() + 30
        while "PROBE-END\tok" not in engine.logs(ref) and time.monotonic() < deadline:
            time.sleep(0.1)
        if isinstance(word, str):
            engine.signal(ref, word)
        elif word is not None:
            attached.write(word)
        code, said = engine.wait(ref), engine.logs(ref, stdout=False, stderr=True)
        if word == b"go\n":
            assert code == 0 and (workspace / MARKER).exists(), said
            return
        assert code == 97
        expected = "refused the report" if word == "TERM" else "was not the launcher's word" \
            if word in (b"gone\n", b"go\r\n") else "no word from the launcher within 3 s"
        assert expected in said, said
        assert not (workspace / MARKER).exists()
    finally:
        engine.remove(ref)


def test_the_word_goes_through_the_sdk_s_transport_as_well(engine, workspace, ready, monkeypatch):
    """An engine at tcp://, ssh:// or behind TLS is spoken to through the docker SDK: its attach
    socket carries the word too (here the same engine, reached through the SDK)."""
    from launcher.engine import engine as engines, engineapi
    from launcher.host import host

    monkeypatch.setattr(host, "engine_socket", lambda default: None)
    through_sdk = engines.connect()
    assert isinstance(through_sdk.http, engineapi.Sdk)
    outcome = launch.run(through_sdk, _plan(engine, workspace), Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0 and (workspace / MARKER).exists()


def test_the_agent_s_stdin_is_nothing_once_the_word_came_on_it(engine, workspace, ready):
    """The container's stdin was the word's: the agent gets /dev/null, as before (a `cat` ends at once)."""
    plan = _plan(engine, workspace)
    agent = ("/.sandbox/probe/busybox", "sh", "-c", "/.sandbox/probe/busybox readlink /proc/self/fd/0; "
             "/.sandbox/probe/busybox timeout 5 /.sandbox/probe/busybox cat; echo cat=$?")
    command = plan.container.command[:plan.container.command.index("--") + 1] + agent
    streams = {"stdout": b"", "stderr": b""}
    recorder = Recorder()
    recorder.output = lambda stream, data: streams.__setitem__(stream, streams[stream] + data)
    outcome = launch.run(engine, replace(plan, container=replace(plan.container, command=command)), recorder)
    assert outcome.exit_code == 0 and streams["stdout"] == b"/dev/null\ncat=0\n", streams


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("weaken", [None, "own", "socket"])
def test_up_that_attaches_again_proves_the_sandbox_first(engine, workspace, tmp_path, weaken):
    """`up` on a running sandbox re-runs the probe in it: a sandbox that still holds passes again,
    also with a socket the agent made in its own tmpfs (Claude Code keeps one in /tmp); one whose
    state broke the policy meanwhile (a socket on a mount that outlives it: its home volume) is
    refused, left running, and nothing new starts. (Its probe files are compared as at a start:
    the same function, tested on a changed volume above.)"""
    name = f"sandbox-test-reprove-{os.urandom(2).hex()}"
    policy = tmp_path / "home-volume.yaml"   # a home volume: a mount the sandbox does not make empty
    policy.write_text((ROOT / "policies" / "untrusted.yaml").read_text().replace("home: {mode: tmpfs}", "home: {mode: volume}"))
    up = ("up", "-p", str(policy), "--workspace-mode", "bind", str(workspace), "--name", name, "--no-shell")
    assert _cli(*up).returncode == 0
    try:
        said = _cli("exec", name, "--", "true").stderr
        assert f"{name} was last proven" in said and "at its start" in said
        if weaken:
            where = "/tmp/agent.sock" if weaken == "own" else "/home/agent/agent.sock"
            made = _cli("exec", name, "--", "python3", "-c",
                        f"import socket; socket.socket(socket.AF_UNIX).bind({where!r})")
            assert made.returncode == 0, made.stderr
        again = _cli(*up)
        if weaken != "socket":
            assert again.returncode == 0 and "probe passed again" in again.stderr, again.stderr
            assert "on attach" in _cli("exec", name, "--", "true").stderr
        else:
            assert again.returncode == 122 and "no longer holds what its policy says" in again.stderr, again.stderr
            assert "sockets.mounts" in again.stderr and "agent.sock" in again.stderr
            assert engine.inspect(name).running   # left as it was: the user's work is in it
    finally:
        assert _cli("down", name, "--purge").returncode == 0


@pytest.mark.parametrize("extra", [(), (("SANDBOX-ODD-NAME", "1"),), (("A_keyvars", "x"), ("A_odd-name", "1"), ("BB", "x"))],
                         ids=["plain", "a name ash does not carry", "names of the probe's own, one ash does not carry"])
def test_the_agent_gets_the_container_s_environment_byte_for_byte(engine, workspace, ready, extra):
    """After the word the probe execs the agent with exactly the environment the container was given
    (what the shell would pass it is compared with /proc/1/environ first; a name ash drops takes the
    `env -i` path): the agent's own /proc/self/environ, sorted, is the container's Env."""
    plan = _plan(engine, workspace)
    agent = ("/.sandbox/probe/busybox", "sort", "-z", "/proc/self/environ")
    command = plan.container.command[:plan.container.command.index("--") + 1] + agent
    plan = replace(plan, container=replace(plan.container, command=command, env=plan.container.env + extra))
    streams = {"stdout": b"", "stderr": b""}
    recorder = Recorder()
    recorder.output = lambda stream, data: streams.__setitem__(stream, streams[stream] + data)
    outcome = launch.run(engine, plan, recorder)
    assert outcome.exit_code == 0
    assert streams["stderr"] == b""   # nothing of the probe's shell (a job's "Terminated") on the agent's stderr
    given = sorted(f"{k}={v}".encode() for k, v in plan.container.env)
    seen = [e for e in streams["stdout"].split(b"\0") if e]
    ours = {k.encode() for k, _ in plan.container.env}
    assert [e for e in seen if e.split(b"=", 1)[0] in ours] == given
    # besides: the image's own ENV and what the engine adds (HOSTNAME, its dialect's own_env: podman's
    # container=), HOME; nothing of the probe's shell
    image_env = engine.image_env(plan.container.image)
    others = {e.split(b"=", 1)[0] for e in seen} - ours
    allowed = {e.split("=", 1)[0].encode() for e in image_env + engine.dialect.plan.own_env(image_env)}
    assert others <= allowed | {b"HOSTNAME", b"HOME"}
