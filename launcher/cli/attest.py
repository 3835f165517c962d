"""The attestation record: `sandbox run --attest FILE` (the option, the record's writing) and
`sandbox verify-attestation FILE`."""

from __future__ import annotations

import json

import click

from launcher.errors import AttestationInvalid

READ_LIMIT = 64 << 20


def _attest_path(ctx, param, value):
    """Checked before anything starts: a record that cannot be written must not be found out at the end."""
    if value is None:
        return None
    from launcher import attest

    try:
        return attest.writable(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; nothing was started") from None


def attest_option(command):
    return click.option("--attest", "attest_path", metavar="FILE", callback=_attest_path,
                        help="Write the run's attestation record to FILE (an in-toto Statement, unsigned), also when "
                             "the run fails; `sandbox verify-attestation FILE` re-checks its digests.")(command)


@click.command(name="verify-attestation", short_help="Re-check the digests of an attestation record.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--json", "as_json", is_flag=True, help="The verdict and what the record says as JSON on stdout "
              "(also on a mismatch: ok false and why).")
def verify_attestation(file: str, as_json: bool) -> None:
    """Re-check every digest in FILE, a record written by `sandbox run --attest`.

    Exit 0 when the file is in its canonical form and every digest matches (the run's subject over
    the whole predicate, the effective policy, the layers' contents, the images), else exit 118
    naming each mismatch. The record is unsigned: this catches accidents and naive edits, not a
    forger who recomputes the digests.

    \b
    Example:
      sandbox verify-attestation run-attestation.json
    """
    try:
        statement = _verified(file)
    except AttestationInvalid as exc:
        if as_json:
            click.echo(json.dumps({"file": file, "ok": False, "error": str(exc), "signed": False}, indent=2))
        raise
    _tell(file, statement, as_json)


def _verified(file: str) -> dict:
    from launcher import attest

    try:
        with open(file, "rb") as handle:
            data = handle.read(READ_LIMIT + 1)
    except OSError as exc:
        raise AttestationInvalid(f"{file}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > READ_LIMIT:
        raise AttestationInvalid(f"{file}: larger than {READ_LIMIT >> 20} MiB: not a record sandbox wrote")
    try:
        return attest.verify(data, file)
    except AttestationInvalid as exc:
        raise AttestationInvalid(f"{exc}\n  ({attest.UNSIGNED})") from None


def _tell(file: str, statement: dict, as_json: bool) -> None:
    """What a verified record says: a few lines, or (--json) one object."""
    from launcher import attest

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
        click.echo(json.dumps({"file": file, "ok": True, "signed": False, "subjects": len(statement["subject"]),
                               "layers": len(pred["layers"]), "run": {k: run.get(k) for k in (
                                   "sandbox", "status", "exit_code", "started_at", "finished_at")},
                               "policy": {"name": pred["policy"]["name"], "sha256": pred["policy"]["sha256"]},
                               "probe": None if probe is None else {"ok": probe["ok"], "checks": len(probe["checks"]),
                                                                    "failed": [c["id"] for c in probe["checks"]
                                                                               if not c["ok"]]},
                               "inspect": {"compared": inspect.get("compared"), "ok": inspect["ok"]}}, indent=2))
        return
    click.echo(f"{file}: ok: every digest matches ({len(statement['subject'])} subjects, {len(pred['layers'])} layers)")
    click.echo(f"  run {run['sandbox']}: {run['status']}, exit {run['exit_code']}, "
               f"{run['started_at']} to {run['finished_at']}")
    click.echo(f"  policy {pred['policy']['name']} sha256:{pred['policy']['sha256']}; probe {said}; inspect {compared}")
    click.echo(f"  {attest.UNSIGNED}")


COMMANDS = (verify_attestation,)
