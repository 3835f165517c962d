"""`sandbox fork` on the real engine: two agents on two approaches from one copy. The fork is a copy
in every way diff, apply, discard and run --name know, shares nothing writable with its origin,
and after one is applied the other's apply refuses the paths both changed (119), writing nothing."""

from __future__ import annotations

import json
import os
import time

import pytest

from launcher import labels as label
from test_copy import repo, run_copy, sandbox, snapshot  # noqa: F401 - repo: a fixture

pytestmark = pytest.mark.engine


def discard(name: str) -> None:
    """`sandbox discard --yes`, again while another session's `gc` holds the copy in a tools container."""
    for _ in range(30):
        done = sandbox("discard", "--yes", name)
        if done.returncode == 0 or "no copy named" in done.stderr:
            return
        time.sleep(2)


def left(engine, *names: str) -> list[str]:
    """Every volume or container of ours that belongs to one of the copies `names`."""
    found = [v.name for n in names for v in engine.list_volumes(label.selector(label.COPY, n))]
    found += [v for n in names for v in (f"{n}-base", f"{n}-upper", f"{n}-tree") if engine.volume_info(v)]
    return found + [c.name for n in names for c in engine.list(label.selector(label.COPY, n))]


def changed(name: str) -> dict:
    shown = sandbox("diff", name, "--json")
    assert shown.returncode == 0, shown.stderr
    return {c["path"]: c for c in json.loads(shown.stdout)["changes"]}


def test_two_agents_on_two_forks_and_the_second_apply_refuses_what_both_changed(engine, repo):
    a, b, pristine = (f"fork-{part}-{os.getpid()}" for part in ("a", "b", "c"))
    try:
        made = run_copy(repo, a, "sh", "-c", "echo approach A > README.md && echo mine > a-only.txt")
        assert made.returncode == 0, made.stderr
        forked = sandbox("fork", a, b, "--json")
        assert forked.returncode == 0, forked.stderr
        told = json.loads(forked.stdout)
        assert told["ok"] and told["copy"] == b and told["origin"] == a and told["changes"] == 2, told
        assert told["workspace"] == str(repo)
        print(f"fork of the example repository: {told['seconds']:.2f} s")   # -s shows it (the report's figure)
        # B's agent works on what A left, differently; A's copy does not see it, nor B A's later work
        other = run_copy(repo, b, "sh", "-c", "cat a-only.txt && echo approach B > README.md && echo b > b-only.txt")
        assert other.returncode == 0 and "mine" in other.stdout, other.stderr
        assert run_copy(repo, a, "sh", "-c", "test ! -e b-only.txt && echo later > a-later.txt").returncode == 0
        seen_a, seen_b = changed(a), changed(b)
        assert set(seen_a) == {"README.md", "a-only.txt", "a-later.txt"}, seen_a
        assert set(seen_b) == {"README.md", "a-only.txt", "b-only.txt"}, seen_b   # against the same base
        assert "+approach A" in seen_a["README.md"]["patch"] and "+approach B" in seen_b["README.md"]["patch"]
        assert seen_a["README.md"]["old"] == seen_b["README.md"]["old"]

        listed = {i["name"]: i for i in json.loads(sandbox("ls", "--json").stdout)}
        assert listed[b]["kind"] == "copy" and listed[b]["workspace"] == listed[a]["workspace"], listed.get(b)
        assert listed[b]["trust"] == listed[a]["trust"]

        # --at: a fork of the copy as it was made holds nothing yet
        assert sandbox("fork", a, pristine, "--at", "0").returncode == 0
        assert changed(pristine) == {}
        discard(pristine)

        assert sandbox("apply", a).returncode == 0
        assert (repo / "README.md").read_text() == "approach A\n"
        before = snapshot(repo)
        refused = sandbox("apply", b)
        assert refused.returncode == 119, refused.stderr
        assert "README.md: changed on the host since the copy was taken" in refused.stderr
        assert f"{b} is a fork of {a}@" in refused.stderr and "--to BRANCH" in refused.stderr
        assert "a-only.txt" not in refused.stderr   # what A wrote and B holds alike is no conflict
        assert snapshot(repo) == before              # all or nothing: b-only.txt did not arrive either
        discard(a)                                   # the fork outlives its origin
        assert set(changed(b)) == {"README.md", "a-only.txt", "b-only.txt"}
    finally:
        for name in (a, b, pristine):
            discard(name)
    assert left(engine, a, b, pristine) == []


def test_a_fork_refused_makes_nothing_and_keeps_its_origin(engine, repo):
    a, new = f"fork-d-{os.getpid()}", f"fork-e-{os.getpid()}"
    try:
        assert run_copy(repo, a, "sh", "-c", "echo x > x.txt").returncode == 0
        before = json.loads(sandbox("checkpoints", a, "--json").stdout)
        for args, code, said in (
                (("nosuch-copy", new), 121, "no copy named 'nosuch-copy'"),
                ((a, a), 120, f"copy {a} exists"),
                ((a, "x"), 2, "as Docker names containers"),
                ((a, "bad/name"), 2, "as Docker names containers"),
                ((a, new, "--at", "99"), 121, f"{a} has no checkpoint 99")):
            result = sandbox("fork", *args)
            assert result.returncode == code and said in result.stderr, (args, result.returncode, result.stderr)
            assert "Traceback" not in result.stderr
            assert left(engine, new, "x", "bad/name") == []
        assert json.loads(sandbox("checkpoints", a, "--json").stdout) == before
        assert set(changed(a)) == {"x.txt"}
        assert sandbox("fork", a, new).returncode == 0
        again = sandbox("fork", a, new, "--json")   # NEW exists now
        assert again.returncode == 120 and json.loads(again.stdout)["exit_code"] == 120, again.stdout
    finally:
        for name in (a, new):
            discard(name)
    assert left(engine, a, new) == []
