"""Subscription logins without an engine (launcher/agents/logins.py, chatgpt.py): the kind recognised
by the value's shape, the profile each login wires, the proxy configuration it compiles to, Codex's
auth.json read and refreshed on the host, and the command line's refusals. The real CLIs against the
stand-in are tests/test_agents_logins.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from launcher import agents
from launcher.agents import chatgpt, logins
from launcher.errors import PolicyError
from launcher.pipeline.pipeline import AgentChoice
from launcher.policy import secrets

SANDBOX = [sys.executable, "-m", "launcher"]
NOW = 1_800_000_000.0


def jwt(claims: dict) -> str:
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln"


def auth_json(exp: float | None, account: str | None = "acct-1", last: str = "2027-01-10T00:00:00Z") -> dict:
    return {"OPENAI_API_KEY": None, "last_refresh": last, "tokens": {
        "id_token": jwt({"https://api.openai.com/auth": {"chatgpt_account_id": "acct-from-id-token"}}),
        "access_token": jwt({} if exp is None else {"exp": exp}), "refresh_token": "rt-old",
        **({"account_id": account} if account else {})}}


def test_the_kind_is_recognised_by_the_values_shape():
    claude, codex = agents.get("claude-code"), agents.get("codex")
    assert logins.recognise(claude, "sk-ant-oat01-abc") == "oauth"
    assert logins.recognise(claude, "sk-ant-api03-abc") == logins.API_KEY
    assert logins.recognise(claude, None) == logins.API_KEY   # not readable yet (compile): an API key
    assert logins.recognise(codex, json.dumps(auth_json(NOW))) == "chatgpt"
    assert logins.recognise(codex, "sk-proj-abc") == logins.API_KEY
    assert logins.recognise(codex, '["tokens"]') == logins.API_KEY


def test_claude_oauth_wires_a_placeholder_subscriber_and_a_bearer_header():
    profile = logins.applied(agents.get("claude-code"), "oauth")
    assert profile.model.header == "Authorization: Bearer {value}" and profile.model.path == "/v1/"
    assert profile.model.key_env is None   # no ANTHROPIC_API_KEY, placeholder or not
    env = profile.environment("$E", key_in_file=True)
    assert not any(secrets.secret_name(name) for name in env)
    files = profile.home_files("$E", key_in_file=True)
    login = json.loads(files[".claude/.credentials.json"])["claudeAiOauth"]
    assert login["accessToken"] == agents.PLACEHOLDER_KEY and login["scopes"] == ["user:inference"]
    assert login["expiresAt"] > 10 ** 13 and login["refreshToken"] is None
    assert "apiKeyHelper" not in files[".claude/settings.json"]   # a kept home's API-key helper is replaced


def test_codex_chatgpt_wires_placeholder_jwts_and_the_codex_backend():
    profile = logins.applied(agents.get("codex"), "chatgpt")
    model = profile.model
    assert (model.upstream, model.path, model.login) == ("https://chatgpt.com", "/backend-api/codex/", "codex-chatgpt")
    files = profile.home_files("http://proxy:3130", key_in_file=True)
    placeholder = json.loads(files[".codex/auth.json"])
    tokens = placeholder["tokens"]
    assert chatgpt.claims(tokens["id_token"])["https://api.openai.com/auth"]["chatgpt_account_id"] == logins.CODEX_ACCOUNT
    assert chatgpt.claims(tokens["access_token"])["exp"] > 30 * 10 ** 9   # never refreshed inside
    assert tokens["refresh_token"] == agents.PLACEHOLDER_KEY and placeholder["OPENAI_API_KEY"] is None
    config = files[".codex/config.toml"]
    assert 'base_url = "http://proxy:3130/backend-api/codex"' in config and "requires_openai_auth = true" in config
    assert "apps = false" in config


def test_a_login_that_cannot_be_brokered_says_why():
    with pytest.raises(ValueError, match="google cannot be brokered: its access token lives one hour"):
        logins.applied(agents.get("gemini-cli"), "google")
    with pytest.raises(ValueError, match=r"aider has no oauth login \(possible: api-key\)"):
        logins.applied(agents.get("aider"), "oauth")
    assert logins.applied(agents.get("aider"), logins.API_KEY) is agents.get("aider")


def test_the_agent_choice_reads_the_kind_from_the_host_value(monkeypatch):
    monkeypatch.setenv("LOGIN_UNDER_TEST", "sk-ant-oat01-xyz")
    choice = AgentChoice(name="claude-code", key_env="LOGIN_UNDER_TEST")
    assert choice.profile.model.header == "Authorization: Bearer {value}"
    said = AgentChoice(name="claude-code", key_env="LOGIN_UNDER_TEST", kind="api-key")
    assert said.profile.model.header == "x-api-key: {value}"   # said explicitly wins over the shape
    with pytest.raises(PolicyError, match="--model-key-kind"):
        AgentChoice(name="claude-code", key_env="LOGIN_UNDER_TEST", kind="chatgpt").profile


def test_the_proxy_config_of_a_login_forwards_only_its_paths_with_every_header():
    from launcher.plan.plan import SecretEndpoint
    from launcher.plan.squidconf import render_squid

    secret = SecretEndpoint(name="model", var="SANDBOX_SECRET_0", from_env="", from_file="auth.json", port=3130,
                            scheme="https", host="chatgpt.com", upstream_port=443, header="Authorization",
                            template="Bearer {value}", login="codex-chatgpt", path="/backend-api/codex/",
                            extra=(("chatgpt-account-id", "SANDBOX_SECRET_0_1"),))
    config = render_squid("t", (), secrets=(secret,))
    assert "acl secret0_path urlpath_regex ^/backend-api/codex/\n" in config
    assert "acl secret0_dots urlpath_regex \\.\\. %2[eE]\n" in config
    lines = config.splitlines()
    order = [lines.index(x) for x in ("http_access deny secret0_in !secret0_path", "http_access deny secret0_in secret0_dots",
                                      "http_access allow secret0_in")]
    assert order == sorted(order)   # the denials come first
    for name, value in (("Authorization", "Bearer @SANDBOX_SECRET_0@"), ("chatgpt-account-id", "@SANDBOX_SECRET_0_1@")):
        assert f"request_header_access {name} deny secret0_in" in lines
        assert f'request_header_add {name} "{value}" secret0_in' in lines
    plain = render_squid("t", (), secrets=(SecretEndpoint(**{**secret.__dict__, "path": "", "extra": ()}),))
    assert "urlpath_regex" not in plain and "chatgpt-account-id" not in plain


def test_the_proxy_start_script_fills_a_logins_further_headers(tmp_path):
    """images/proxy/start-proxy's substitution, run here with perl on a config naming both variables."""
    script = open(os.path.join(os.path.dirname(__file__), "..", "images", "proxy", "start-proxy")).read()
    perl = script[script.index("perl -pi -e '") + len("perl -pi -e '"):script.index("}ge'") + len("}ge")]   # conf()
    env = {"PATH": os.environ["PATH"], "SANDBOX_SECRET_0": "tok%en", "SANDBOX_SECRET_0_1": "acct-1"}
    done = subprocess.run(["perl", "-pe", perl], input="a @SANDBOX_SECRET_0@ b @SANDBOX_SECRET_0_1@\n", env=env,
                          capture_output=True, text=True)
    assert done.stdout == "a tok%%en b acct-1\n", done.stderr
    missing = subprocess.run(["perl", "-pe", perl], input="@SANDBOX_SECRET_0_2@\n", env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "SANDBOX_SECRET_0_2 is not set" in missing.stderr


def test_the_proxy_start_script_runs_perl_only_for_a_config_with_a_secret_to_fill_in(tmp_path):
    """start-proxy's conf(): the configuration as decoded, perl (its ~7 ms start) only where a
    @SANDBOX_SECRET_<i>@ is there to replace; a value it refuses stops the start."""
    import base64

    script = open(os.path.join(os.path.dirname(__file__), "..", "images", "proxy", "start-proxy")).read()
    conf = script[script.index("conf() {"):script.index("\ncafiles()")]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "perl").write_text("#!/bin/sh\necho perl-ran >&2\nexec /usr/bin/perl \"$@\"\n")
    (fake / "perl").chmod(0o755)

    def run(text: str, **env) -> tuple[subprocess.CompletedProcess, str]:
        out = tmp_path / "squid.conf"
        done = subprocess.run(["sh", "-c", f'set -eu\n{conf}\nconf "$1" "$2"', "sh",
                               base64.b64encode(text.encode()).decode(), str(out)],
                              env={"PATH": f"{fake}:{os.environ['PATH']}", **env}, capture_output=True, text=True)
        return done, out.read_text() if out.exists() else ""

    done, written = run("http_port 3128\nvisible_hostname x\n")
    assert done.returncode == 0 and written == "http_port 3128\nvisible_hostname x\n" and "perl-ran" not in done.stderr
    done, written = run('request_header_add A "@SANDBOX_SECRET_0@" x\n', SANDBOX_SECRET_0="t%k")
    assert done.returncode == 0 and written == 'request_header_add A "t%%k" x\n' and "perl-ran" in done.stderr
    done, _ = run('request_header_add A "@SANDBOX_SECRET_0@" x\n', SANDBOX_SECRET_0='a"b')
    assert done.returncode != 0 and "holds a quote" in done.stderr


