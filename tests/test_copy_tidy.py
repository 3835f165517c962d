"""Copies without clutter: a run or an `up` whose copy holds no change leaves nothing behind, a copy
with changes stays and says how to review it, `up --fresh` never discards work, `sandbox ls` shows
which copies hold changes (read from their volumes at once, no tools container per copy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher import labels as label
from launcher.copies import store
from launcher.engine.enginefake import FakeEngine, tar_of

SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, timeout=300):
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def volumes(copies=(), users=(), states=None) -> FakeEngine:
    """The fake engine holding copies' volumes, `users` (up sandboxes on each copy), and the
    state.json of each copy in `states` (copy -> its bytes) for the archive API to answer."""
    def archive(info, path):
        where, name = path.rsplit("/", 1)
        volume = next(m.source for m in info.mounts if m.target == where)
        data = (states or {}).get(volume.rsplit("-", 1)[0])
        return None if data is None else tar_of(name, data)

    engine = FakeEngine(archive=archive)
    for c in copies:
        for part in ("base", "upper", "tree"):
            engine.create_volume(f"{c}-{part}", {label.MANAGED: "1", label.KIND: "copy", label.COPY: c, label.WORKSPACE: "/ws"})
        for user in users:
            engine.http.add_container(user, {label.MANAGED: "1", label.KIND: "up", label.COPY: c})
    return engine


def test_only_a_copy_that_never_held_a_change_is_dropped_and_never_one_in_use():
    held = volumes(["c1"])
    assert not store.drop_if_clean(held, "c1", {"changes": 2, "clean": False}) and held.removed_volumes == []
    history = volumes(["c1"])   # no change now, but a checkpoint holds some: rewind could bring them back
    assert not store.drop_if_clean(history, "c1", {"changes": 0, "clean": False}) and history.removed_volumes == []
    used = volumes(["c1"], users=["sandbox-up"])
    assert not store.drop_if_clean(used, "c1", {"changes": 0, "clean": True}) and used.removed_volumes == []
    clean = volumes(["c1"])
    assert store.drop_if_clean(clean, "c1", {"changes": 0, "clean": True})
    # the overlay first; its two layers then go at once, in either order
    assert clean.removed_volumes[0] == "c1-tree" and sorted(clean.removed_volumes[1:]) == ["c1-base", "c1-upper"]
    assert clean.volumes == {}


def test_ls_reads_every_copys_count_through_one_created_container():
    eng = volumes(["a", "b", "c"], states={"a": json.dumps({"changes": 3, "checkpoint": 2}).encode(),
                                           "b": b"not json"})
    found = {c.name: (c.changes, c.checkpoint) for c in store.states(eng, store.all_copies(eng))}
    assert found == {"a": (3, 2), "b": (None, None), "c": (None, None)}   # unreadable or missing: not known
    assert len(eng.created) == 1 and eng.created[0]["Cmd"] == [] and eng.created[0]["HostConfig"]["NetworkMode"] == "none"
    assert all(m["ReadOnly"] for m in eng.created[0]["HostConfig"]["Mounts"]) and eng.calls[-1] == "remove"
    assert eng.containers == {}


def test_what_a_run_says_of_its_copy_comes_from_its_last_checkpoint(capsys):
    from launcher.cli.output import print_copy
    from launcher.launch.launch import Outcome

    def told(**kw):
        print_copy(Outcome(container="s", probe=None, exit_code=0, timed_out=False, copy="cp", **kw))
        return capsys.readouterr().err

    assert "no changes: copy cp dropped" in told(copy_changes=0, copy_dropped=True)
    kept = told(copy_changes=2)
    assert "(2 changed)" in kept and "review: sandbox diff cp" in kept
    assert "it stays for its checkpoints" in told(copy_changes=0)


def test_ls_shows_a_copys_changes():
    from launcher.cli.manage import _changes
    from launcher.launch.sandboxes import SandboxInfo

    def shown(kind, changes):
        return _changes(SandboxInfo(name="n", kind=kind, state="kept", policy="p", workspace="/w", created=0,
                                    changes=changes))

    assert [shown("copy", n) for n in (None, 0, 1, 5)] == ["?", "none", "1 file", "5 files"]
    assert shown("up", None) == "-"


def copy_volumes(engine, ws) -> list[str]:
    return sorted(v.name for v in engine.list_volumes(label.selector(label.KIND, "copy"),
                                                           label.selector(label.WORKSPACE, os.path.realpath(ws))))


@pytest.mark.engine
def test_a_run_that_changes_nothing_leaves_nothing_and_one_that_changes_stays_listed_with_its_count(engine, workspace):
    for _ in range(2):   # the measure: twice, and not one volume left
        nothing = sandbox("run", "--policy", "untrusted", "-w", str(workspace), "--", "true")
        assert nothing.returncode == 0 and "no changes: copy sandbox-untrusted-" in nothing.stderr, nothing.stderr
    assert copy_volumes(engine, workspace) == []
    name = f"tidy-keep-{os.getpid()}"
    try:
        kept = sandbox("run", "--name", name, "-w", str(workspace), "--", "sh", "-c", "echo x > new.txt")
        assert kept.returncode == 0 and f"copy {name} (1 changed)" in kept.stderr, kept.stderr
        assert f"review: sandbox diff {name}" in kept.stderr
        listed = {i["name"]: i for i in json.loads(sandbox("ls", "--json").stdout)}
        assert listed[name]["kind"] == "copy" and listed[name]["changes"] == 1, listed.get(name)
        row = next(line for line in sandbox("ls").stdout.splitlines() if line.startswith(name))
        assert " 1 file " in row, row
        # continued by name, and the change undone: none now, but its checkpoints hold it, so it stays
        undone = sandbox("run", "--name", name, "-w", str(workspace), "--", "rm", "new.txt")
        assert undone.returncode == 0 and f"no changes in the copy {name} now; it stays" in undone.stderr, undone.stderr
        assert len(copy_volumes(engine, workspace)) == 3
        assert json.loads(sandbox("checkpoints", name, "--json").stdout)[-1]["changes"] == 0
    finally:
        sandbox("discard", "--yes", name)
    assert copy_volumes(engine, workspace) == []
