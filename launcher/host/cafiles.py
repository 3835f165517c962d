"""CA files a policy names (secrets[].ca_file, ca_certificates[]), read and checked once, when the
host facts are gathered: the compiler and the CA store take the certificates or the reason from here."""

from __future__ import annotations

import os
from dataclasses import dataclass

from launcher.host import hostfiles, hostpaths
from launcher.policy import inject

READ_LIMIT = inject.CA_MAX_BYTES + 1   # one byte more than a bundle may have, so the check can say so


@dataclass(frozen=True, kw_only=True)
class CaFile:
    given: str            # as the policy wrote it
    real: str             # where it resolved on the host
    pem: str = ""         # its certificates (public data), nothing else from it; "" when unusable
    problem: str = ""     # why it is no usable PEM bundle, or ""


def checked(given: str, real: str, kind: str, data: bytes) -> CaFile:
    """The certificates of a CA file of this kind (PathFact.kind) and these first bytes, or why not."""
    if kind != "file":
        return CaFile(given=given, real=real, problem={"missing": "no such file", "dir": "a directory, not a file"}.get(
            kind, f"a {'socket' if kind == 'socket' else 'FIFO or device'}, not a regular file"))
    try:
        return CaFile(given=given, real=real, pem=inject.ca_bundle(data))
    except ValueError as exc:
        return CaFile(given=given, real=real, problem=str(exc))


def ca_file(given: str) -> CaFile:
    """A CA file the policy names (public data), read and checked here, once: its certificates or why not."""
    fact = hostpaths.path_fact(given, os.getcwd())
    data = hostfiles.read_regular(fact.real, required=True, follow=True, limit=READ_LIMIT) if fact.kind == "file" else b""
    return checked(fact.given, fact.real, fact.kind, data)