def test_a_fresh_codex_login_is_used_as_it_is(tmp_path):
    auth = auth_json(NOW + 86400)
    called = []
    access, account = chatgpt.read(json.dumps(auth), "auth.json", str(tmp_path / "auth.json"), now=NOW,
                                   post=lambda url, body: called.append(body))
    assert (access, account, called) == (auth["tokens"]["access_token"], "acct-1", [])
    auth["tokens"].pop("account_id")   # older files: the account from the id_token
    assert chatgpt.read(json.dumps(auth), "auth.json", "", now=NOW)[1] == "acct-from-id-token"


@pytest.mark.parametrize("exp, last", [(NOW - 10, "2027-01-10T00:00:00Z"), (NOW + 600, "2027-01-10T00:00:00Z"),
                                       (None, "2020-01-01T00:00:00Z")])
def test_a_stale_codex_login_is_refreshed_on_the_host_and_written_back(exp, last, tmp_path):
    """Expired, expiring within the margin, or (no exp claim) refreshed more than 8 days ago."""
    path = tmp_path / "auth.json"
    auth = auth_json(exp, last=last)
    path.write_text(json.dumps(auth))
    new = {"access_token": jwt({"exp": NOW + 864000}), "refresh_token": "rt-new", "id_token": jwt({"n": 1})}
    calls = []
    access, account = chatgpt.read(path.read_text(), str(path), str(path), now=NOW,
                                   post=lambda url, body: calls.append((url, body)) or new)
    assert access == new["access_token"] and account == "acct-1"
    assert calls == [("https://auth.openai.com/oauth/token",
                      {"client_id": chatgpt.CLIENT_ID, "grant_type": "refresh_token", "refresh_token": "rt-old"})]
    written = json.loads(path.read_text())
    assert {k: written["tokens"][k] for k in new} == new and written["tokens"]["account_id"] == "acct-1"
    assert written["last_refresh"] == "2027-01-15T08:00:00Z" and written["OPENAI_API_KEY"] is None
    assert path.stat().st_mode & 0o777 == 0o600 and os.listdir(tmp_path) == ["auth.json"]


