"""The attestation record of an `up` sandbox (`sandbox up --attest FILE [--attest-key KEY]`): what
only the start sees (plan, layers, images, engine, inspect, probe) is kept on the host, where the
agent cannot write, until `sandbox down` (or `gc`) removes the sandbox and writes the record."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from launcher import signing
from launcher.host import host
from launcher.launch import attest


@dataclass(frozen=True, kw_only=True)
class Written:
    """A record `down` wrote (`problem` None) or could not write (`problem` says why)."""

    path: str
    signed: bool
    problem: str | None = None


def _path(name: str) -> str:
    return host.state_json_path("records", name)


def save(name: str, path: str, statement: dict, key: signing.Key | None) -> None:
    """Keep the statement of a started sandbox until it is removed; the key stays where it is (its
    file is read again at `down`, never copied)."""
    host.write_state_json(_path(name), {"path": path, "statement": statement,
                                        "key": None if key is None else {"file": os.path.abspath(key.file), "keyid": key.keyid}})


def pending(name: str) -> dict | None:
    return host.read_state_json(_path(name))


def drop(name: str) -> None:
    host.drop_state(_path(name))


def names() -> tuple[str, ...]:
    try:
        return tuple(n[:-5] for n in os.listdir(os.path.dirname(_path("x"))) if n.endswith(".json"))
    except OSError:
        return ()


def egress(engine, name: str) -> dict | None:
    """The report's egress of a kept record's sandbox in proxy mode, read from its proxy (before
    `down` removes it); None when no record is kept or the sandbox has no proxy."""
    saved = pending(name)
    if not saved or saved["statement"]["predicate"]["report"].get("egress") is None:
        return None
    from launcher.errors import SandboxError
    from launcher.launch import sandboxes
    from launcher.targets.report import egress_json

    try:
        data = egress_json(sandboxes.egress_log(engine, name) or ())
        changes = sandboxes.rule_changes(engine, name)   # `sandbox egress` while it ran: when, what, why
        return {**data, "rule_changes": [asdict(c) for c in changes]} if changes else data
    except SandboxError as exc:
        return {"blocked": [], "requests": [], "error": f"the proxy's log was not read: {exc}"}


def finish(name: str, removed_by: str, changes: list[dict], egress: dict | None) -> Written | None:
    """Write the record of the removed sandbox `name` (None when none was asked for): the end
    time, who removed it, the surfaces the agent changed and (proxy mode) its egress, then signed
    again with the key read now, which must be the one `up` was given. Not written: kept."""
    saved = pending(name)
    if saved is None:
        return None
    path, statement, asked = saved["path"], saved["statement"], saved["key"]
    pred = statement["predicate"]
    pred["run"].update(finished_at=attest.now(), removed_by=removed_by)
    pred["report"]["workspace_changes"] = changes
    if egress is not None:   # the rules in force stay as the start recorded them
        kept = pred["report"].get("egress") or {}
        pred["report"]["egress"] = {**({"rules": kept["rules"]} if "rules" in kept else {}), **egress}
    statement["subject"] = attest.subjects(pred)
    try:
        key = None
        if asked:
            key = signing.signing_key(asked["file"])
            if key.keyid != asked["keyid"]:
                raise signing.KeyInvalid(f"{asked['file']}: holds another key (keyid {key.keyid}) than at `sandbox up` "
                                         f"({asked['keyid']})")
        attest.write(path, statement, key)
    except (OSError, ValueError) as exc:   # KeyInvalid is a ValueError; still kept
        return Written(path=path, signed=bool(asked),
                       problem=f"the attestation record was not written to {path}: {exc}")
    drop(name)
    return Written(path=path, signed=bool(asked))


def stale(sandbox: str, say) -> None:
    """A kept `up --attest` record of an earlier sandbox of this name, removed behind our back (no
    `down`, no `gc` since): written now, before this start could be taken for its end."""
    if pending(sandbox) is None:
        return
    written = finish(sandbox, "found removed by `sandbox up`", [], None)
    if written.problem:   # not kept: the new sandbox's `down` must not write it as its own
        drop(sandbox)
        say(f"warning: the earlier {sandbox} was removed without `sandbox down`, and {written.problem}; dropped")
    else:
        say(f"the attestation record of the earlier {sandbox} (removed without `sandbox down`) was written to "
            f"{written.path}")


def keep_start(planned, engine, recorder, probe, started: float, path: str, key) -> None:
    """up --attest: the record of the start (its plan, layers, images, engine, probe) kept on the
    host until `sandbox down` writes it to `path`."""
    from launcher.errors import AttestationInvalid
    from launcher.targets import report

    plan = planned.plan
    data = report.build(status="ok", exit_code=0, started=started, plan=plan, probe=probe,
                        layer_notes=planned.layered.effective.notes)
    if plan.proxy:   # replaced by the proxy's log at `sandbox down`; `gc` finds the proxy gone
        data["egress"] = {**data["egress"], "blocked": [], "requests": [], "error": "not read: the sandbox was removed "
                          "without `sandbox down` (its proxy's log went with it)"}
    statement = attest.build(recorder=recorder, plan=plan, policy=planned.policy,
                             layers=planned.layered.effective.layers, engine=engine, report=data, signer=key)
    try:
        save(plan.container.name, path, statement, key)
    except OSError as exc:
        name = plan.container.name
        raise AttestationInvalid(f"the attestation record cannot be kept until `sandbox down`: {exc}; {name} is up: "
                                 f"`sandbox down {name}` removes it") from None
