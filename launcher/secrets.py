"""What a secret looks like: environment names and values that never enter a sandbox."""

from __future__ import annotations

import fnmatch
import re

SECRET_NAME_PATTERNS = (
    "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*_KEY", "*API_KEY*", "*ACCESS_KEY*",
    "*PRIVATE_KEY*", "*CREDENTIAL*", "AWS_*", "AZURE_*", "GITHUB_TOKEN", "GH_TOKEN",
    "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "GOOGLE_APPLICATION_CREDENTIALS",
    # A container runtime endpoint is root on the host.
    "DOCKER_*", "CONTAINER_HOST", "BUILDKIT_HOST", "KUBECONFIG",
)

_SECRET_VALUE = re.compile(
    r"^(ghp_|gho_|ghs_|ghu_|ghr_|github_pat_|glpat-|sk-|AKIA|ASIA|xox[abprs]-|AIza)"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)


def secret_name(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_NAME_PATTERNS)


def secret_value(value: str) -> bool:
    return bool(_SECRET_VALUE.search(value.strip()))