def test_a_refreshed_login_file_keeps_its_owner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the file to another user")
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(auth_json(NOW - 1)))
    os.chown(path, 1000, 1000)   # the user's file, the launcher run under sudo
    new = {"access_token": jwt({"exp": NOW + 864000}), "refresh_token": "rt-new"}
    chatgpt.read(path.read_text(), str(path), str(path), now=NOW, post=lambda url, body: new)
    assert (path.stat().st_uid, path.stat().st_gid) == (1000, 1000)


def test_codex_login_refusals_say_what_is_wrong(tmp_path):
    def refused(text: str, file: str = "", post=None) -> str:
        with pytest.raises(PolicyError) as caught:
            chatgpt.read(text, "auth.json", file, now=NOW, **({"post": post} if post else {}))
        return str(caught.value)

    assert "tokens.access_token" in refused('{"OPENAI_API_KEY": "sk-x"}')
    assert "no file to write the refreshed tokens back to" in refused(json.dumps(auth_json(NOW - 1)))
    no_account = auth_json(NOW + 86400, account=None)
    no_account["tokens"]["id_token"] = jwt({})
    assert "tokens.account_id" in refused(json.dumps(no_account))

    def failing(url, body):
        raise ValueError("HTTP 401 from " + url)

    (tmp_path / "auth.json").write_text(json.dumps(auth_json(NOW - 1)))
    said = refused((tmp_path / "auth.json").read_text(), str(tmp_path / "auth.json"), failing)
    assert "refresh failed: HTTP 401" in said and "codex login" in said


