"""Subscription logins brokered by the proxy: the credential stays on the host, the CLI inside holds a
placeholder login (home files), and the proxy sends the real one upstream. A login's kind is said
(--model-key-kind) or recognised by the value's shape; `api-key` is the profile's own wiring.

Verified with the real CLIs against images/model-api (tests/test_agents_logins.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Mapping

from launcher.agents.profile import PLACEHOLDER_KEY, AgentProfile, check

API_KEY = "api-key"
# Far in the future (ms since the epoch, year 3000): a placeholder login the CLI never tries to refresh.
NEVER_EXPIRES_MS = 32503680000000


@dataclass(frozen=True, kw_only=True)
class Login:
    """A sign-in the proxy can broker: what it injects and what the CLI holds instead."""

    kind: str
    summary: str
    header: str                               # toward the upstream, with {value}
    recognise: Callable[[str], bool]          # the host's value has this kind's shape
    upstream: str = ""                        # "" keeps the profile's
    path: str = ""                            # only these upstream paths are forwarded (the token is good for more)
    reader: str = ""                          # how the proxy's values are read at launch ("" the value as it is)
    key_files: Mapping[str, str] = field(default_factory=dict)    # placeholder credentials, written every run
    home_files: Mapping[str, str] = field(default_factory=dict)   # over the profile's model home files


@dataclass(frozen=True, kw_only=True)
class Unbrokered:
    """A sign-in the proxy cannot broker, and why."""

    kind: str
    summary: str
    why: str


def _claude_oauth() -> Login:
    from launcher.agents.claude_code import SETTINGS

    # What `claude setup-token` makes: an inference-only token. With "user:profile" among the scopes
    # the CLI also fetches the account's profile from api.anthropic.com (seen: one CONNECT there).
    credentials = {"claudeAiOauth": {"accessToken": PLACEHOLDER_KEY, "refreshToken": None,
                                     "expiresAt": NEVER_EXPIRES_MS, "scopes": ["user:inference"],
                                     "subscriptionType": None}}
    return Login(
        kind="oauth",
        summary="a subscription's OAuth token from `claude setup-token` (sk-ant-oat01-…), sent as Authorization: Bearer",
        header="Authorization: Bearer {value}",
        recognise=lambda value: value.startswith("sk-ant-oat"),
        path="/v1/",   # the Messages API; the token also reads the account (/api/oauth/...)
        # The CLI then signs in with the placeholder as a subscriber does (Authorization: Bearer and
        # its own anthropic-beta: oauth-2025-04-20); CLAUDE_CODE_OAUTH_TOKEN would do the same but is
        # a secret-shaped variable. settings.json is rewritten without apiKeyHelper: a kept home from
        # an API-key run would otherwise send the placeholder as x-api-key.
        key_files={".claude/.credentials.json": json.dumps(credentials) + "\n",
                   ".claude/settings.json": json.dumps(SETTINGS) + "\n"},
    )


# Read in the 0.61.0 bundle: "Login with Google" talks to the Code Assist API
# ($CODE_ASSIST_ENDPOINT, default cloudcode-pa.googleapis.com, v1internal:streamGenerateContent with
# the request wrapped in {model, project, request}) with Authorization: Bearer from
# ~/.gemini/oauth_creds.json, refreshed by google-auth-library through oauth2.googleapis.com.
GEMINI_GOOGLE = Unbrokered(
    kind="google", summary="Login with Google (~/.gemini/oauth_creds.json, the Code Assist API)",
    why="its access token lives one hour and the proxy's header is fixed at launch, so a longer session "
        "fails unless the proxy refreshes it; nor is it verified (the stand-in does not speak Code Assist): "
        "use a Gemini API key (--model-key-env)")


def _jwt(payload: dict) -> str:
    """An unsigned JWT: a placeholder the CLI can decode (Codex parses its id_token's claims)."""
    import base64

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}.{part({'sandbox': 'placeholder'})}"


def _is_codex_auth(value: str) -> bool:
    try:
        return isinstance(json.loads(value).get("tokens"), dict)
    except (ValueError, AttributeError):
        return False


