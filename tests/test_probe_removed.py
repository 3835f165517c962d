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

from launcher import checks, images, workspaces
from launcher.compiler import compile_policy
from launcher.model import WorkspaceMode
from launcher.plan import PROBE_DIR, Mount, MountKind
from launcher.resources import images_dir
from launcher.verify import parse_probe

MARKER = "AGENT-RAN"
PROBE_SH = images_dir() / "probe" / "probe.sh"
# The ids a Docker sandbox in network mode none reports; the proxy mode's egress.* and the Pod
# modes' pod.* are not called there (their removal is not observable in this container).
IDS = checks.for_mode("none")


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


@pytest.fixture(scope="module")
def run_probe(engine, tmp_path_factory):
    """A function running a given probe.sh text in a fresh container of the untrusted (bind) plan,
    with busybox and that script bind-mounted where the probe volume goes; returns (report, exit
    code, whether the agent ran). The one place that makes such a container (the launcher's own
    launch path would refuse a modified probe)."""
    base = tmp_path_factory.mktemp("removed")
    workspace = make_workspace(base)
    policy = preset("untrusted")
    policy = replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND))
    plan = compile_policy(policy, launch_facts(engine, policy, workspace),
                          command=("/.sandbox/probe/busybox", "touch", f"/workspace/{MARKER}"))
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
        spec = replace(plan.container, name=f"{plan.container.name}-{probe.name}", mounts=mounts)
        ref = engine.create(spec)
        try:
            engine.start(ref)
            code = engine.wait(ref)
            report = parse_probe(engine.logs(ref).splitlines())
        finally:
            engine.remove(ref)
        ran = (workspace / MARKER).exists()
        return report, code, ran

    workspaces.register(str(workspace), plan.placeholders)
    try:
        yield run
    finally:
        workspaces.release(str(workspace), plan.placeholders, others_exist=False)


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
