"""The attestation record: `sandbox run|up --attest FILE [--attest-key KEY]` (the options, checked
before anything starts) and `sandbox verify-attestation FILE [--key PUB]`."""

from __future__ import annotations

import click

from launcher.cli.options import json_option
from launcher.cli.output import details, emit, envelope
from launcher.errors import AttestationInvalid

READ_LIMIT = 64 << 20


def _attest_path(ctx, param, value):
    """Checked before anything starts: a record that cannot be written must not be found out at the end."""
    if value is None:
        return None
    from launcher.launch import attest

    try:
        return attest.writable(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; nothing was started") from None


def _key(loader):
    """A key file loaded (and its kind checked) before anything starts; a bad one is a usage error."""
    def callback(ctx, param, value):
        if value is None:
            return None
        from launcher import signing

        try:
            return getattr(signing, loader)(value)
        except signing.KeyInvalid as exc:
            raise click.BadParameter(f"{exc}; nothing was started" if loader == "signing_key" else str(exc)) from None
    return callback


def attest_option(command, when: str = "the run ends (also when it fails)"):
    command = click.option("--attest-key", "attest_key", metavar="KEY", callback=_key("signing_key"),
                           help="Sign the record with KEY, a PEM private key (ed25519 or ECDSA P-256, unencrypted): "
                                "FILE is then a DSSE envelope; `sandbox verify-attestation FILE --key PUB` checks "
                                "it. Read and checked before anything starts.")(command)
    return click.option("--attest", "attest_path", metavar="FILE", callback=_attest_path,
                        help=f"Write the sandbox's attestation record to FILE (an in-toto Statement) when {when}; "
                             "`sandbox verify-attestation FILE` re-checks its digests.")(command)


def up_attest_option(command):
    return attest_option(command, when="`sandbox down` removes it")


def attest_arguments(attest_path, attest_key, workspace: str) -> dict:
    """The Request's attest and attest_key; a key without a file to sign, or one the agent could
    read (inside its workspace), is a usage error."""
    if attest_key is None:
        return {"attest": attest_path, "attest_key": None}
    if attest_path is None:
        raise click.UsageError("--attest-key signs the record --attest FILE writes: give --attest FILE too")
    import os

    key, root = os.path.realpath(attest_key.file), os.path.realpath(workspace)
    if os.path.commonpath([key, root]) == root:
        raise click.BadParameter(f"{attest_key.file} is inside the workspace {workspace}, which the agent reads: it "
                                 "could sign records of its own; keep the key outside (in CI, under $RUNNER_TEMP); "
                                 "nothing was started", param_hint="'--attest-key'")
    if attest_key.shared_mode is not None:   # ssh refuses such a key; a signing key in CI is often written 0644
        click.echo(f"warning: {attest_key.file} (mode {attest_key.shared_mode:04o}) can be read by other users, who "
                   f"could sign records as this key: `chmod 600 {attest_key.file}`", err=True)
    return {"attest": attest_path, "attest_key": attest_key}


@click.command(name="verify-attestation", short_help="Re-check an attestation record's digests (and signature).")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--key", "key", metavar="PUB", callback=_key("verifying_key"),
              help="Require a valid signature by this PEM public key (ed25519 or ECDSA P-256); an unsigned record, "
                   "another key's or a changed byte is exit 118.")
@json_option("The verdict and what the record says as JSON on stdout (also on a mismatch: ok false and why).")
def verify_attestation(file: str, key, as_json: bool) -> None:
    """Re-check every digest in FILE, a record written by `sandbox run --attest` (or at `sandbox down`).

    Exit 0 when the file is in its canonical form and every digest matches (the run's subject over
    the whole predicate, the effective policy, the layers' contents, the images), else exit 118
    naming each mismatch. Digests catch accidents and naive edits, not a forger who recomputes
    them: only a signature does. With --key PUB, FILE must be a DSSE envelope signed by that key
    (else 118). Without --key, a signed record's digests are checked but its signature is not:
    it is said "signed, NOT verified", which proves no more than an unsigned record.

    \b
    Examples:
      sandbox verify-attestation run-attestation.json
      sandbox verify-attestation run-attestation.json --key signing.pub
    """
    try:
        checked = _verified(file, key)
    except AttestationInvalid as exc:
        if as_json:
            emit(envelope({"file": file, "signed": None, "verified": False} | details(exc), exit_code=exc.exit_code,
                          error=str(exc)))
        raise
    _tell(file, checked, as_json)


def _verified(file: str, key):
    from launcher.launch import attest

    try:
        with open(file, "rb") as handle:
            data = handle.read(READ_LIMIT + 1)
    except OSError as exc:
        raise AttestationInvalid(f"{file}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > READ_LIMIT:
        raise AttestationInvalid(f"{file}: larger than {READ_LIMIT >> 20} MiB: not a record sandbox wrote")
    return attest.check(data, file, key)


def _signature(checked) -> str:
    """What the signature proves, honestly: a record signed but not verified proves nothing more."""
    from launcher.launch import attest

    if not checked.signed:
        return attest.UNSIGNED
    if checked.verified:
        return (f"signed and verified: the signature is by the key given ({checked.algorithm}, keyid {checked.keyid}) "
                "over these exact bytes")
    return (f"signed ({checked.algorithm}, keyid {checked.keyid}) but NOT verified: no --key was given, and anyone "
            "can sign with a key of their own; `--key PUB` checks it is the key you trust")


def _tell(file: str, checked, as_json: bool) -> None:
    """What a verified record says: a few lines, or (--json) one object."""
    statement = checked.statement
    pred = statement["predicate"]
    run, probe = pred["run"], pred["report"].get("probe")
    if probe is None:
        said = "did not run"
    elif probe["ok"]:
        said = f"passed {len(probe['checks'])} checks"
    else:
        said = "failed: " + (", ".join(c["id"] for c in probe["checks"] if not c["ok"]) or "did not finish")
    inspect = pred["inspect"]
    compared = ("matched the plan" if inspect["ok"] else
                "differed from the plan" if inspect["compared"] else "not compared")
    if as_json:
        emit(envelope({"file": file, "signed": checked.signed, "verified": checked.verified, "keyid": checked.keyid,
                       "algorithm": checked.algorithm, "subjects": len(statement["subject"]), "layers": len(pred["layers"]),
                       "run": {k: run.get(k) for k in ("sandbox", "status", "exit_code", "started_at", "finished_at")},
                       "policy": {"name": pred["policy"]["name"], "sha256": pred["policy"]["sha256"]},
                       "probe": None if probe is None else {"ok": probe["ok"], "checks": len(probe["checks"]),
                                                            "failed": [c["id"] for c in probe["checks"] if not c["ok"]]},
                       "inspect": {"compared": inspect.get("compared"), "ok": inspect["ok"]}}, sandbox=run.get("sandbox")))
        return
    signature = ", the signature verifies" if checked.verified else ""
    click.echo(f"{file}: ok: every digest matches{signature} ({len(statement['subject'])} subjects, "
               f"{len(pred['layers'])} layers)")
    click.echo(f"  run {run['sandbox']}: {run['status']}, exit {run['exit_code']}, "
               f"{run['started_at']} to {run['finished_at']}")
    click.echo(f"  policy {pred['policy']['name']} sha256:{pred['policy']['sha256']}; probe {said}; inspect {compared}")
    click.echo(f"  {_signature(checked)}")


COMMANDS = (verify_attestation,)