# Inside, Codex is signed in with placeholders: a provider that "requires OpenAI auth" sends the
# auth.json access token as Authorization: Bearer and its account_id as chatgpt-account-id to our
# endpoint, which is the ChatGPT backend's Codex API. An access token whose exp lies in the year 3000
# is never refreshed from inside (Codex refreshes when exp has passed, manager.rs). `apps`: the
# ChatGPT connectors (an MCP server at chatgpt.com/backend-api/ps/mcp) stay off.
CODEX_ACCOUNT = "sandbox-placeholder-account"
CODEX_AUTH = {"OPENAI_API_KEY": None, "last_refresh": "2026-01-01T00:00:00Z", "tokens": {
    "id_token": _jwt({"email": "sandbox@placeholder.invalid", "https://api.openai.com/auth": {
        "chatgpt_plan_type": "pro", "chatgpt_account_id": CODEX_ACCOUNT, "chatgpt_user_id": "sandbox-placeholder"}}),
    "access_token": _jwt({"exp": NEVER_EXPIRES_MS // 1000}), "refresh_token": PLACEHOLDER_KEY,
    "account_id": CODEX_ACCOUNT}}
CODEX_CONFIG = """\
model_provider = "sandbox"

[model_providers.sandbox]
name = "sandbox proxy"
base_url = "{endpoint}/backend-api/codex"
wire_api = "responses"
requires_openai_auth = true

[features]
apps = false
"""

CODEX_CHATGPT = Login(
    kind="chatgpt",
    summary="a ChatGPT sign-in (`codex login`: --model-key-file ~/.codex/auth.json), refreshed on the host; "
            "Authorization: Bearer and chatgpt-account-id toward chatgpt.com/backend-api/codex only",
    header="Authorization: Bearer {value}",
    recognise=_is_codex_auth,
    upstream="https://chatgpt.com",
    path="/backend-api/codex/",
    reader="codex-chatgpt",
    key_files={".codex/auth.json": json.dumps(CODEX_AUTH, indent=2) + "\n"},
    home_files={".codex/config.toml": CODEX_CONFIG},
)


def proxy_values(reader: str, value: str, where: str, file: str) -> tuple[str, ...]:
    """The values of a login's headers (the first goes into {value}), read from the host's value."""
    from launcher.agents import chatgpt

    if reader == "codex-chatgpt":
        return chatgpt.read(value, where, file)
    raise ValueError(f"no login reader {reader!r}")


def _registry() -> Mapping[str, tuple[Login | Unbrokered, ...]]:
    return MappingProxyType({
        "claude-code": (_claude_oauth(),),
        "codex": (CODEX_CHATGPT,),
        "gemini-cli": (GEMINI_GOOGLE,),
    })


LOGINS = _registry()


def kinds(profile: AgentProfile) -> tuple[Login | Unbrokered, ...]:
    return LOGINS.get(profile.name, ())


def recognise(profile: AgentProfile, value: str | None) -> str:
    """The kind of a model key by its shape; api-key unless a brokered login recognises it."""
    for login in kinds(profile):
        if value and isinstance(login, Login) and login.recognise(value):
            return login.kind
    return API_KEY


def applied(profile: AgentProfile, kind: str) -> AgentProfile:
    """The profile wired for `kind`: its model API's header, upstream and placeholder credentials;
    ValueError (with what is possible) for a kind it does not have or that cannot be brokered."""
    if kind == API_KEY or profile.model is None:
        return profile
    found = {login.kind: login for login in kinds(profile)}
    login = found.get(kind)
    if not isinstance(login, Login):
        possible = ", ".join([API_KEY] + [k for k, v in found.items() if isinstance(v, Login)])
        why = f"{login.kind} cannot be brokered: {login.why}" if login else f"{profile.name} has no {kind} login"
        raise ValueError(f"{why} (possible: {possible})")
    model = replace(profile.model, header=login.header, upstream=login.upstream or profile.model.upstream,
                    key_env=None, key_files=login.key_files, home_files={**profile.model.home_files, **login.home_files},
                    login=login.reader, path=login.path)
    return check(replace(profile, model=model))
