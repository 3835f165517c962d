"""`ca_certificates:`: the two read-only files a sandbox's tools trust, made in the launcher's state
directory and named by their content: the extra CAs alone (NODE_EXTRA_CA_CERTS adds them to Node's
own store) and the host's system CAs plus them (SSL_CERT_FILE and its kind replace the store)."""

from __future__ import annotations

import hashlib
import os

from launcher.errors import PolicyError, Problem
from launcher.host import host
from launcher.host.hostfacts import HostFacts
from launcher.host.statefiles import StateFile
from launcher.plan.plan import Mount, MountKind
from launcher.policy import inject
from launcher.policy.model import NetworkMode, Policy

SYSTEM_STORE = "/etc/ssl/certs/ca-certificates.crt"   # Debian, Ubuntu; elsewhere the extras alone
_LIMIT = 4 << 20


def store_files(extra_pem: str, launch: str = "") -> tuple[StateFile, StateFile]:
    """The extra.pem and bundle.pem for these certificates, named by their content (the host's system
    store read now; statefiles.write makes them, once). With `launch` (rules per request): that
    launch's own pair, bump-LAUNCH-*.pem, which the proxy's CA joins at start (add_proxy_ca)."""
    try:
        with open(SYSTEM_STORE, "rb") as system:
            base = system.read(_LIMIT).decode("ascii", errors="replace")
    except OSError:
        base = ""
    folder = os.path.join(host.state_dir(), "cas")
    name = (lambda text: f"bump-{launch}") if launch else (lambda text: hashlib.sha256(text.encode()).hexdigest()[:16])
    extra, bundle = [StateFile(path=os.path.join(folder, f"{name(text)}-{kind}.pem"), text=text, folder_mode=0o755)
                     for kind, text in (("extra", extra_pem),
                                        ("bundle", base.rstrip("\n") + "\n" + extra_pem if base else extra_pem))]
    return extra, bundle


def add_proxy_ca(files: tuple[str, str], cert_pem: str) -> None:
    """The proxy's CA joins a launch's own pair (store_files with `launch`), in place: the sandbox
    binds these very files (a rename would leave it the old ones). Read-only again afterwards."""
    for path in files:
        os.chmod(path, 0o644)
        try:
            with open(path, "a") as out:
                out.write(cert_pem if cert_pem.endswith("\n") else cert_pem + "\n")
        finally:
            os.chmod(path, 0o444)


def drop_launch_files(files: tuple[str, str]) -> None:
    """A launch's own pair, once its sandbox is gone (public certificates: a leftover is litter, no leak)."""
    folder = os.path.join(host.state_dir(), "cas")
    for path in files:   # only such files, only there: a label names them, and a label is no authority
        if os.path.dirname(path) == folder and os.path.basename(path).startswith("bump-") and path.endswith(".pem"):
            try:
                os.unlink(path)
            except OSError:
                pass


def stale_launch_files(named: set[str], older_than: float, now: float) -> list[str]:
    """Launch pairs no proxy names any more (`named`: every proxy's label) and untouched for
    `older_than` seconds: a launcher killed between writing them and starting its proxy leaves
    them behind. Younger ones may belong to a launch still starting."""
    folder = os.path.join(host.state_dir(), "cas")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    stale = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            young = now - os.lstat(path).st_mtime < older_than
        except OSError:
            continue
        if name.startswith("bump-") and name.endswith(".pem") and path not in named and not young:
            stale.append(path)
    drop_launch_files(tuple(stale))
    return stale


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
    for index, rule in enumerate(policy.network.allow):
        if rule.http and rule.http.ca_file:
            ca = facts[rule.http.ca_file]
            if ca.problem:
                where = f"network.registries ({rule.registry}).ca_file" if rule.registry else f"network.allow[{index}].http.ca_file"
                problems.append(Problem(file=policy.source, path=where,
                                        found=f"{ca.real}: {ca.problem}", **_CA_PROBLEM))
            else:
                found[rule.http.ca_file] = (ca.real, ca.pem)
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


def ca_mounts(policy: Policy, host: HostFacts) -> tuple[list[Mount], dict[str, str]]:
    """ca_certificates and the proxy's own CA (rules per request): the prepared CA files, read-only,
    and the variables naming them."""
    if any(r.http for r in policy.network.allow) and policy.network.mode is NetworkMode.PROXY:
        if not all(host.bump_store):   # fail closed: a rule per request needs the launch's own files
            raise PolicyError([Problem(file=policy.source, path="network.allow", expected="CA files the launcher "
                                       "prepared for the proxy's CA (rules per request)", found="none were prepared",
                                       hint="run it through `sandbox run` or `sandbox up` (pipeline.facts_for)")])
        mounts = [Mount(kind=MountKind.BIND, source=source, target=f"{CA_DIR}/{kind}.pem", read_only=True)
                  for kind, source in zip(("extra", "bundle"), host.bump_store)]
        return mounts, {name: f"{CA_DIR}/{kind}.pem" for name, kind in CA_VARIABLES.items()}
    if not policy.ca_certificates:
        return [], {}
    if not all(host.ca_store):   # fail closed: never a sandbox without them
        raise PolicyError([Problem(file=policy.source, path="ca_certificates", expected="CA files the launcher prepared",
                                   found="none were prepared", hint="run it through `sandbox` (pipeline.facts_for)")])
    mounts = [Mount(kind=MountKind.BIND, source=source, target=f"{CA_DIR}/{kind}.pem", read_only=True)
              for kind, source in zip(("extra", "bundle"), host.ca_store)]
    return mounts, {name: f"{CA_DIR}/{kind}.pem" for name, kind in CA_VARIABLES.items()}
