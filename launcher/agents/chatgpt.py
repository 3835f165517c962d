"""A Codex ChatGPT login on the host (`codex login`: ~/.codex/auth.json) for the proxy: its access token
and account id, refreshed here, on the host, when the token has run out or soon will; never inside.

The format and the refresh are Codex's own (codex-rs login/src/token_data.rs, auth/manager.rs):
tokens.{id_token, access_token, refresh_token, account_id} and last_refresh; a refresh POSTs JSON
{client_id, grant_type: refresh_token, refresh_token} and gets new tokens back. Refresh tokens are
used once, so the new ones are written back to the file, where the host's Codex finds them."""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import datetime, timezone
from typing import Callable

from launcher.errors import PolicyError, Problem
from launcher.host import host

CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"   # Codex's OAuth client (manager.rs CLIENT_ID)
# The proxy's header is fixed at launch: a token with less than this left is refreshed first.
MARGIN_SECONDS = 3600
STALE_SECONDS = 8 * 86400   # without an exp claim, Codex refreshes after 8 days (TOKEN_REFRESH_INTERVAL)
HINT = "run `codex login` on the host, then --model-key-file ~/.codex/auth.json"


def claims(jwt: str) -> dict:
    """A JWT's payload, unverified (only its expiry and account are read; the upstream checks it)."""
    try:
        payload = jwt.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _problem(where: str, path: str, expected: str, found: str, hint: str = HINT) -> PolicyError:
    return PolicyError([Problem(file=where, path=path, expected=expected, found=found, hint=hint)])


def _stale(auth: dict, now: float) -> bool:
    exp = claims(auth["tokens"]["access_token"]).get("exp")
    if isinstance(exp, (int, float)):
        return exp <= now + MARGIN_SECONDS
    try:
        last = datetime.fromisoformat(str(auth.get("last_refresh")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return True
    return last < now - STALE_SECONDS


def _post(url: str, body: dict) -> dict:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:   # noqa: S310 (https, or a test's loopback)
            return json.loads(response.read(1024 * 1024))
    except urllib.error.HTTPError as exc:
        raise ValueError(f"HTTP {exc.code} from {url}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{url}: {exc}") from None


def read(text: str, where: str, file: str, now: float | None = None,
         post: Callable[[str, dict], dict] = _post) -> tuple[str, str]:
    """(access token, account id) from an auth.json's text, refreshed first when stale (and written
    back to `file`); PolicyError says what is wrong. `where` names the source in messages."""
    try:
        auth = json.loads(text)
        tokens = auth["tokens"]
        access, refresh = tokens["access_token"], tokens.get("refresh_token")
    except (ValueError, TypeError, KeyError):
        raise _problem(where, "tokens.access_token", "a Codex auth.json from a ChatGPT sign-in",
                       "no tokens.access_token") from None
    if not isinstance(access, str) or not access:
        raise _problem(where, "tokens.access_token", "a token", repr(access))
    now = time.time() if now is None else now
    if _stale(auth, now):
        if not file:
            raise _problem(where, "tokens.access_token", "a token that has not expired",
                           "an expired one, and no file to write the refreshed tokens back to",
                           "refresh tokens are used once: give the file (--model-key-file ~/.codex/auth.json)")
        if not isinstance(refresh, str) or not refresh:
            raise _problem(where, "tokens.refresh_token", "a refresh token", repr(refresh))
        try:   # before the refresh uses the refresh token up: can its successor be written back?
            _replace_secret_file(file, text)
        except OSError as exc:
            raise _problem(where, "", "a file the refreshed tokens can be written back to", str(exc)) from None
        url = host.codex_refresh_url()
        try:
            fresh = post(url, {"client_id": CLIENT_ID, "grant_type": "refresh_token", "refresh_token": refresh})
        except ValueError as exc:
            raise _problem(where, "tokens.refresh_token", "a refresh the ChatGPT sign-in accepts",
                           f"refresh failed: {exc}") from None
        if not isinstance(fresh, dict) or not isinstance(fresh.get("access_token"), str):
            raise _problem(where, "tokens.refresh_token", "new tokens from the refresh", "an answer without access_token")
        tokens.update({k: fresh[k] for k in ("id_token", "access_token", "refresh_token") if isinstance(fresh.get(k), str)})
        auth["last_refresh"] = datetime.fromtimestamp(now, timezone.utc).isoformat().replace("+00:00", "Z")
        try:
            _replace_secret_file(file, json.dumps(auth, indent=2) + "\n")
        except OSError as exc:
            raise _problem(where, "", "the refreshed tokens written back", str(exc),
                           "the old refresh token is used up: sign in again with `codex login`") from None
    signed_in = claims(tokens.get("id_token") or "").get("https://api.openai.com/auth")
    account = tokens.get("account_id") or (signed_in.get("chatgpt_account_id") if isinstance(signed_in, dict) else None)
    if not isinstance(account, str) or not account:
        raise _problem(where, "tokens.account_id", "the ChatGPT account id", "none (nor in the id_token)")
    return tokens["access_token"], account


def _replace_secret_file(path: str, text: str) -> None:
    """A login file rewritten after a refresh: a new file beside it, its owner's alone (also under
    sudo), renamed over it (OSError, and nothing left behind, when that cannot be done)."""
    real = os.path.realpath(os.path.expanduser(path))
    temp = f"{real}.sandbox-{os.getpid()}-{os.urandom(4).hex()}"
    owner = os.stat(real)
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), "w") as out:
            if (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(out.fileno(), owner.st_uid, owner.st_gid)
            out.write(text)
        os.replace(temp, real)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
