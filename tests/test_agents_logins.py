"""Subscription logins brokered by the proxy, with the real CLIs: `sandbox run --agent NAME
--model-key-env VAR` where VAR holds a subscription's token. The stand-in model API (api.test on
--egress-network) accepts only the real token in exactly the header the real API wants; the sandbox
holds a placeholder login. After the CLI's tool call, the sandbox's environment and every file of its
home, workspace and /tmp are printed (from inside) and searched here: the token is in none of them,
nor in anything the launcher printed or reported."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import shlex
import sys
import time
import uuid

import pytest

from conftest import owned_workspace
from launcher import agents
from launcher.engine import images

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SANDBOX = [sys.executable, "-m", "launcher"]
UPSTREAM = "api.test"
# After the CLI: what the sandbox holds, written into the workspace for the test to search (not
# printed: the file does not depend on the output stream's tail), the CLI's exit code kept. A moment
# first: Claude's leftover helpers still rewrite ~/.claude just after it exits, and a directory
# changing under `find` loses entries.
DUMP = ('rc=$?; sleep 2; { echo "== environment"; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"; '
        'echo "== files"; find "$HOME" /workspace /tmp -type f -size -4096k ! -name sandbox-dump.txt | '
        'while read -r f; do echo "-- $f"; cat "$f"; echo; done; } > /workspace/sandbox-dump.txt; exit $rc')


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=check)


@contextlib.contextmanager
def stand_in(expected: str):
    """The stand-in model API as api.test on an internal network of its own, accepting only `expected`."""
    from conftest import model_api_network

    network = f"sandbox-test-logins-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with model_api_network(network, UPSTREAM, "dev.sandbox.test=logins", expected) as (log, _):
        yield network, log


@pytest.fixture(scope="module")
def model_api_image(engine):
    images.build(engine, images.model_api_image(), lambda line: None)


def run_agent(name: str, network: str, workspace, report, env: dict[str, str], *flags: str, after: str = ""
              ) -> tuple[int, str]:
    profile = agents.get(name)
    task = " ".join(shlex.quote(a.replace("{task}", "Create the marker file.")) for a in profile.headless)
    # The default preset (proxy mode for the model API alone), its bind variant: the dump is read here
    done = subprocess.run([*SANDBOX, "run", "--policy", "untrusted", "--workspace-mode", "bind", "--agent", name, *flags,
                           "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network,
                           "--report", str(report), "-w", str(workspace), "--", "sh", "-c", f"{task}; {DUMP.replace('rc=$?; ', 'rc=$?; ' + after, 1)}"],
                          env={**os.environ, **env}, capture_output=True, timeout=600)
    dump = (workspace / "sandbox-dump.txt").read_text(errors="replace") if (workspace / "sandbox-dump.txt").exists() else ""
    return done.returncode, done.stdout.decode(errors="replace") + "\n" + done.stderr.decode(errors="replace") + dump


def test_claude_code_with_a_setup_token_signs_in_as_a_subscriber_through_the_proxy(engine, model_api_image, tmp_path):
    """An sk-ant-oat01-… token (`claude setup-token`) is recognised by its shape: upstream it is
    Authorization: Bearer with Claude's own oauth beta header, never x-api-key; inside, the CLI
    holds a placeholder login (~/.claude/.credentials.json) and no secret-shaped variable."""
    token = "sk-ant-oat01-" + uuid.uuid4().hex
    workspace = owned_workspace(tmp_path)
    report = tmp_path / "report.json"
    with stand_in(token) as (network, log):
        rc, said = run_agent("claude-code", network, workspace, report, {"CLAUDE_CODE_OAUTH_TOKEN": token},
                             "--model-key-env", "CLAUDE_CODE_OAUTH_TOKEN")
        requests = log()
    assert rc == 0, said[-4000:]
    assert (workspace / "marker-claude-code.txt").is_file(), said[-4000:]
    api = [r for r in requests if r["method"] == "POST"]
    assert len(api) >= 2 and all(r["status"] == 200 for r in api), said[-4000:]
    for r in api:
        assert r["headers"].get("authorization") == f"Bearer {token}"
        assert "x-api-key" not in r["headers"]
        assert "oauth-2025-04-20" in r["headers"].get("anthropic-beta", "").split(",")
    assert [r for r in requests if r["method"] == "CONNECT"] == []   # no profile fetch, nothing else tried
    assert "== environment" in said and "== files" in said, said[-3000:]   # the dump ran
    assert "-- /home/agent/.claude/.credentials.json\n" in said, said[-3000:]   # the placeholder login
    assert token not in said   # the token is in no variable, file or line printed
    assert token not in report.read_text() and json.loads(report.read_text())["probe"]["ok"]


def test_claude_code_an_api_key_still_goes_as_x_api_key(engine, model_api_image, tmp_path):
    """The other kind, said explicitly: the same variable holding an API key, --model-key-kind api-key."""
    key = "sk-ant-api03-" + uuid.uuid4().hex
    workspace = owned_workspace(tmp_path)
    with stand_in(key) as (network, log):
        rc, said = run_agent("claude-code", network, workspace, tmp_path / "report.json", {"MODEL_KEY": key},
                             "--model-key-env", "MODEL_KEY", "--model-key-kind", "api-key")
        api = [r for r in log() if r["method"] == "POST"]
    assert rc == 0, said[-4000:]
    assert api and all(r["headers"].get("x-api-key") == key and "authorization" not in r["headers"] for r in api)
    assert key not in said


def jwt(claims: dict) -> str:
    import base64

    def part(data) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{uuid.uuid4().hex}"


def codex_auth(exp: float, account: str) -> dict:
    """An auth.json as `codex login` writes it (the tokens made up here)."""
    return {"OPENAI_API_KEY": None, "last_refresh": "2026-11-30T10:00:00Z", "tokens": {
        "id_token": jwt({"email": "user@example.invalid", "https://api.openai.com/auth": {
            "chatgpt_plan_type": "plus", "chatgpt_account_id": account}}),
        "access_token": jwt({"exp": int(exp), "n": uuid.uuid4().hex}), "refresh_token": "rt-" + uuid.uuid4().hex,
        "account_id": account}}


@contextlib.contextmanager
def refresh_stand_in(answer: dict):
    """The ChatGPT sign-in's token endpoint on the host's loopback: answers `answer`, records bodies."""
    import http.server
    import threading

    seen: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/oauth/token", seen
    finally:
        server.shutdown()
        server.server_close()


# From inside, after the CLI: the endpoint forwards only the Codex API's paths (the token is good for
# all of chatgpt.com/backend-api, the user's conversations too).
OUTSIDE = ('curl -s -o /dev/null -w "outside=%{http_code}\\n" "$SANDBOX_ENDPOINT_MODEL/backend-api/conversations"; '
           'curl -s --path-as-is -o /dev/null -w "dots=%{http_code}\\n" '
           '"$SANDBOX_ENDPOINT_MODEL/backend-api/codex/../conversations"; ')


@pytest.mark.parametrize("expired", [False, True])
def test_codex_with_a_chatgpt_sign_in_is_brokered_and_refreshed_on_the_host(expired, engine, model_api_image, tmp_path):
    """--model-key-file auth.json of a ChatGPT sign-in: upstream Authorization: Bearer <access token>
    and chatgpt-account-id, only under /backend-api/codex/; inside, placeholder JWTs. An expired
    token is refreshed on the host first (the stand-in sign-in on loopback) and the new tokens are
    written back to the file; the old ones go nowhere."""
    account = "acct-" + uuid.uuid4().hex
    auth = codex_auth(time.time() + (-60 if expired else 10 * 86400), account)
    fresh = {"id_token": jwt({"https://api.openai.com/auth": {"chatgpt_account_id": account}}),
             "access_token": jwt({"exp": int(time.time()) + 10 * 86400}), "refresh_token": "rt-" + uuid.uuid4().hex}
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps(auth))
    auth_file.chmod(0o600)
    old = auth["tokens"]
    token = fresh["access_token"] if expired else old["access_token"]
    workspace = owned_workspace(tmp_path)
    report = tmp_path / "report.json"
    with refresh_stand_in(fresh) as (url, refreshes), stand_in(token) as (network, log):
        rc, said = run_agent("codex", network, workspace, report, {"SANDBOX_CODEX_REFRESH_URL": url},
                             "--model-key-file", str(auth_file), after=OUTSIDE)
        requests = log()
    assert rc == 0, said[-4000:]
    assert (workspace / "marker-codex.txt").is_file(), said[-4000:]
    api = [r for r in requests if r["method"] == "POST"]
    assert api and all(r["status"] == 200 and r["path"].startswith("/backend-api/codex/") for r in requests), said[-4000:]
    for r in requests:
        assert r["headers"].get("authorization") == f"Bearer {token}"
        assert r["headers"].get("chatgpt-account-id") == account
    assert "outside=403" in said and "dots=403" in said   # refused by the proxy, never forwarded
    assert ("== files" in said and "sandbox-placeholder-account" in said)   # the dump ran; placeholders inside
    secrets = [account, old["access_token"], old["refresh_token"], old["id_token"], *fresh.values()]
    for value in secrets:   # the real login is in no variable, file or line printed, nor in the report
        assert value not in said and value not in report.read_text()
    written = json.loads(auth_file.read_text())
    if expired:
        assert refreshes == [{"client_id": "app_EMoamEEZ73f0CkXaXp7hrann", "grant_type": "refresh_token",
                              "refresh_token": old["refresh_token"]}]
        assert {k: written["tokens"][k] for k in fresh} == fresh and written["tokens"]["account_id"] == account
        assert written["last_refresh"] != auth["last_refresh"] and auth_file.stat().st_mode & 0o777 == 0o600
    else:
        assert refreshes == [] and written == auth


def test_up_with_a_setup_token_gives_claudes_tui_signed_in_as_a_subscriber(engine, model_api_image, tmp_path):
    """`sandbox up --agent claude-code --model-key-env CLAUDE_CODE_OAUTH_TOKEN` through a pty: the TUI
    starts without a login or dialog, a typed task gets done, and the token is only in the proxy."""
    from conftest import claude_tui_task, up_in_a_pty

    token = "sk-ant-oat01-" + uuid.uuid4().hex
    workspace = owned_workspace(tmp_path)
    name = f"sandbox-test-up-login-{os.getpid()}"
    with stand_in(token) as (network, log):
        command = [*SANDBOX, "up", "--agent", "claude-code", "--model-key-env", "CLAUDE_CODE_OAUTH_TOKEN",
                   "--model-upstream", f"http://{UPSTREAM}", "--egress-network", network, "--name", name, str(workspace)]
        try:
            with up_in_a_pty(command, {"CLAUDE_CODE_OAUTH_TOKEN": token}) as (fd, shown):
                shown = claude_tui_task(fd, workspace, shown, lambda: docker(   # the default preset: a copy
                    "exec", name, "test", "-f", "/workspace/marker-claude-code.txt", check=False).returncode == 0,
                    started=True)   # `up --agent` opened the TUI
                assert b"Not logged in" not in shown and b"/login" not in shown
                api = [r for r in log() if r["method"] == "POST"]
                assert api and all(r["headers"].get("authorization") == f"Bearer {token}" for r in api)
                inspect = docker("inspect", name).stdout
                inside = docker("exec", name, "sh", "-c", "cat /proc/*/environ; find ~ -type f -exec cat {} +").stdout
                assert "claudeAiOauth" in inside
                assert token not in inspect and token not in inside and token not in shown.decode(errors="replace")
        finally:
            subprocess.run([*SANDBOX, "down", name], capture_output=True, timeout=120)
            subprocess.run([*SANDBOX, "discard", "--yes", name], capture_output=True, timeout=120)
