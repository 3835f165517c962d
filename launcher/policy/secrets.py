"""What a secret looks like, the one list: environment names and values that never enter a
sandbox. The launcher refuses them, lint flags them in files, and the probe gets the same lists
(rendered into its arguments by the compiler), so the three can never disagree."""

from __future__ import annotations

import fnmatch
import re

# Names of variables that hold credentials (matched case-insensitively, as shell globs).
SECRET_NAMES = (
    "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*_KEY", "*API_KEY*", "*ACCESS_KEY*",
    "*PRIVATE_KEY*", "*CREDENTIAL*", "AWS_*", "AZURE_*", "GITHUB_TOKEN", "GH_TOKEN",
    "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "GOOGLE_APPLICATION_CREDENTIALS",
)
# A container runtime endpoint is root on the host (the probe's env.runtime check).
RUNTIME_NAMES = ("DOCKER_*", "CONTAINER_HOST", "BUILDKIT_HOST", "KUBECONFIG")
SECRET_NAME_PATTERNS = SECRET_NAMES + RUNTIME_NAMES
# Values that are credentials whatever their name (shell globs over the whole value).
SECRET_VALUE_PREFIXES = ("ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_", "glpat-", "sk-", "AKIA", "ASIA",
                         "xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-", "AIza")
PRIVATE_KEY = "-----BEGIN *PRIVATE KEY-----"
SECRET_VALUES = tuple(p + "*" for p in SECRET_VALUE_PREFIXES) + (f"*{PRIVATE_KEY}*",)

# The same, found anywhere in a policy file (comments included): every loader refuses them.
TEXT_PATTERN = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, SECRET_VALUE_PREFIXES)) + r")[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|://[^/\s:@'\"]+:[^/\s@'\"]+@")


def secret_name(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_NAME_PATTERNS)


def secret_value(value: str) -> bool:
    value = value.strip()
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in SECRET_VALUES)


def caseless(pattern: str) -> str:
    """A shell glob matching `pattern` in any letter case (busybox ash has no nocasematch)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in pattern)


def literals_in(text: str) -> list[tuple[int, str]]:
    """(line number, what it looks like) for each secret-shaped literal in a file: never the value."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = TEXT_PATTERN.search(line)
        if match:
            found.append((number, match.group(1) or ("a URL with a password" if "://" in match.group(0) else "a private key")))
    return found
