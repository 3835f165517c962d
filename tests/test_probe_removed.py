"""Each probe check's own function removed in turn: that check (not only the untampered controls)
must fail with "the check did not report", every other check must pass, and the agent must not run.
The modified probe runs in a container the test creates from the plan's own spec, outside the
launcher's launch path (which refuses a probe volume whose files differ from the expected ones)."""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import docker_sdk, launch_facts, make_workspace, preset
from fakes import Recorder

from launcher.egress import proxy
from launcher.engine import images
from launcher.engine.verify import parse_probe
from launcher.host import workspaces
from launcher.launch import launch
from launcher.plan import checks
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import PROBE_DIR, Mount, MountKind, unwatched
from launcher.policy.model import WorkspaceMode
from launcher.policy.policy import with_allowed
from launcher.resources import images_dir
from launcher.selftest.testnet import Internet

MARKER = "AGENT-RAN"
PROBE_SH = images_dir() / "probe" / "probe.sh"
# The ids a Docker sandbox reports in network mode none, and those only proxy mode adds (egress.*).
# Not here: identity.userns (only on an engine that remaps ids: tests/test_rootless_engine.py has
# its tamper) and the Kubernetes Pod modes' pod.* (tests/test_kubernetes_netpod.py).
IDS = checks.for_mode("none")
PROXY_IDS = tuple(i for i in checks.for_mode("proxy") if i not in IDS)
TOUCH = ("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}")
WAIT = 60   # seconds for a probe container to exit (each needs about one here)


def without_function(script: str, check_id: str) -> str:
    """probe.sh with `check_<id>`'s definition removed: its one line, or up to its closing brace at
    column 0."""
    name = "check_" + check_id.replace(".", "_")
    lines = script.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{name}() {{")]
    assert len(starts) == 1, f"probe.sh defines {name} {len(starts)} times"
    first = starts[0]
    last = first if lines[first].rstrip().endswith("}") else lines.index("}", first)
    cut = "\n".join(lines[:first] + lines[last + 1:])
    assert f"{name}()" not in cut
    return cut


def exit_code(ref: str, timeout: float) -> int | None:
    """The container's exit code, or None if it still runs after `timeout` seconds (a probe that
    waits for a word from the launcher before it starts the agent would: nothing here sends one)."""
    try:
        return docker_sdk().api.wait(ref, timeout=timeout)["StatusCode"]
    except Exception:   # the SDK's read timeout (requests' or urllib3's, by version)
        return None


def busybox_of_probe_image(dest: Path) -> None:
    """The probe image's own busybox (the one the probe volume holds), copied out of the image."""
    api = docker_sdk().api
    ref = api.create_container(images.probe_image().tag, command=["/probe/busybox", "true"])["Id"]
    try:
        stream, _ = api.get_archive(ref, "/probe/busybox")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            dest.write_bytes(tar.extractfile("busybox").read())
    finally:
        api.remove_container(ref, force=True)
    dest.chmod(0o555)


def prober(engine, plan, workspace: Path, base: Path):
    """A function running a given probe.sh text in a fresh container of `plan`'s own spec, with
    busybox and that script bind-mounted where the probe volume goes; returns (report, exit code,
    whether the agent ran). The one place that makes such a container (the launcher's own launch
    path would refuse a modified probe)."""
    busybox = base / "busybox"
    busybox_of_probe_image(busybox)
    made = iter(range(10_000))

    def run(script: str):
        (workspace / MARKER).unlink(missing_ok=True)
        probe = base / f"probe-{next(made)}"
        probe.mkdir()
        os.link(busybox, probe / "busybox")
        (probe / "probe.sh").write_text(script)
        (probe / "probe.sh").chmod(0o444)
        probe.chmod(0o555)
        mounts = tuple(Mount(kind=MountKind.BIND, source=str(probe), target=PROBE_DIR, read_only=True)
                       if m.target == PROBE_DIR else m for m in plan.container.mounts)
        assert mounts != plan.container.mounts, "the plan has no probe mount"
        # no launcher reads this report: the probe's own verdict starts the agent (gate=-)
        spec = replace(unwatched(plan).container, name=f"{plan.container.name}-{probe.name}", mounts=mounts)
        ref = engine.create(spec)
        try:
            engine.start(ref)
            code = exit_code(ref, WAIT)
            report = parse_probe(engine.logs(ref).splitlines())
        finally:
            engine.remove(ref)
        return report, code, (workspace / MARKER).exists()

    return run


@pytest.fixture(scope="module")
def run_probe(engine, tmp_path_factory):
    """prober() on the untrusted preset's plan in bind mode (network none)."""
    base = tmp_path_factory.mktemp("removed")
    workspace = make_workspace(base)
    policy = preset("untrusted")
    policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND))
    plan = compile_policy(policy, launch_facts(engine, policy, workspace), command=TOUCH)
    workspaces.register(str(workspace), plan.placeholders)
    try:
        yield prober(engine, plan, workspace, base)
    finally:
        workspaces.release(str(workspace), plan.placeholders, others_exist=False)


