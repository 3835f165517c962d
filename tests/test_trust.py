"""Trust on first use of a repository's .sandbox.yaml: asked in a terminal (driven through a real
pseudo-terminal here), refused without one unless pinned or ignored, never stored in the workspace."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from launcher.errors import PolicyError
from launcher.policy import trust

SANDBOX = [sys.executable, "-m", "launcher"]
NARROW = b"version: 1\n# this repository needs few processes\nlimits: {pids: 64}\n"


@pytest.fixture
def env(tmp_path):
    """Org, user and state locations of this test only, and not in CI (so a terminal is asked)."""
    (tmp_path / "org.yaml").write_text("version: 1\n")
    values = {k: v for k, v in os.environ.items() if k != "CI"}
    values.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"),
                  SANDBOX_ORG_POLICY=str(tmp_path / "org.yaml"))
    return values


@pytest.fixture
def repo(tmp_path):
    ws = tmp_path / "repo"
    ws.mkdir()
    (ws / ".sandbox.yaml").write_bytes(NARROW)
    return ws


def store(env) -> dict:
    path = os.path.join(env["XDG_STATE_HOME"], "sandbox", "trust.json")
    return json.loads(open(path).read())["approvals"] if os.path.exists(path) else {}


def compile_(repo, env, *flags) -> subprocess.CompletedProcess:
    return subprocess.run(SANDBOX + ["compile", "-w", str(repo), *flags], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)


def pids(result) -> int:
    return json.loads(result.stdout)["container"]["pids_limit"]


def in_terminal(args, env, answer: bytes | None) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal; answer the prompt (if one comes) and return (code, screen)."""
    primary, secondary = os.openpty()
    proc = subprocess.Popen(SANDBOX + args, stdin=secondary, stdout=secondary, stderr=secondary, env=env,
                            start_new_session=True)
    os.close(secondary)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
                if answer is not None and b"[y/N]" in seen:
                    os.write(primary, answer)
                    answer = None
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), seen.decode(errors="replace").replace("\r\n", "\n")
    finally:
        proc.kill()
        os.close(primary)


def test_first_use_shows_the_file_and_applies_it_once_approved(repo, env):
    code, screen = in_terminal(["compile", "-w", str(repo)], env, b"y\n")
    assert code == 0, screen
    assert "has not been approved on this machine" in screen and "  | limits: {pids: 64}" in screen
    assert "limits.pids: 256 -> 64" in screen and '"pids_limit": 64' in screen
    digest = trust.sha256(NARROW)
    assert store(env)[str(repo)]["sha256"] == digest and store(env)[str(repo)]["content"] == NARROW.decode()
    assert sorted(os.listdir(repo)) == [".sandbox.yaml"]   # nothing stored in the workspace
    # Approved content applies without a prompt, also where nobody could answer one.
    assert pids(compile_(repo, env)) == 64


def test_a_change_shows_the_diff_and_a_refusal_applies_nothing(repo, env):
    assert in_terminal(["compile", "-w", str(repo)], env, b"y\n")[0] == 0
    (repo / ".sandbox.yaml").write_bytes(NARROW.replace(b"64", b"32"))
    code, screen = in_terminal(["compile", "-w", str(repo)], env, b"n\n")
    assert code == 120, screen
    assert "changed since you approved it" in screen
    assert "  -limits: {pids: 64}" in screen and "  +limits: {pids: 32}" in screen
    assert "not approved" in screen and '"pids_limit"' not in screen
    assert store(env)[str(repo)]["sha256"] == trust.sha256(NARROW)


def test_hidden_characters_are_shown_escaped_before_approval(repo, env):
    (repo / ".sandbox.yaml").write_bytes("version: 1\n# ok\u202e\u2066 hidden\nlimits: {pids: 64}\n".encode())
    code, screen = in_terminal(["compile", "-w", str(repo)], env, b"n\n")
    assert code == 120 and "\\u202e\\u2066 hidden" in screen and "\u202e" not in screen


def test_ci_never_prompts_even_in_a_terminal(repo, env):
    code, screen = in_terminal(["compile", "-w", str(repo)], {**env, "CI": "true"}, b"y\n")
    assert code == 120 and "[y/N]" not in screen and "non-interactive runs never ask" in screen
    assert store(env) == {}


def test_without_a_terminal_an_unapproved_file_is_refused_with_its_digest(repo, env):
    result = compile_(repo, env)
    digest = trust.sha256(NARROW)
    assert result.returncode == 120 and result.stdout == ""
    assert f"not approved on this machine (sha256 {digest})" in result.stderr
    assert f"--trust-repo-policy {digest}" in result.stderr and "--ignore-repo-policy" in result.stderr


def test_a_pin_applies_exactly_that_content_and_records_nothing(repo, env):
    digest = trust.sha256(NARROW)
    assert pids(compile_(repo, env, "--trust-repo-policy", digest)) == 64
    assert pids(compile_(repo, env, "--trust-repo-policy", f"sha256:{digest.upper()}")) == 64
    assert store(env) == {}
    (repo / ".sandbox.yaml").write_bytes(NARROW + b"# changed\n")
    result = compile_(repo, env, "--trust-repo-policy", digest)
    assert result.returncode == 120 and "the file is not the one you pinned" in result.stderr