def test_the_command_line_says_what_goes_with_what(tmp_path):
    def run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([*SANDBOX, *argv], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                              env={**os.environ, **(env or {})})

    alone = run("compile", "-p", "ci", "--model-key-kind", "oauth", "--", "true")
    assert alone.returncode == 2 and "go with --agent" in alone.stderr
    no_key = run("compile", "-p", "ci", "--agent", "claude-code", "--model-key-kind", "oauth", "--", "true")
    assert no_key.returncode == 2 and "--model-key-kind goes with --model-key-env" in no_key.stderr
    google = run("compile", "-p", "ci", "--agent", "gemini-cli", "--model-key-env", "K", "--model-key-kind", "google",
                 "--", "true", env={"K": "x"})
    assert google.returncode == 120 and "cannot be brokered" in google.stderr
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps(auth_json(2 ** 40)))
    compose = run("compile", "-p", "ci", "--format", "compose", "--agent", "codex", "--model-key-file", str(auth), "--", "true")
    assert compose.returncode == 120 and "subscription login" in compose.stderr and "rt-old" not in compose.stdout
    plan = run("compile", "-p", "ci", "--agent", "codex", "--model-key-file", str(auth), "--", "true")
    assert plan.returncode == 0 and "chatgpt-account-id" in plan.stdout and "rt-old" not in plan.stdout
    assert auth.read_text() == json.dumps(auth_json(2 ** 40))   # compiling never refreshes


def test_sandbox_agents_lists_each_agents_logins():
    done = subprocess.run([*SANDBOX, "agents", "--json"], capture_output=True, text=True, timeout=60)
    rows = {r["name"]: {s["kind"]: s for s in r["logins"]} for r in json.loads(done.stdout)}
    assert set(rows["claude-code"]) == {"api-key", "oauth"} and rows["claude-code"]["oauth"]["brokered"]
    assert set(rows["codex"]) == {"api-key", "chatgpt"} and rows["codex"]["chatgpt"]["header"] == "Authorization"
    assert not rows["gemini-cli"]["google"]["brokered"] and "one hour" in rows["gemini-cli"]["google"]["why"]
    assert set(rows["aider"]) == {"api-key"}
    text = subprocess.run([*SANDBOX, "agents"], capture_output=True, text=True, timeout=60).stdout
    assert "  login   google: not brokered: " in text and "  login   oauth: " in text


def test_a_codex_login_that_cannot_be_written_back_is_not_refreshed(tmp_path):
    """Refresh tokens are used once: a file the new ones cannot replace is refused before the refresh."""
    text = json.dumps(auth_json(NOW - 1))
    calls = []
    with pytest.raises(PolicyError, match="can be written back"):
        chatgpt.read(text, "auth.json", str(tmp_path / "gone" / "auth.json"), now=NOW,
                     post=lambda url, body: calls.append(body))
    assert calls == [] and os.listdir(tmp_path) == []
