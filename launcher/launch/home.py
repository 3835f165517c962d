"""home.mode volume: the agent's home as a named Docker volume per workspace, trust key and agent
profile, kept from one run to the next. Made (or reused) before the sandbox starts and handed to
the agent's uid:gid with mode 0700 by a tools container; never shared across workspaces, nor
between sandboxes whose policies reach different things (launcher/plan/trustlevel.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from launcher import labels as label
from launcher.engine.engineproto import Engine
from launcher.engine.tools import run_tool
from launcher.errors import EngineError, PolicyError, Problem
from launcher.plan.plan import CACHE_PROFILE, HomeSpec, Mount, MountKind

AT = "/home-volume"     # where the tools container sees it (not in the image: nothing is copied in)
CAPS = ("CHOWN", "FOWNER")   # chown the root to the agent, then chmod what is no longer root's

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class HomeVolume:
    name: str
    workspace: str
    profile: str
    trust: str                      # trustlevel.key of the sandboxes that use it; "unkeyed": named the old way
    created: str
    users: tuple[str, ...]          # sandbox containers using it now


def prepare(engine: Engine, spec: HomeSpec, progress: Progress) -> bool:
    """Create the home volume if it is missing (True), or reuse this workspace's; either way its
    root is then the agent's, mode 0700 (what the probe's home.private checks). A volume of that
    name that is not this workspace's home under this trust key is refused, never mounted."""
    found = engine.volume_info(spec.volume)
    made = found is None
    if made:
        engine.create_volume(spec.volume, dict(spec.labels))
        progress(f"created the {_what(spec)} {spec.volume}: it keeps {_kept(spec)} for the next run on "
                 f"{spec.workspace} (`sandbox down --purge`, `sandbox gc --volumes` remove it)")
    else:
        have = found.labels
        if have.get(label.KIND) != "home" or have.get(label.WORKSPACE) != spec.workspace:
            raise PolicyError([Problem(file="command line", path=_path(spec), expected=f"the {_what(spec)} of {spec.workspace}",
                                       found=f"volume {spec.volume} is " + (f"the home of {have.get(label.WORKSPACE)}"
                                                                          if have.get(label.KIND) == "home" else "not a home volume of ours"),
                                       hint=f"a {_what(spec)} is never shared; remove that volume{_instead(spec)}")])
        if have.get(label.TRUST) != spec.trust:   # what a sandbox of another reach wrote never comes in
            raise PolicyError([Problem(file="command line", path=_path(spec),
                                       expected=f"the {_what(spec)} of {spec.workspace} under trust key {spec.trust}",
                                       found=f"volume {spec.volume} was written under trust key {have.get(label.TRUST) or 'none'}",
                                       hint=f"a {_what(spec)} is never shared between policies of different reach; "
                                            f"remove that volume{_instead(spec)}")])
        progress(f"using the {_what(spec)} {spec.volume} (kept from earlier runs on this workspace)")
    try:
        run_tool(engine, name=spec.volume, entrypoint=("/bin/sh", "-c", 'chown "$1" "$2" && chmod 0700 "$2"', "home"),
                 argv=[f"{spec.uid}:{spec.gid}", AT],
                 mounts=[Mount(kind=MountKind.VOLUME, source=spec.volume, target=AT, read_only=False, no_copy=True)],
                 caps=CAPS, labels={label.HOME: spec.volume}, what=f"handing {spec.volume} to uid {spec.uid}")
    except BaseException:
        if made:   # nothing of the agent's is in it yet
            try:
                engine.remove_volume(spec.volume)
            except EngineError:
                pass
        raise
    return made


def _what(spec: HomeSpec) -> str:
    return "download cache" if spec.profile == CACHE_PROFILE else "home volume"


def _path(spec: HomeSpec) -> str:
    return "network.registries" if spec.profile == CACHE_PROFILE else "home.mode"


def _instead(spec: HomeSpec) -> str:
    return "" if spec.profile == CACHE_PROFILE else ", or use home: {mode: tmpfs}"


def _kept(spec: HomeSpec) -> str:
    return "the registries' downloads" if spec.profile == CACHE_PROFILE else "the agent's home"


def _users(engine: Engine, name: str) -> tuple[str, ...]:
    """The sandboxes using a home volume (or a download cache, kept the same way)."""
    return tuple(dict.fromkeys(i.name for key in (label.HOME, label.CACHE) for i in engine.list(label.selector(key, name))
                               if i.labels.get(label.KIND) in ("run", "up")))


def all_homes(engine: Engine, workspace: str | None = None) -> list[HomeVolume]:
    """Home volumes (of one workspace, or all), with the sandboxes using each."""
    filters = [label.selector(label.KIND, "home")] + ([label.selector(label.WORKSPACE, workspace)] if workspace else [])
    out = []
    for volume in sorted(engine.list_volumes(*filters), key=lambda v: v.name):
        labels = volume.labels
        out.append(HomeVolume(name=volume.name, workspace=labels.get(label.WORKSPACE, "?"),
                              profile=labels.get(label.PROFILE, "?"), trust=labels.get(label.TRUST, "unkeyed"),
                              created=volume.created,
                              users=_users(engine, volume.name)))
    return out


def remove_unused(engine: Engine, workspace: str | None = None) -> tuple[list[str], list[str]]:
    """Remove the home volumes (of one workspace, or all) no sandbox uses: (removed, kept in use)."""
    removed, kept = [], []
    for home in all_homes(engine, workspace):
        if home.users:
            kept.append(f"{home.name} (in use by {', '.join(home.users)})")
            continue
        engine.remove_volume(home.name)
        removed.append(home.name)
    return removed, kept