def test_ignore_runs_without_the_repository_layer_which_stays_protected(repo, env):
    result = compile_(repo, env, "--ignore-repo-policy")
    assert result.returncode == 0 and pids(result) == 256 and "--ignore-repo-policy" in result.stderr
    assert ".sandbox.yaml" in json.loads(result.stdout)["copy"]["protected"]   # untrusted: apply never takes it back


@pytest.mark.parametrize("flags, code, fragment", [
    (["--ignore-repo-policy", "--trust-repo-policy", "a" * 64], 2, "exclude each other"),
    (["--trust-repo-policy", "abc"], 2, "64 hex digits"),
])
def test_usage_errors(repo, env, flags, code, fragment):
    result = compile_(repo, env, *flags)
    assert result.returncode == code and fragment in result.stderr


def test_a_pin_without_a_repository_policy_is_refused(repo, env):
    os.remove(repo / ".sandbox.yaml")
    result = compile_(repo, env, "--trust-repo-policy", "a" * 64)
    assert result.returncode == 120 and "pinned by --trust-repo-policy" in result.stderr


def test_a_file_asking_for_more_is_capped_so_the_review_shows_it_changes_nothing(repo, env):
    (repo / ".sandbox.yaml").write_bytes(b"version: 1\nworkspace: {access: read-write}\nnetwork: {mode: proxy}\n"
                                         b"env: {pass: [HOME]}\n")
    code, screen = in_terminal(["compile", "-w", str(repo), "--policy", "read-only"], env, b"y\n")
    # read-write and proxy are capped (read-only and none stay); HOME is not passed, so nothing is
    assert code == 0 and "[y/N]" in screen and "env.pass: TERM, LANG -> (none)" in screen, screen
    assert "workspace.access:" not in screen.split("[y/N]")[0] and "network.mode:" not in screen.split("[y/N]")[0]


def test_a_symlinked_or_special_repository_policy_is_refused(repo, env, tmp_path):
    os.remove(repo / ".sandbox.yaml")
    (tmp_path / "elsewhere.yaml").write_bytes(NARROW)
    (repo / ".sandbox.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    result = compile_(repo, env)
    assert result.returncode == 120 and "a symbolic link" in result.stderr
    os.remove(repo / ".sandbox.yaml")
    os.mkfifo(repo / ".sandbox.yaml")   # would block a plain open()
    result = compile_(repo, env)
    assert result.returncode == 120 and "expected a readable regular file" in result.stderr
    os.remove(repo / ".sandbox.yaml")
    (repo / ".sandbox.yaml").mkdir()   # the placeholder a running sandbox leaves: no policy at all
    assert pids(compile_(repo, env)) == 256


def test_a_trust_store_inside_the_workspace_is_refused(repo, env):
    code, screen = in_terminal(["compile", "-w", str(repo)], {**env, "XDG_STATE_HOME": str(repo / "state")}, b"y\n")
    assert code == 120 and "a trust store outside the workspace" in screen and not (repo / "state").exists()


def test_store_round_trip_and_status():
    store_ = trust.approve({}, "/ws", NARROW, "2024-01-01T00:00:00+00:00")
    again = trust.parse_store(trust.dump_store(store_), "trust.json")
    assert again == store_
    assert trust.status(again, "/ws", NARROW, None) is trust.Status.APPROVED
    assert trust.status(again, "/ws", NARROW + b"\n", None) is trust.Status.CHANGED
    assert trust.status(again, "/other", NARROW, None) is trust.Status.NEW
    assert trust.status({}, "/ws", NARROW, trust.sha256(NARROW)) is trust.Status.PINNED


def test_a_corrupt_store_is_an_error_not_an_empty_one():
    with pytest.raises(PolicyError, match="remove the file"):
        trust.parse_store("{not json", "trust.json")


def test_review_text_escapes_terminal_controls():
    text = trust.review_text("p", "version: 1\n# \x1b[2Kx\rhidden: yes\n".encode(), None, "  nothing")
    assert "\x1b" not in text and "\r" not in text
    assert "  | # \\u001b[2Kx\n  | hidden: yes" in text   # a carriage return starts a new line, as in YAML


def test_concurrent_approvals_are_all_kept(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from launcher.host import host
    from launcher.policy import trust

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    def approve(n: int) -> None:
        def change(current: str) -> str:
            store = trust.parse_store(current, "trust.json")
            return trust.dump_store(trust.approve(store, f"/ws/{n}", b"version: 1\n", "now"))
        host.update_trust_store(change)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(approve, range(40)))
    store = trust.parse_store(host.read_trust_store()[1], "trust.json")
    assert sorted(store) == sorted(f"/ws/{n}" for n in range(40))
