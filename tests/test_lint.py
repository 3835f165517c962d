"""`sandbox check`: findings with file, key path and line; errors exit 120, warnings do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.check import lint, lintstack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEAD = "version: 1\nname: t\ndescription: lint test\n"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """An isolated host: no org or user layer unless a test writes one, and a workspace."""
    for name in ("config", "state", "home", "ws"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(tmp_path / "org.yaml"))
    (tmp_path / "org.yaml").write_text("version: 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def findings(place, *files: str, workspace="ws") -> list[lint.Finding]:
    return lintstack.check(tuple(files) or ("untrusted",), str(place / workspace))[0]


def one(found, code) -> lint.Finding:
    matches = [f for f in found if f.code == code]
    assert len(matches) == 1, [str(f) for f in found]
    return matches[0]


def write(place, name, text) -> str:
    (place / name).write_text(text)
    return str(place / name)


def test_the_presets_are_clean(place):
    for preset in ("untrusted", "read-only"):
        assert [f for f in findings(place, preset) if f.severity is not lint.Severity.INFO] == []


def test_secret_shaped_literals_anywhere_are_errors_and_never_shown(place):
    path = write(place, "p.yaml", HEAD + "# token ghp_abcdefghijklmnopqrstu\ncommand: [curl, 'https://bob:hunter22@x.test/']\n")
    found = [f for f in findings(place, path) if f.code == "secret"]
    assert [(f.line, f.severity) for f in found] == [(4, lint.Severity.ERROR), (5, lint.Severity.ERROR)]
    assert all("abcdefgh" not in str(f) and "hunter22" not in str(f) for f in found)


def test_over_broad_and_shadowed_egress(place):
    path = write(place, "p.yaml", HEAD + "network:\n  mode: proxy\n  allow_ip_literals: true\n  allow:\n"
                                         "    - '*.example.com'\n    - api.example.com\n    - raw.githubusercontent.com\n")
    found = findings(place, path)
    assert {(f.code, f.path, f.line) for f in found if f.code in ("egress-broad", "shadowed")} == {
        ("egress-broad", "network.allow_ip_literals", 6), ("egress-broad", "network.allow[0]", 8),
        ("shadowed", "network.allow[1]", 9), ("egress-broad", "network.allow[2]", 10)}
    assert all(f.severity is lint.Severity.WARNING for f in found if f.code not in ("repo-trust", "model-api"))


def test_sensitive_and_writable_mounts(place):
    (place / "home" / ".ssh").mkdir()
    (place / "data").mkdir()
    path = write(place, "p.yaml", HEAD + "mounts:\n  - {source: ~/.ssh, target: /keys}\n"
                                         "  - {source: data, target: /data, access: read-write}\n"
                                         "  - {source: ws/sub, target: /sub, access: read-write}\n")
    (place / "ws" / "sub").mkdir()
    found = findings(place, path)
    sensitive = one(found, "mount-sensitive")
    assert sensitive.severity is lint.Severity.ERROR and sensitive.line == 5 and "credential location" in sensitive.message
    writable = one(found, "mount-writable")
    assert writable.path == "mounts[1].access" and writable.severity is lint.Severity.WARNING


def test_a_repository_layer_asking_for_more_is_capped_not_refused_and_an_unpinned_image(place):
    (place / "ws" / ".sandbox.yaml").write_text("version: 1\nimage: sandbox/agent:bookworm\nlimits:\n  pids: 4096\n"
                                                "env: {pass: [HOME]}\n")
    found = findings(place, "untrusted")
    assert not [f for f in found if f.severity is lint.Severity.ERROR]    # no way for a repository to fail a job
    capped = [f for f in found if f.code == "capped"]
    assert {(f.path, f.line) for f in capped} == {("limits.pids", 4), ("env.pass", 5)}
    assert all("capped, never widened" in f.message for f in capped)
    assert one(found, "image-digest").line == 2
    trust_note = one(found, "repo-trust")
    assert "not approved on this machine" in trust_note.message and "--trust-repo-policy" in trust_note.message


def test_a_repository_layer_that_builds_a_dockerfile_is_a_warning_naming_it(place):
    (place / "ws" / "Dockerfile").write_text("FROM sandbox/agent:bookworm\n")
    (place / "ws" / ".sandbox.yaml").write_text("version: 1\npackages: [jq]\nbuild: {dockerfile: Dockerfile}\n")
    found = one(findings(place, "untrusted"), "repository-build")
    assert found.severity is lint.Severity.WARNING and found.line == 3 and "RUN steps run there" in found.message


def test_rules_another_layer_takes_away_are_unreachable(place):
    os.makedirs(place / "config" / "sandbox")
    write(place, "config/sandbox/policy.yaml", "version: 1\nenv: {pass: [TERM]}\n")
    found = findings(place, "untrusted")
    gone = one(found, "unreachable")
    assert gone.path == "env.pass[1]" and gone.file.endswith("policies/untrusted.yaml")
    assert "LANG never applies: user" in gone.message


def test_extra_files_are_layers_after_the_base_and_invalid_ones_are_errors(place):
    extra = write(place, "team.yaml", "version: 1\nlimits: {pids: 64, memroy: 1g}\n")
    bad = one(findings(place, "untrusted", extra), "invalid")
    assert bad.path == "limits.memroy" and bad.line == 2 and "did you mean 'memory'" in bad.hint


def test_git_hooks_path_findings(place):
    subprocess.run(["git", "init", "-q", str(place / "ws")], check=True)   # git reads only a repository's config
    (place / "ws" / ".git" / "config").write_text("[core]\n\thooksPath = /srv/hooks\n")
    assert one(findings(place), "hooks-outside").severity is lint.Severity.WARNING
    (place / "ws" / ".git" / "config").write_text("[core]\n\thooksPath = .githooks\n")
    assert "kept read-only" in one(findings(place), "hooks-protected").message


def test_cli_exit_codes_and_json(place):
    env = {**os.environ, "PYTHONPATH": ROOT}   # the test runs in a scratch directory
    clean = subprocess.run([sys.executable, "-m", "launcher", "check", "-w", "ws", "--format", "json"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["errors"] == 0
    path = write(place, "p.yaml", HEAD + "env: {set: {KEY: 'sk-abcdefghijklmnop1234'}}\n")
    dirty = subprocess.run([sys.executable, "-m", "launcher", "check", path, "-w", "ws"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert dirty.returncode == 120
    assert f"{path}:4: error: secret-shaped literal" in dirty.stdout and "sk-abcdef" not in dirty.stdout
    assert dirty.stdout.rstrip().endswith("error(s), 0 warning(s)")


def test_line_of_finds_nested_paths():
    data = b"a: 1\nnetwork:\n  allow:\n    - x\n    - y\nenv:\n  set: {K: v}\n"
    assert [lint.line_of(data, p) for p in ("network.allow[1]", "env.set.K", "missing", "line 9, column 2")] == [5, 7, 1, 9]


def test_check_reads_the_pipelines_layer_files_and_compiles_through_it(place, monkeypatch):
    """One path (issue 41): the layers after the base come from stack.layer_files, which `sandbox run`
    applies too, and the compile is the pipeline's own step."""
    from launcher.errors import PolicyError, Problem
    from launcher.host.hostfiles import LayerFile
    from launcher.pipeline import pipeline, stack
    from launcher.policy.layers import LayerKind

    extra = LayerFile(path=str(place / "elsewhere.yaml"), data=b"version: 1\n")
    monkeypatch.setattr(stack, "layer_files", lambda ws: ((LayerKind.ORG, lambda: extra),))
    docs = lintstack.check(("untrusted",), str(place / "ws"))[1]
    assert [(d.kind, d.file) for d in docs] == [(LayerKind.BASE, docs[0].file), (LayerKind.ORG, extra.path)]

    asked = []

    def refuse(result, workspace, **how):
        asked.append((workspace, how))
        raise PolicyError([Problem(file=docs[0].file, path="network", expected="what the pipeline allows",
                                   found="a refusal")])

    monkeypatch.setattr(pipeline, "compiled", refuse)
    found = findings(place)
    assert asked == [(os.path.realpath(place / "ws"), {"kind": "run"})]
    assert any(f.path == "network" and "a refusal" in str(f) for f in found), [str(f) for f in found]