@pytest.fixture(scope="module")
def run_probe_proxy(engine, tmp_path_factory):
    """prober() on the ci preset's plan (proxy mode): its networks and proxy made once by the
    launcher's own proxy start, the upstream world our own containers (selftest's Internet)."""
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    base = tmp_path_factory.mktemp("removed-proxy")
    workspace = make_workspace(base)
    internet = Internet(engine)
    try:
        policy = with_allowed(preset("ci"), ({"host": "allowed.test", "private": True},))
        facts = launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag)
        plan = compile_policy(policy, facts, egress_network=internet.network, command=TOUCH)
        workspaces.register(str(workspace), plan.placeholders)
        try:
            pinned = proxy.start(engine, plan, Recorder(), lambda pinned: pinned)   # creates no sandbox container
            yield prober(engine, pinned, workspace, base)
        finally:
            launch.remove_sandbox(engine, plan.container.name)   # the proxy and the networks (and the placeholders)
    finally:
        internet.close()


@pytest.mark.engine
def test_the_unmodified_probe_passes_in_the_removal_container(run_probe):
    """The control: the same container with probe.sh as shipped passes every check and runs the agent."""
    report, code, ran = run_probe(PROBE_SH.read_text())
    assert report.ok and [c.id for c in report.checks] == list(IDS), report.failed
    assert code == 0 and ran


@pytest.mark.engine
@pytest.mark.parametrize("check", IDS)
def test_a_removed_check_function_fails_that_check_and_the_agent_never_runs(run_probe, check):
    report, code, ran = run_probe(without_function(PROBE_SH.read_text(), check))
    failed = {c.id: c.observed for c in report.failed}
    assert failed == {check: "the check did not report"}, failed
    assert report.finished and not report.ok and code == 97 and not ran


def test_every_check_of_the_list_has_its_own_function_in_probe_sh():
    """The removal above is meaningful only if each id has exactly one function to remove."""
    script = PROBE_SH.read_text()
    for check in checks.ALL:
        without_function(script, check)


@pytest.mark.engine
def test_the_unmodified_probe_passes_in_the_proxy_mode_removal_container(run_probe_proxy):
    report, code, ran = run_probe_proxy(PROBE_SH.read_text())
    assert report.ok and [c.id for c in report.checks] == list(checks.for_mode("proxy")), report.failed
    assert code == 0 and ran


@pytest.mark.engine
@pytest.mark.parametrize("check", PROXY_IDS)
def test_a_removed_proxy_mode_check_function_fails_that_check_and_the_agent_never_runs(run_probe_proxy, check):
    report, code, ran = run_probe_proxy(without_function(PROBE_SH.read_text(), check))
    failed = {c.id: c.observed for c in report.failed}
    assert failed == {check: "the check did not report"}, failed
    assert report.finished and not report.ok and code == 97 and not ran
