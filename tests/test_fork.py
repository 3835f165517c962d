"""`sandbox fork` with the fake engine: the fork gets volumes of its own with its origin's workspace,
trust key and protected paths, its origin only ever mounted read-only; bad input makes nothing;
a failure midway removes what it made and keeps the origin. The real run: test_fork_engine.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher import labels as label
from launcher.cli import main
from launcher.copies import fork
from launcher.engine.enginefake import FakeEngine
from launcher.errors import CopyConflict, EngineError, NotFound, PolicyError

ORIGIN = {label.MANAGED: "1", label.KIND: "copy", label.COPY: "a", label.WORKSPACE: "/ws", label.POLICY: "untrusted",
          label.TRUST: "t1", label.OWNER_PID: "1", label.PROTECTED: json.dumps([".sandbox.yaml"])}
TAKEN = json.dumps({"id": 3, "changes": 2, "clean": False}).encode()   # what the checkpoint and the fork tool say


def engine(exit_code: int = 0, copies=("a",), said: bytes = TAKEN) -> FakeEngine:
    eng = FakeEngine(output=[(said, None)], exit_code=exit_code, images={"sandbox/agent:bookworm": {}})
    for name in copies:
        for part in ("base", "upper", "tree"):
            eng.create_volume(f"{name}-{part}", {**ORIGIN, label.COPY: name})
    return eng


def mounts(eng: FakeEngine) -> dict[str, tuple[str, bool]]:
    """The last tools container's volumes: source -> (target, read-only)."""
    return {m["Source"]: (m["Target"], m["ReadOnly"]) for m in eng.created[-1]["HostConfig"]["Mounts"]
            if m["Type"] == "volume"}


def test_a_fork_is_a_copy_of_the_same_workspace_and_trust_with_volumes_of_its_own():
    eng = engine()
    made = fork.fork(eng, "a", "b")
    assert (made.name, made.origin, made.checkpoint, made.workspace, made.changes) == ("b", "a", 3, "/ws", 2)
    for part in ("base", "upper", "tree"):
        labels = eng.volumes[f"b-{part}"]["Labels"]
        assert labels == {**ORIGIN, label.COPY: "b", label.OWNER_PID: labels[label.OWNER_PID], label.FORKED: "a@3"}
    assert eng.created[-1]["Cmd"][-5:] == ["fork", "a", "3", "--limit", str(8 << 30)] and eng.created[-1]["HostConfig"]["NetworkMode"] == "none"
    assert mounts(eng) == {"b-base": ("/base", False), "b-upper": ("/v", False),
                           "a-base": ("/from/base", True), "a-upper": ("/from/v", True)}
    tree = eng.volumes["b-tree"]["Options"]["o"]
    assert tree.startswith("lowerdir=/fake/volumes/b-base/_data,upperdir=/fake/volumes/b-upper/_data/upper,")
    assert "/a-" not in tree                    # nothing of the origin's in the fork's overlay
    assert eng.removed_volumes == [] and eng.containers == {}
    assert fork.origin(eng, "b") == "a@3" and fork.origin(eng, "a") == ""


def test_a_fork_at_a_checkpoint_takes_none_of_the_origin(monkeypatch):
    from launcher.copies import store

    monkeypatch.setattr(store, "checkpoints", lambda eng, name: [{"id": 0}, {"id": 1}])
    monkeypatch.setattr(store, "checkpoint", lambda *a, **k: pytest.fail("a fork --at takes no checkpoint"))
    eng = engine()
    assert fork.fork(eng, "a", "b", at=1).checkpoint == 1
    assert eng.volumes["b-upper"]["Labels"][label.FORKED] == "a@1"
    with pytest.raises(NotFound, match="a has no checkpoint 7; it has 0, 1"):
        fork.fork(eng, "a", "c", at=7)
    assert not [v for v in eng.volumes if v.startswith("c-")]


@pytest.mark.parametrize("taken", [("b",), ()])
def test_a_name_taken_or_an_unknown_origin_makes_nothing(taken):
    eng = engine(copies=("a",) + taken)
    eng.create_volume("half-upper", {label.MANAGED: "1", label.KIND: "copy", label.COPY: "half"})   # a killed one's
    before, made = dict(eng.volumes), len(eng.created)
    for origin, new, error, said in (("a", "a", PolicyError, "copy a exists (of /ws)"),
                                     ("a", "half", PolicyError, "copy half exists"),
                                     ("nosuch", "c", NotFound, "no copy named 'nosuch'")):
        with pytest.raises(error, match=said.replace("(", r"\(").replace(")", r"\)")):
            fork.fork(eng, origin, new)
    if taken:
        with pytest.raises(PolicyError, match="choose another NEW"):
            fork.fork(eng, "a", "b")
    assert eng.volumes == before and len(eng.created) == made and eng.removed_volumes == []


def test_a_fork_that_fails_midway_removes_what_it_made_and_keeps_the_origin(monkeypatch):
    from launcher.copies import store

    monkeypatch.setattr(store, "checkpoints", lambda eng, name: [{"id": 3}])
    eng = engine(exit_code=1)   # the fork tool fails (a full disk, say)
    with pytest.raises(EngineError, match="forking a at checkpoint 3 as b failed"):
        fork.fork(eng, "a", "b", at=3)
    assert sorted(eng.removed_volumes) == ["b-base", "b-upper"]
    assert sorted(eng.volumes) == ["a-base", "a-tree", "a-upper"] and eng.containers == {}


def test_a_fork_of_changes_over_the_copy_cap_makes_nothing(monkeypatch):
    from launcher.copies import store
    from launcher.copies.limits import Limits

    monkeypatch.setattr(store, "checkpoints", lambda eng, name: [{"id": 3}])
    eng = engine(said=json.dumps({"refused": {"usage": 5 << 20, "limit": 1 << 20}}).encode())
    with pytest.raises(PolicyError, match="a fork copies them") as refused:
        fork.fork(eng, "a", "b", at=3, limits=Limits(copy_bytes=1 << 20))
    assert "5.0 MiB" in str(refused.value) and "nothing was made" in str(refused.value)
    assert eng.created[-1]["Cmd"][-2:] == ["--limit", str(1 << 20)]
    assert sorted(eng.removed_volumes) == ["b-base", "b-upper"] and sorted(eng.volumes) == ["a-base", "a-tree", "a-upper"]


def test_a_forks_conflict_says_where_the_shared_work_came_from(monkeypatch):
    from launcher.usecases import copywork as applying

    eng = engine(copies=("a",))
    fork.fork(eng, "a", "b")

    def conflict():
        raise CopyConflict("the host tree changed where the agent's changes go; nothing was written:\n  x: changed",
                           ("x: changed",))
    with pytest.raises(CopyConflict) as told:
        applying.forks_told(eng, "b", conflict)
    assert "b is a fork of a@3" in str(told.value) and "--to BRANCH" in str(told.value)
    assert told.value.conflicts == ("x: changed",) and told.value.exit_code == 119
    with pytest.raises(CopyConflict) as plain:   # a copy that is no fork: as before
        applying.forks_told(eng, "a", conflict)
    assert "fork" not in str(plain.value)


@pytest.mark.parametrize("new", ["x", "bad/name", ".lead", "a\x1b[31m"])
def test_a_new_name_the_engine_would_refuse_is_refused_before_it(new):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    done = runner.invoke(main, ["fork", "a", new, "--json"], env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.exit_code == 2 and "as Docker names containers" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr
    assert json.loads(done.stdout)["exit_code"] == 2
