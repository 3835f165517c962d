"""Real-engine tests: launch, probe, stream, exit codes, cleanup, up/exec/down/gc, other images."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import BIND, docker_sdk, launch_facts, preset, read_until, untrusted_bind
from fakes import Recorder

from launcher.engine import images
from launcher.errors import ExitCode, NotFound
from launcher.host import hostfacts, workspaces
from launcher.launch import launch
from launcher.plan.compiler import compile_policy

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=300, **kwargs)


def ours(engine, workspace) -> list[str]:
    """Containers of ours on this test's workspace, running or not (leak detector that other
    sandboxes on the same engine do not disturb)."""
    return sorted("/" + c.name for c in engine.list(f"dev.sandbox.workspace={os.path.realpath(workspace)}"))


def test_run_example_shows_every_hostile_attempt_blocked(engine, workspace):
    before = sorted(os.listdir(workspace))
    result = sandbox("run", "--policy", "untrusted", "--workspace", str(workspace), "--", "./scripts/try-everything.sh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ESCAPED" not in result.stdout and result.stdout.count("BLOCKED") >= 20
    assert "probe passed" in result.stderr
    assert sorted(os.listdir(workspace)) == before and ours(engine, workspace) == []


def test_agent_exit_code_passes_through_and_report_is_written(engine, workspace, tmp_path):
    report = tmp_path / "report.json"
    result = sandbox("run", "-w", str(workspace), "--report", str(report), "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert result.returncode == 7 and result.stdout == "out\n" and "err" in result.stderr
    data = json.loads(report.read_text())
    assert data["status"] == "agent-failed" and data["agent"]["exit_code"] == 7 and data["probe"]["ok"]
    assert data["policy"]["sha256"] == preset("untrusted").digest and len(data["probe"]["checks"]) >= 25


def test_workspace_changes_stay_and_protected_files_do_not_change(engine, workspace):
    config = (workspace / ".git" / "config").read_text()
    result = sandbox("run", *BIND, "-w", str(workspace), "--", "sh", "-c",
                     "echo new > notes.txt; echo x >> .git/config; echo y > .git/hooks/pre-commit; true")
    assert result.returncode == 0, result.stderr
    assert (workspace / "notes.txt").read_text() == "new\n"
    assert (workspace / ".git" / "config").read_text() == config
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


def test_missing_protected_paths_cannot_be_created_and_placeholders_are_removed(engine, tmp_path):
    ws = tmp_path / "bare"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    result = sandbox("run", *BIND, "-w", str(ws), "--", "sh", "-c",
                     "mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit; touch .envrc; "
                     "mkdir -p .github/workflows; ls -A")
    assert result.returncode == 0
    assert sorted(os.listdir(ws)) == []


def test_timeout_stops_the_agent_with_its_own_exit_code(engine, workspace):
    start = time.monotonic()
    result = sandbox("run", "-w", str(workspace), "--timeout", "2s", "--", "sleep", "60")
    assert result.returncode == ExitCode.AGENT_TIMEOUT and time.monotonic() - start < 30
    assert ours(engine, workspace) == []


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_remove_everything(engine, workspace, sig, code):
    proc = subprocess.Popen(SANDBOX + ["run", "-w", str(workspace), "--", "sleep", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "probe passed" in line:
            break
    assert ours(engine, workspace), "the sandbox should be running now"
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == code
    assert ours(engine, workspace) == [] and not (workspace / ".envrc").exists()


def test_up_exec_ls_down(engine, workspace):
    name = "sandbox-test-up"
    result = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell")
    assert result.returncode == 0, result.stderr
    try:
        listing = json.loads(sandbox("ls", "--json").stdout)
        assert any(i["name"] == name and i["kind"] == "up" and i["state"] == "running" for i in listing)
        result = sandbox("exec", name, "--", "sh", "-c", "id -u; touch /etc/x 2>&1; exit 3")
        assert result.returncode == 3 and result.stdout.startswith("1000\n") and "Read-only" in result.stdout
        again = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell")
        assert "already running" in again.stderr
    finally:
        assert sandbox("down", name).returncode == 0
    assert ours(engine, workspace) == [] and not (workspace / ".envrc").exists()
    missing = sandbox("down", name)
    assert missing.returncode == ExitCode.NO_SANDBOX and "no sandbox named" in missing.stderr


@pytest.mark.exclusive
def test_gc_removes_what_a_killed_launcher_left(engine, workspace):
    proc = subprocess.Popen(SANDBOX + ["run", "-w", str(workspace), "--", "sleep", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "probe passed" in line:
            break
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    assert len(ours(engine, workspace)) == 1
    result = sandbox("gc")
    assert result.returncode == 0 and "removed" in result.stderr
    assert ours(engine, workspace) == [] and not (workspace / ".envrc").exists()


# --- the probe works in any image: it never uses the image's shell or loader ------------------

def _import_image(engine, tag: str, files: dict[str, tuple[bytes, int]]) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    path = Path(f"/tmp/{tag.replace('/', '_').replace(':', '_')}.tar")
    path.write_bytes(buffer.getvalue())
    try:
        engine.import_tar(str(path), tag)
    finally:
        path.unlink()
    return tag


@pytest.fixture(scope="module")
def odd_images(engine):
    # the images and the filled probe volume a launch's `ready` makes: these tests call launch.run
    # directly, and on a fresh engine (podman's store in .ci/podman) they ran first
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None)
    busybox = Path("/bin/busybox").read_bytes() if Path("/bin/busybox").exists() else None
    lying_sh = b"#!/bin/busybox sh\necho lies\nexit 0\n"
    tags = {
        "no-shell": _import_image(engine, "sandbox-test/no-shell:1", {"etc/motd": (b"nothing here\n", 0o644)}),
        "lying-sh": _import_image(engine, "sandbox-test/lying-sh:1", {"bin/sh": (lying_sh, 0o755),
                                                                      "lib64/ld-linux-x86-64.so.2": (b"poison", 0o755)}),
        "debian": images.AGENT_IMAGE,
    }
    if busybox:
        tags["busybox"] = _import_image(engine, "sandbox-test/busybox:1", {"bin/busybox": (busybox, 0o755),
                                                                             "bin/sh": (busybox, 0o755)})
    yield tags
    for key, tag in tags.items():
        if key != "debian":
            docker_sdk().api.remove_image(tag, force=True)


@pytest.mark.parametrize("kind", ["debian", "busybox", "no-shell", "lying-sh"])
def test_probe_passes_in_any_image(engine, workspace, odd_images, kind):
    if kind not in odd_images:
        pytest.fail("busybox-static is needed on the host to make the busybox test image")
    from dataclasses import replace

    policy = replace(untrusted_bind(), image=odd_images[kind])
    plan = compile_policy(policy, launch_facts(engine, policy, workspace),
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))
    outcome = launch.run(engine, plan, Recorder())
    assert outcome.probe.ok and outcome.exit_code == 0
    assert (workspace / "AGENT-RAN").exists()



def test_socket_planted_in_the_workspace_is_refused_before_launch(engine, workspace):
    # The probe's sockets.mounts check catches one that appears later (see test_tamper.py).
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(workspace / "planted.sock"))
    try:
        result = sandbox("run", "-w", str(workspace), "--", "touch", "AGENT-RAN")
    finally:
        sock.close()
    assert result.returncode == ExitCode.POLICY_INVALID and "planted.sock" in result.stderr
    assert not (workspace / "AGENT-RAN").exists() and ours(engine, workspace) == []


def test_up_opens_an_interactive_shell_in_a_terminal(engine, workspace):
    name = "sandbox-test-tty"
    primary, secondary = os.openpty()
    proc = subprocess.Popen(SANDBOX + ["up", *BIND, str(workspace), "--name", name], stdin=secondary, stdout=secondary,
                            stderr=secondary, start_new_session=True)
    os.close(secondary)
    try:
        assert b"is up" in read_until(primary, b"is up", 120)
        os.write(primary, b"echo UID=$(id -u) TTY=$(tty) W=$(pwd)\n")
        seen = read_until(primary, b"W=/workspace", 30)
        assert b"UID=1000 TTY=/dev/pts/" in seen, seen
        os.write(primary, b"exit\n")
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        os.close(primary)
        sandbox("down", name)
    assert ours(engine, workspace) == []


def test_up_stops_at_its_time_limit_whoever_is_attached_and_warns_the_shell_first(engine, workspace):
    name = "sandbox-test-up-timeout"
    started = time.monotonic()
    result = sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--timeout", "8s")
    assert result.returncode == 0 and "is up until" in result.stderr, result.stderr
    primary, secondary = os.openpty()
    shell = subprocess.Popen(["docker", "exec", "-it", name, "bash", "-c", "sleep 30"], stdin=secondary,
                             stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    try:
        seen = read_until(primary, b"(limits.session)", 30)
        assert re.search(rb"sandbox: this sandbox stops in [34] s \(limits.session\)", seen), seen
        assert shell.wait(timeout=30) != 0          # the attached shell ended with the sandbox
        assert time.monotonic() - started < 25
        # the exec ends as the container's processes die; the engine says "exited" a moment later
        deadline = time.monotonic() + 10
        while (state := engine.inspect(name)).running and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not state.running and state.exit_code == 0
    finally:
        shell.kill()
        os.close(primary)
        sandbox("down", name)
    assert ours(engine, workspace) == []


def test_the_argv_output_launches_a_sandbox_whose_probe_passes_even_for_an_odd_workspace_path(engine, tmp_path):
    # `--mount` is CSV to the docker CLI: a line break in the path must be quoted (commas already were).
    from launcher.engine.verify import parse_probe
    from launcher.targets import argv as render

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None)
    ws = tmp_path / "odd name\nwith a line break"
    ws.mkdir()
    os.chown(ws, 1000, 1000)   # the agent's uid: a root-owned workspace fails ws.access
    (ws / "README.md").write_text("x\n")
    plan = compile_policy(untrusted_bind(), hostfacts.gather(untrusted_bind(), str(ws), images.probe_volume_name(),
                                                             launched=False),   # as `compile --format argv`
                          kind="external", command=("true",))
    try:
        result = subprocess.run(render.to_argv(plan), capture_output=True, text=True, timeout=120)
    finally:
        workspaces.remove_placeholders(plan.placeholders)
    if engine.dialect.name == "podman":   # the argv target is Docker's CLI: podman's compat create refuses it; nothing runs
        assert result.returncode == 125 and "incorrect mount format" in result.stderr, result.stderr
        assert sorted(os.listdir(ws)) == ["README.md"]
        return
    assert result.returncode == 0, result.stderr
    report = parse_probe(result.stderr.splitlines() + result.stdout.splitlines())
    assert report.ok and any(c.id == "mounts.workspace" for c in report.checks)
    assert sorted(os.listdir(ws)) == ["README.md"]


@pytest.mark.exclusive
def test_an_empty_probe_volume_that_is_not_ours_is_replaced_not_mounted(engine):
    """Docker makes an empty volume when a container names one that does not exist yet; taking
    it for the filled probe volume would fail every start (exec: busybox: no such file)."""
    volume = images.probe_volume_name()
    engine.remove_volume(volume)
    docker_sdk().volumes.create(name=volume)   # empty, no labels: as Docker would make it
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None)
    assert "dev.sandbox.managed" in engine.volume_labels(volume)
    result = sandbox("run", "-p", "read-only", "-w", str(Path(__file__).parent.parent / "examples" / "untrusted-repo"),
                     "--", "true")
    assert result.returncode == 0, result.stderr


def test_an_agent_printing_without_end_leaves_a_bounded_log_on_the_host_and_its_output_complete(engine, workspace):
    total = 30 * 1024 * 1024   # more than the engine's copy may hold (2 files of 10m)
    proc = subprocess.Popen(SANDBOX + ["run", "-w", str(workspace), "--", "sh", "-c",
                                       f"head -c {total} /dev/zero | tr '\\0' a; sleep 8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    received, largest, files = 0, 0, 0
    deadline = time.monotonic() + 120
    os.set_blocking(proc.stdout.fileno(), False)
    while proc.poll() is None and time.monotonic() < deadline:
        chunk = proc.stdout.read(1 << 20)
        received += len(chunk or b"")
        for item in engine.list(f"dev.sandbox.workspace={workspace}"):   # the engine's copy, while it exists
            try:
                path = engine.inspect(item.id).log_path
                sizes = [os.path.getsize(p) for p in (path, path + ".1", path + ".2") if os.path.exists(p)]
            except (OSError, KeyError, NotFound):
                continue
            largest, files = max(largest, sum(sizes)), max(files, len(sizes))
        if not chunk:
            time.sleep(0.2)
    received += len(proc.stdout.read() or b"")
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()[-2000:]
    assert received == total                               # the launcher streamed all of it
    if engine.dialect.name == "podman":   # one file, which conmon truncates at max-size as podman reads it (10m: 10 000 000 bytes):
        # never over it; how full a sample finds it depends on when it was last cut
        assert 0 < largest <= 10**7 + 65536 and files == 1, (largest, files)
    else:
        assert 10 * 1024 * 1024 <= largest <= 2 * 10 * 1024 * 1024 + 65536 and files <= 2, (largest, files)


def test_an_image_declaring_volumes_is_refused_in_words(engine, workspace):
    import io

    tag = "sandbox-test/volumes:1"
    # /home/agent is the agent's home tmpfs now, which takes the place of the image's volume there
    dockerfile = f"FROM {images.AGENT_IMAGE}\nVOLUME /home/agent /etc/cron.d /var/spool/x\n".encode()
    docker_sdk().images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, labels={"dev.sandbox.managed": "1"})
    try:
        policy = tmp_policy = workspace.parent / "volumes.yaml"
        tmp_policy.write_text(f"version: 1\nname: volumes\ndescription: d\nextends: [untrusted]\nimage: {tag}\n")
        result = sandbox("run", "-p", str(policy), "-w", str(workspace), "--", "touch", "/workspace/AGENT-RAN")
    finally:
        docker_sdk().api.remove_image(tag, force=True)
    assert result.returncode == ExitCode.PROBE_FAILED, result.stderr
    assert ("the image declares VOLUME /etc/cron.d, /var/spool/x: writable volumes the policy does not declare"
            in result.stderr), result.stderr
    assert not (workspace / "AGENT-RAN").exists() and ours(engine, workspace) == []


def test_ca_certificates_reach_the_agents_tools_read_only(engine, workspace, tmp_path):
    """A company CA in the policy: inside, SSL_CERT_FILE holds the system CAs plus it (Python's ssl
    loads it), NODE_EXTRA_CA_CERTS it alone, neither writable; a private key is refused."""
    ca = tmp_path / "company-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(ca), "-days", "1", "-subj", "/CN=sandbox test company CA"], check=True, capture_output=True)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"version: 1\nname: cas\ndescription: d\nextends: [untrusted]\nca_certificates: [{ca}]\n")
    script = ("import os, ssl; c = ssl.create_default_context(cafile=os.environ['SSL_CERT_FILE']); "
              "names = [dict(x[0] for x in s['subject']).get('commonName') for s in c.get_ca_certs()]; "
              "print(len(names) > 1, 'sandbox test company CA' in names, "
              "open(os.environ['NODE_EXTRA_CA_CERTS']).read().count('BEGIN CERT'), "
              "os.access(os.environ['SSL_CERT_FILE'], os.W_OK))")
    result = sandbox("run", "-p", str(policy), *BIND, "-w", str(workspace), "--", "python3", "-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "1", "False"], result.stdout
    policy.write_text(f"version: 1\nname: cas\ndescription: d\nextends: [untrusted]\nca_certificates: [{tmp_path / 'ca.key'}]\n")
    refused = sandbox("run", "-p", str(policy), *BIND, "-w", str(workspace), "--", "true")
    assert refused.returncode == 120 and "a private key" in refused.stderr
