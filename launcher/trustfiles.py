"""`ca_certificates:`: the two read-only files a sandbox's tools trust, made in the launcher's state
directory and named by their content: the extra CAs alone (NODE_EXTRA_CA_CERTS adds them to Node's
own store) and the host's system CAs plus them (SSL_CERT_FILE and its kind replace the store)."""

from __future__ import annotations

import hashlib
import os

from launcher import host

SYSTEM_STORE = "/etc/ssl/certs/ca-certificates.crt"   # Debian, Ubuntu; elsewhere the extras alone
_LIMIT = 4 << 20


def store_files(extra_pem: str) -> tuple[str, str]:
    """(extra.pem, bundle.pem) paths for these certificates, written once."""
    try:
        with open(SYSTEM_STORE, "rb") as system:
            base = system.read(_LIMIT).decode("ascii", errors="replace")
    except OSError:
        base = ""
    folder = os.path.join(host.state_dir(), "cas")
    os.makedirs(folder, mode=0o755, exist_ok=True)
    paths = []
    for kind, text in (("extra", extra_pem), ("bundle", base.rstrip("\n") + "\n" + extra_pem if base else extra_pem)):
        path = os.path.join(folder, f"{hashlib.sha256(text.encode()).hexdigest()[:16]}-{kind}.pem")
        if not os.path.isfile(path):
            temp = f"{path}.{os.getpid()}"
            with open(temp, "w") as out:
                out.write(text)
            os.chmod(temp, 0o444)   # read by the agent's uid inside, written by no one
            os.replace(temp, path)
        paths.append(path)
    return paths[0], paths[1]
