"""`sandbox down` and `sandbox gc`: remove sandboxes with what belongs to them, then compare the
files host tools run with what they were at the start (the surface report) and finish the
attestation record of an `up --attest` sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from launcher.engine.engineproto import Engine
from launcher.errors import ExitCode
from launcher.host import baseline, host, probedir
from launcher.launch import records, sandboxes
from launcher.policy.surfaces import Change


@dataclass(frozen=True, kw_only=True)
class Surfaces:
    """What the agent of a removed sandbox changed among the files host tools run or trust."""

    sandbox: str
    workspace: str
    changes: tuple[Change, ...]


@dataclass(frozen=True, kw_only=True)
class Removed:
    """`down`'s answer: the sandbox's removal, its surface report, its record (None: none asked)."""

    name: str
    down: sandboxes.Down
    surfaces: Surfaces | None
    record: records.Written | None
    failing: bool    # CI or strict: a changed surface decides the exit code

    @property
    def exit_code(self) -> int:
        if self.failing and self.surfaces:
            return ExitCode.SURFACES_CHANGED
        return ExitCode.ATTESTATION_INVALID if self.record and self.record.problem else 0


@dataclass(frozen=True, kw_only=True)
class Collected:
    """`gc`'s answer: what went, the copies it judged, the surface reports and records of sandboxes
    removed without `down`."""

    removed: tuple[str, ...]                    # sandboxes, proxies, networks, volumes
    copies: tuple[sandboxes.CopyVerdict, ...]
    surfaces: tuple[Surfaces, ...] = ()
    records: tuple[tuple[str, records.Written], ...] = field(default=())


def surface_reports(names) -> tuple[Surfaces, ...]:
    """Each removed sandbox's saved surfaces against its workspace now (taken from the store)."""
    found = []
    for name in names:
        saved = baseline.take(name)
        changes = baseline.changes(*saved) if saved else ()
        if changes:
            found.append(Surfaces(sandbox=name, workspace=saved[0], changes=changes))
    return tuple(found)


def to_json(reports: tuple[Surfaces, ...]) -> dict[str, list[dict]]:
    from launcher.policy import surfaces

    return {r.sandbox: surfaces.to_json(r.changes) for r in reports}


def down(engine: Engine, name: str, *, purge: bool = False, strict: bool = False) -> Removed:
    """Stop and remove the sandbox `name` (with --purge its workspace's unused home volumes), then
    its surface report and record. `strict` (or CI): a changed surface is exit 123."""
    egress = records.egress(engine, name)   # `up --attest` in proxy mode: read before the proxy goes
    done = sandboxes.down(engine, name, purge=purge)
    [report] = surface_reports((name,)) or [None]
    changes = to_json((report,)).get(name, []) if report else []
    written = records.finish(name, "sandbox down", changes, egress)
    return Removed(name=name, down=done, surfaces=report, record=written, failing=strict or host.in_ci())


def gc(engine: Engine, *, everything: bool = False, force: bool = False, volumes: bool = False,
       progress: Callable[[str], None] = lambda line: None) -> Collected:
    """Remove what launchers left behind (with `everything`, running `up` sandboxes too), probe
    volumes of earlier versions, copies whose work is on the host (all unused ones with `force`),
    with `volumes` home volumes no sandbox uses; then the reports of sandboxes gone without `down`."""
    from launcher.engine import images
    from launcher.launch import home

    removed = sandboxes.gc(engine, everything)
    removed += sandboxes.stale_probe_volumes(engine, images.probe_volume_name())
    removed += probedir.remove_stale(images.probe_version())
    if volumes:
        removed += home.remove_unused(engine)[0]
    if any(i.kind == "copy" for i in sandboxes.ls(engine)):
        images.build(engine, images.agent_image(), progress)   # the copies' tools run in it
    copies = tuple(sandboxes.gc_copies(engine, force))
    alive = {item.name for item in sandboxes.ls(engine)}
    reports = surface_reports(tuple(n for n in baseline.names() if n not in alive))
    changed = to_json(reports)
    written = tuple((gone, w) for gone in records.names() if gone not in alive   # `up --attest`, removed without `down`
                    if (w := records.finish(gone, "sandbox gc", changed.get(gone, []), None)) is not None)
    return Collected(removed=tuple(removed), copies=copies, surfaces=reports, records=written)
