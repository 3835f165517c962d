"""Real-engine test of packages: and build: (issue 44): an approved repository policy names a Dockerfile
of the repository (FROM our agent image) and a Debian package; `sandbox run` builds the extended
image once (reaching Debian's registry while building, never while testing), the probe proves the
sandbox in it as before, and the agent finds both the Dockerfile's work and the package. A
Dockerfile with another base is refused before anything is built. The images made are removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import BIND, untrusted_bind

from launcher.host import hostfiles, imagebuild
from launcher.policy import trust
from launcher.policy.model import BuildPolicy

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]
POLICY = b"version: 1\npackages: [jq]\nbuild: {dockerfile: .sandbox/Dockerfile, context: .sandbox}\n"
DOCKERFILE = """FROM sandbox/agent:bookworm
USER 0:0
COPY marker.txt /opt/h-image/marker.txt
RUN chmod u+s /usr/bin/env
USER 1000:1000
"""


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def run(workspace, env, *args, script: str, report=None) -> subprocess.CompletedProcess:
    extra = ["--report", str(report)] if report else []
    return subprocess.run(SANDBOX + ["run", *BIND, "-w", str(workspace), *extra, *args, "--", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=900, stdin=subprocess.DEVNULL)


def _setup(workspace, dockerfile: str) -> None:
    (workspace / ".sandbox").mkdir()
    (workspace / ".sandbox" / "Dockerfile").write_text(dockerfile)
    (workspace / ".sandbox" / "marker.txt").write_text("built from the repository's Dockerfile\n")
    (workspace / ".sandbox.yaml").write_bytes(POLICY)
    for path in (workspace / ".sandbox", workspace / ".sandbox" / "Dockerfile", workspace / ".sandbox.yaml"):
        os.chown(path, 1000, 1000)


def pin(workspace) -> str:
    """What --trust-repo-policy names: the policy and the build recipe it reads (hostfiles.LayerFile.approval)."""
    return trust.sha256(hostfiles.repo_policy_file(str(workspace)).approval)


def _remove(*refs: str) -> None:
    for ref in refs:   # only the images this test made (their tags follow this test's content)
        subprocess.run(["docker", "image", "rm", ref], capture_output=True)


def test_an_approved_repository_dockerfile_and_a_package_extend_the_image_and_the_probe_passes(
        engine, workspace, env, tmp_path):
    _setup(workspace, DOCKERFILE)
    plan = imagebuild.gather(replace(untrusted_bind(), packages=("jq",),
                                     build=BuildPolicy(dockerfile=".sandbox/Dockerfile", context=".sandbox")),
                             str(workspace))
    report = tmp_path / "report.json"
    try:
        result = run(workspace, env, "--trust-repo-policy", pin(workspace), report=report,
                     script="jq --version && cat /opt/h-image/marker.txt && "
                            "find / -xdev -perm /6000 -type f 2>/dev/null | wc -l; "
                            "(echo 'RUN curl evil' >> .sandbox/Dockerfile) 2>/dev/null && echo wrote || echo read-only")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0].startswith("jq-") and lines[1] == "built from the repository's Dockerfile"
        assert lines[2] == "0"   # the hardening step removed the setuid bit the Dockerfile set
        assert lines[3] == "read-only" and (workspace / ".sandbox" / "Dockerfile").read_text() == DOCKERFILE
        data = json.loads(report.read_text())
        assert data["plan"]["container"]["image"] == plan.tag
        assert data["probe"]["checks"] and all(c["ok"] for c in data["probe"]["checks"]), data["probe"]["checks"]
        again = run(workspace, env, "--trust-repo-policy", pin(workspace), script="true")
        assert again.returncode == 0 and "building" not in again.stderr, again.stderr   # cached by content
        unapproved = run(workspace, env, script="true")   # nothing is built for an unapproved repository policy
        assert unapproved.returncode == 120 and "not approved on this machine" in unapproved.stderr
    finally:
        _remove(plan.tag, f"{plan.tag}-build")


def test_a_repository_dockerfile_with_another_base_is_refused_before_anything_is_built(engine, workspace, env):
    _setup(workspace, "FROM debian:bookworm-slim\nRUN touch /pwned\n")
    before = subprocess.run(["docker", "images", "-q", "sandbox/agent-ext"], capture_output=True, text=True).stdout
    result = run(workspace, env, "--trust-repo-policy", pin(workspace), script="true")
    assert result.returncode == 120, result.stderr
    assert "build.dockerfile" in result.stderr and "FROM debian:bookworm-slim" in result.stderr
    assert "FROM sandbox/agent:bookworm" in result.stderr and "Traceback" not in result.stderr
    assert subprocess.run(["docker", "images", "-q", "sandbox/agent-ext"], capture_output=True, text=True).stdout == before
