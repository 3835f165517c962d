"""The probe's Pod modes (net=pod, net=podproxy) belong to the Kubernetes target alone: the compiler
never gives a Docker plan one, the launcher refuses to create a container whose probe has one, and
the probe refuses one under Docker itself (tests/test_kubernetes_netpod.py proves the modes)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import fake_facts, preset
from launcher.engine import images
from launcher.engine.enginefake import FakeEngine
from launcher.errors import PolicyError, ProbeFailed
from launcher.launch import launch
from launcher.plan import checks
from launcher.plan.compiler import compile_policy
from launcher.targets.kubernetes import KubeOptions, to_manifests

SANDBOX = [sys.executable, "-m", "launcher"]


def pod_args(name: str, **options) -> list[str]:
    plan = compile_policy(preset(name), fake_facts(), kind="kubernetes")
    pod = next(o for o in to_manifests(plan, KubeOptions(**options)) if o["kind"] == "Pod"
               and o["metadata"]["labels"]["dev.sandbox.kind"] == "kubernetes")
    return pod["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("name", ["untrusted", "ci"])
def test_docker_plans_run_in_dockers_modes_and_carry_no_forbidden_list(name):
    probe = compile_policy(preset(name), fake_facts()).probe
    assert probe.net in checks.DOCKER_MODES and probe.forbidden == ()
    assert not any(a.startswith("forbidden=") for a in probe.to_args())
    assert not set(checks.POD_ONLY) & set(probe.checks)


@pytest.mark.parametrize("name, mode", [("untrusted", "pod"), ("ci", "podproxy")])
def test_the_kubernetes_target_gives_the_pod_its_mode(name, mode):
    args = pod_args(name)
    assert f"net={mode}" in args and any(a.startswith("forbidden=169.254.169.254:80,") for a in args)
    assert next(a for a in args if a.startswith("checks=")) == "checks=" + ",".join(checks.for_mode(mode))


@pytest.mark.parametrize("mode", ["pod", "podproxy"])
def test_the_launcher_refuses_a_docker_container_whose_probe_runs_in_a_pod_mode(mode):
    plan = compile_policy(preset("ci" if mode == "podproxy" else "untrusted"), fake_facts())
    agent = plan.container.command[plan.container.command.index("--"):]
    probe = replace(plan.probe, net=mode, forbidden=("169.254.169.254:80",))
    whole = replace(plan, probe=probe, container=replace(plan.container, command=probe.to_args() + agent))
    args_only = replace(plan, container=replace(plan.container, command=tuple(
        f"net={mode}" if a.startswith("net=") else a for a in plan.container.command)))
    for tampered in (whole, args_only):
        engine = FakeEngine()
        with pytest.raises(ProbeFailed, match="Pod modes are the Kubernetes target's"):
            launch.create_verified(engine, tampered)
        assert "create" not in engine.calls   # nothing was made


def test_a_forbidden_address_that_is_not_address_port_is_a_clear_error(tmp_path):
    plan = compile_policy(preset("untrusted"), fake_facts(), kind="kubernetes")
    for bad in ("169.254.169.254", "fd00:ec2::254:80", "[10.0.0.1]:80", "example.com:80", "10.0.0.1:99999"):
        with pytest.raises(PolicyError, match="--forbidden"):
            to_manifests(plan, KubeOptions(forbidden=(bad,)))
    proxied = compile_policy(preset("ci"), fake_facts(), kind="kubernetes")
    with pytest.raises(PolicyError, match="the proxy's own address"):
        to_manifests(proxied, KubeOptions(forbidden=("10.96.0.200:3128",)))
    result = subprocess.run(SANDBOX + ["compile", "-p", "untrusted", "-w", str(tmp_path), "--format", "kubernetes",
                                       "--forbidden", "nowhere"], capture_output=True, text=True)
    assert result.returncode != 0 and "--forbidden" in result.stderr and "Traceback" not in result.stderr
    ok = subprocess.run(SANDBOX + ["compile", "-p", "untrusted", "-w", str(tmp_path), "--format", "kubernetes",
                                   "--forbidden", "10.1.2.3:80", "--forbidden", "[fd00::1]:443"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "- forbidden=10.1.2.3:80,[fd00::1]:443,gateway:22," in ok.stdout


@pytest.mark.engine
@pytest.mark.parametrize("name", ["untrusted", "ci"])
def test_under_docker_the_probe_itself_refuses_a_pod_mode(engine, name):
    """Docker makes /.dockerenv in every container: the probe takes no Pod mode there, before any
    check (a Pod's image that carries the file fails closed)."""
    images.ensure_for(engine, images.probe_image().tag, lambda line: None)
    args = pod_args(name)
    result = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/probe/busybox",
                             images.probe_image().tag, "sh", "/probe/probe.sh", *args], capture_output=True, text=True)
    assert result.returncode == 97, result.stdout + result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("PROBE\t")]
    assert line.startswith("PROBE\targs\tfail\t") and "under Docker" in line


@pytest.mark.engine
@pytest.mark.parametrize("planned", [True, False])
def test_in_a_pod_mode_what_a_pod_cannot_show_is_na_and_only_where_planned(engine, tmp_path, planned):
    """A Pod has no pids limit of its own (pids=max) and, without the claim's node path (wsroot /),
    no source to compare: the probe reports both n/a, which passes only where the plan's na= says
    so; without it, both fail (a Pod with no limit used to pass limits.pids=max). Run by podman
    (no /.dockerenv), --network none: nothing is sent anywhere."""
    from conftest import external_tool
    from podman_node import Node

    node = Node(external_tool("podman", "apt-get install podman"), tmp_path / "node")
    images.ensure_for(engine, images.probe_image().tag, lambda line: None)
    node.load(images.probe_image().tag)
    args = pod_args("untrusted")
    assert "na=mounts.workspace,limits.pids" in args and "pids=max" in args and "wsroot=/" in args
    if not planned:
        args = ["na=" if a.startswith("na=") else a for a in args]
    (tmp_path / "ws").mkdir()
    (tmp_path / "probe").mkdir()
    image = f"localhost/{images.probe_image().tag}"
    node.run("run", "--rm", "-v", f"{tmp_path / 'probe'}:/out", "--entrypoint", "/probe/busybox", image,
             "cp", "/probe/busybox", "/probe/probe.sh", "/out/")
    result = node.run("run", "--rm", "--network", "none", "--user", "1000:1000", "-v", f"{tmp_path / 'ws'}:/workspace",
                      "-v", f"{tmp_path / 'probe'}:/.sandbox/probe:ro", "--entrypoint", "/.sandbox/probe/busybox", image,
                      "sh", "/.sandbox/probe/probe.sh", *args, check=False)
    lines = {f[1]: f for f in (ln.split("\t") for ln in result.stdout.splitlines()) if f[0] == "PROBE"}
    assert lines, result.stdout + result.stderr
    for check in ("limits.pids", "mounts.workspace"):
        assert lines[check][2] == ("n/a" if planned else "fail"), lines[check]
