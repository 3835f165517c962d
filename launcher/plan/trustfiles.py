"""`ca_certificates:`: the two read-only files a sandbox's tools trust, made in the launcher's state
directory and named by their content: the extra CAs alone (NODE_EXTRA_CA_CERTS adds them to Node's
own store) and the host's system CAs plus them (SSL_CERT_FILE and its kind replace the store)."""

from __future__ import annotations

import hashlib
import os

from launcher.errors import Problem
from launcher.host import host
from launcher.host.hostfacts import HostFacts
from launcher.host.statefiles import StateFile
from launcher.policy import inject
from launcher.policy.model import Policy

SYSTEM_STORE = "/etc/ssl/certs/ca-certificates.crt"   # Debian, Ubuntu; elsewhere the extras alone
_LIMIT = 4 << 20


def store_files(extra_pem: str) -> tuple[StateFile, StateFile]:
    """The extra.pem and bundle.pem for these certificates, named by their content (the host's system
    store read now; statefiles.write makes them, once)."""
    try:
        with open(SYSTEM_STORE, "rb") as system:
            base = system.read(_LIMIT).decode("ascii", errors="replace")
    except OSError:
        base = ""
    folder = os.path.join(host.state_dir(), "cas")
    extra, bundle = [StateFile(path=os.path.join(folder, f"{hashlib.sha256(text.encode()).hexdigest()[:16]}-{kind}.pem"),
                               text=text, folder_mode=0o755)
                     for kind, text in (("extra", extra_pem),
                                        ("bundle", base.rstrip("\n") + "\n" + extra_pem if base else extra_pem))]
    return extra, bundle


_CA_PROBLEM = dict(expected=f"a PEM file of CA certificates (at most {inject.CA_MAX_BYTES // 1024} KiB)",
                   hint="the CA certificate(s) that sign the upstream's certificate, e.g. ~/certs/company-ca.pem")


def ca_bundles(policy: Policy, host: HostFacts) -> tuple[dict[str, tuple[str, str]], list[Problem]]:
    """secrets[].ca_file -> (real path, its certificates), as the host facts checked them, and a
    problem for each one that is no usable PEM bundle; ca_certificates[] are refused the same way."""
    facts = {ca.given: ca for ca in host.ca_files}
    found, problems = {}, []
    for index, secret in enumerate(policy.secrets):
        if not secret.ca_file:
            continue
        ca = facts[secret.ca_file]
        if ca.problem:
            problems.append(Problem(file=policy.source, path=f"secrets[{index}].ca_file", found=f"{ca.real}: {ca.problem}",
                                    **_CA_PROBLEM))
        else:
            found[secret.ca_file] = (ca.real, ca.pem)
    for index, ca in enumerate(host.ca_certs):
        if ca.problem:
            problems.append(Problem(file=policy.source, path=f"ca_certificates[{index}]", found=f"{ca.real}: {ca.problem}",
                                    **_CA_PROBLEM))
    return found, problems

# Where the sandbox finds ca_certificates, and the variables that name them (which one a tool reads:
# launcher/agents/README.md). The first replace a tool's store, so they name the system CAs plus ours.
CA_DIR = "/etc/sandbox-ca"
CA_VARIABLES = {"SSL_CERT_FILE": "bundle", "REQUESTS_CA_BUNDLE": "bundle", "CURL_CA_BUNDLE": "bundle",
                "GIT_SSL_CAINFO": "bundle", "NODE_EXTRA_CA_CERTS": "extra"}
