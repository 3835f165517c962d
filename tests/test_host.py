"""Host facts from the real filesystem: ~, .. and symlinks are resolved before any refusal."""

from __future__ import annotations

import os
import socket

import pytest

from conftest import preset
from launcher.errors import PolicyError
from launcher.host import host, hostfacts, hostpaths
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import parse_policy


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "project").mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def compile_with_mount(source: str, workspace: str):
    policy = parse_policy(f"version: 1\nname: t\ndescription: d\nmounts: [{{source: '{source}', target: /data}}]\n".encode(), "p.yaml")
    return compile_policy(policy, hostfacts.gather(policy, workspace, "vol"))


def test_symlink_to_credentials_is_resolved_and_refused(home, tmp_path):
    (tmp_path / "innocent").symlink_to(home / ".ssh")
    with pytest.raises(PolicyError) as info:
        compile_with_mount(str(tmp_path / "innocent"), str(home / "project"))
    assert str(home / ".ssh") in str(info.value)


def test_tilde_and_dotdot_are_resolved(home):
    with pytest.raises(PolicyError, match="your home directory"):
        compile_with_mount("~/project/..", str(home / "project"))


def test_workspace_symlink_to_root_is_refused(home, tmp_path):
    (tmp_path / "ws").symlink_to("/")
    policy = preset("untrusted")
    with pytest.raises(PolicyError, match="the whole host"):
        compile_policy(policy, hostfacts.gather(policy, str(tmp_path / "ws"), "vol"))


def test_socket_file_is_refused(home, tmp_path):
    path = tmp_path / "agent.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    try:
        with pytest.raises(PolicyError, match="is a socket"):
            compile_with_mount(str(path), str(home / "project"))
    finally:
        sock.close()


def test_directory_holding_a_socket_is_refused(home, tmp_path):
    (tmp_path / "data" / "deep").mkdir(parents=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "data" / "deep" / "agent.sock"))
    try:
        with pytest.raises(PolicyError, match="holds the socket .*agent.sock"):
            compile_with_mount(str(tmp_path / "data"), str(home / "project"))
    finally:
        sock.close()


def test_docker_host_socket_path_counts_as_runtime(home, tmp_path, monkeypatch):
    (tmp_path / "rt").mkdir()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/rt/engine.sock")
    with pytest.raises(PolicyError, match="container runtime path"):
        compile_with_mount(str(tmp_path / "rt"), str(home / "project"))


def test_protected_anchor_walks_components(tmp_path):
    (tmp_path / ".git").mkdir()
    assert hostpaths.protected_anchor(str(tmp_path), ".git/hooks").given == ".git/hooks"
    assert hostpaths.protected_anchor(str(tmp_path), ".git/hooks").kind == "missing"
    assert hostpaths.protected_anchor(str(tmp_path), ".github/workflows").given == ".github"
    (tmp_path / ".vscode").symlink_to("/etc")
    assert hostpaths.protected_anchor(str(tmp_path), ".vscode").kind == "symlink"
    os.remove(tmp_path / ".vscode")
    (tmp_path / "gitfile").write_text("gitdir: elsewhere")
    assert hostpaths.protected_anchor(str(tmp_path), "gitfile/hooks").kind == "file"


def test_only_listed_environment_names_are_read(home, monkeypatch):
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("UNLISTED", "x")
    facts = hostfacts.gather(preset("untrusted"), str(home / "project"), "vol")
    assert dict(facts.env) == {"LANG": "C.UTF-8", **({"TERM": os.environ["TERM"]} if "TERM" in os.environ else {})}


def test_a_secret_file_path_with_a_nul_byte_is_a_clear_refusal():
    from launcher.errors import PolicyError

    with pytest.raises(PolicyError) as info:
        host.read_secret("api", "", "/tmp/a\0b")
    assert "NUL byte" in str(info.value)
