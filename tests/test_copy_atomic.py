"""Copy mode's way back without an engine (issue 40, second round): apply is all or nothing even
when a write fails half-way, names with control bytes never reach the host, a type change is
written or refused like any change, and one copy gc cannot read never stops the others."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from launcher.copies import apply, export, review, store
from launcher.errors import PolicyError, SandboxError
from launcher.launch import sandboxes
from test_copy_review import PROTECTED, exported, file_state

pytestmark = pytest.mark.usefixtures("private_tempdir")


def tree(root) -> dict:
    """Every entry below root: type, mode and content; names as they are (temporaries too)."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content = os.readlink(path) if os.path.islink(path) else open(path, "rb").read() if os.path.isfile(path) else b""
            found[os.path.relpath(path, root)] = (st.st_mode, content)
    return found


def host(root) -> None:
    """A host tree with files at several depths, a directory the agent turns into a file, and a
    file it turns into a directory."""
    for rel, data in (("a.txt", b"a\n"), ("src/b.py", b"b\n"), ("src/deep/er/c.py", b"c\n"), ("sub/x", b"x\n"),
                      ("sub/in/y", b"y\n"), ("plain", b"p\n"), ("z-last.txt", b"z\n")):
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as out:
            out.write(data)


def work() -> tuple[list[dict], dict[str, bytes]]:
    """The agent's changes to host(): modified, added at depth, deleted, dir -> file, file -> dir."""
    changes = [
        {"path": "a.txt", "status": "modified", "old": file_state(b"a\n"), "new": file_state(b"A\n")},
        {"path": "new/one/two/n.txt", "status": "added", "old": None, "new": file_state(b"n\n")},
        {"path": "plain", "status": "type-changed", "dir": "new", "old": file_state(b"p\n"), "new": None},
        {"path": "plain/inside", "status": "added", "old": None, "new": file_state(b"i\n")},
        {"path": "src/b.py", "status": "deleted", "old": file_state(b"b\n"), "new": None},
        {"path": "src/deep/er/c.py", "status": "modified", "old": file_state(b"c\n"), "new": file_state(b"C\n", True)},
        {"path": "sub", "status": "type-changed", "dir": "old", "old": None, "new": file_state(b"now a file\n")},
        {"path": "sub/in/y", "status": "deleted", "old": file_state(b"y\n"), "new": None},
        {"path": "sub/x", "status": "deleted", "old": file_state(b"x\n"), "new": None},
        {"path": "z-last.txt", "status": "modified", "old": file_state(b"z\n"), "new": file_state(b"Z\n")},
    ]
    return changes, {"a.txt": b"A\n", "new/one/two/n.txt": b"n\n", "plain/inside": b"i\n",
                     "src/deep/er/c.py": b"C\n", "sub": b"now a file\n", "z-last.txt": b"Z\n"}


def test_type_changes_apply_both_ways(tmp_path):
    host(tmp_path)
    changes, files = work()
    assert apply.apply_to_tree(str(tmp_path), exported(changes, files)) == (10, 0)
    assert (tmp_path / "sub").read_bytes() == b"now a file\n" and (tmp_path / "plain" / "inside").read_bytes() == b"i\n"
    assert (tmp_path / "new" / "one" / "two" / "n.txt").read_bytes() == b"n\n"
    assert os.stat(tmp_path / "src" / "deep" / "er" / "c.py").st_mode & 0o777 == 0o755
    assert not [n for n in tree(tmp_path) if ".sandbox-" in n]   # no temporary, no original kept aside


@pytest.mark.parametrize("fail_at", [1, 2, 4, 6])   # the first file, one at depth, the one below a file, the last
def test_a_write_that_fails_half_way_leaves_the_tree_exactly_as_it_was(tmp_path, monkeypatch, fail_at):
    host(tmp_path)
    before = tree(tmp_path)
    changes, files = work()
    data = exported(changes, files)
    real, calls = export.Blob.write_to, []

    def write_to(self, out):
        calls.append(self)
        if len(calls) == fail_at:
            real(self, out)   # some of it was written: then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, out)
    monkeypatch.setattr(export.Blob, "write_to", write_to)
    with pytest.raises(PolicyError) as info:
        apply.apply_to_tree(str(tmp_path), data)
    assert "No space left on device" in str(info.value) and "exactly as it was before" in str(info.value)
    assert tree(tmp_path) == before   # nothing renamed, removed, made or left behind


@pytest.mark.parametrize("fail_at", [1, 3, 5])
def test_a_rename_that_fails_half_way_is_undone_too(tmp_path, monkeypatch, fail_at):
    """Past the temporaries: originals already set aside and new files already in place go back."""
    host(tmp_path)
    before = tree(tmp_path)
    changes, files = work()
    data = exported(changes, files)
    real, calls = os.rename, []

    def rename(src, dst, **kw):
        calls.append(dst)
        if len(calls) == fail_at:
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst, **kw)
    monkeypatch.setattr(apply.os, "rename", rename)
    with pytest.raises(PolicyError) as info:
        apply.apply_to_tree(str(tmp_path), data)
    monkeypatch.setattr(apply.os, "rename", real)
    assert "Input/output error" in str(info.value)
    assert tree(tmp_path) == before


def test_an_interrupt_half_way_is_undone_and_raised(tmp_path, monkeypatch):
    host(tmp_path)
    before = tree(tmp_path)
    changes, files = work()
    data = exported(changes, files)
    monkeypatch.setattr(export.Blob, "write_to", lambda self, out: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        apply.apply_to_tree(str(tmp_path), data)
    assert tree(tmp_path) == before


def test_a_read_only_directory_half_way_writes_nothing(tmp_path):
    host(tmp_path)
    before = tree(tmp_path)
    os.chmod(tmp_path / "src" / "deep" / "er", 0o555)
    changes, files = work()
    try:
        if os.geteuid() == 0:   # root writes anyway: make it immutable instead
            assert os.system(f"chattr +i {tmp_path / 'src' / 'deep' / 'er'}") == 0
        with pytest.raises(PolicyError) as info:
            apply.apply_to_tree(str(tmp_path), exported(changes, files))
        assert "src/deep/er/c.py" in str(info.value)
    finally:
        if os.geteuid() == 0:
            os.system(f"chattr -i {tmp_path / 'src' / 'deep' / 'er'}")
        os.chmod(tmp_path / "src" / "deep" / "er", 0o755)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("name", ["new\nline.txt", "esc\x1b[31mred", "tab\there", "del\x7f", "c1\x9bcsi", "cr\rx",
                                  "deep/er/\x07bell/file", "dir\nname/inside.txt", "nul-ish\x00"])
def test_a_name_with_control_bytes_is_refused_and_shown_escaped(name):
    change = {"path": name, "status": "added", "old": None, "new": file_state(b"x\n")}
    assert "control characters" in review.refusal(change, PROTECTED)
    shown = "\n".join(review.stat_lines(review.annotated([change], PROTECTED)) +
                      review.refusal_lines(review.annotated([change], PROTECTED)))
    assert not any(c in shown.replace("\n", "") for c in "\x1b\t\x7f\x9b\r\x07\x00"), shown
    assert "REFUSED" in shown


def test_a_link_whose_target_has_control_bytes_is_refused():
    change = {"path": "l", "status": "added", "old": None, "new": {"type": "symlink", "target": "a\nb"}}
    assert "control characters" in review.refusal(change, PROTECTED)


@pytest.mark.parametrize("kind", ["fifo", "socket", "char-device", "block-device"])
@pytest.mark.parametrize("side", ["added", "dir"])
def test_special_files_are_refused_and_named(kind, side):
    change = {"path": "x/y", "status": "added" if side == "added" else "type-changed", "old": None,
              "new": {"type": "other", "kind": kind}} | ({"dir": "old"} if side == "dir" else {})
    found = review.annotated([change], PROTECTED)
    assert found[0]["refused"].endswith(f"(a {kind})") and found[0]["needs"] == []
    assert kind in review.stat_lines(found)[0] and (side != "dir" or "directory -> " in review.stat_lines(found)[0])


def test_gc_keeps_a_copy_it_cannot_read_and_goes_on_with_the_others(monkeypatch):
    copies = [store.Copy(name=n, workspace="/nowhere", policy="p", protected=(), created="", maker=1)
              for n in ("a-broken", "b-clean", "c-broken", "d-work")]
    dropped = []

    def unapplied(engine, copy):
        if "broken" in copy.name:
            raise SandboxError("checkpointing failed (exit 1):\n  Traceback ...")
        return 0 if copy.name == "b-clean" else 3
    monkeypatch.setattr(store, "all_copies", lambda engine: copies)
    monkeypatch.setattr(store, "complete", lambda engine, name: True)
    monkeypatch.setattr(store, "drop", lambda engine, name: dropped.append(name))
    monkeypatch.setattr(sandboxes, "unapplied", unapplied)

    class Engine:
        def list_volumes(self, selector=None):
            return []
    verdicts = {v.name: v for v in sandboxes.gc_copies(Engine(), force=False)}
    assert dropped == ["b-clean"]
    assert verdicts["a-broken"].error == "checkpointing failed (exit 1):" and not verdicts["a-broken"].removed
    assert verdicts["c-broken"].pending is None and verdicts["d-work"].pending == 3
    dropped.clear()
    forced = sandboxes.gc_copies(Engine(), force=True)
    assert dropped == ["a-broken", "b-clean", "c-broken", "d-work"] and all(v.removed for v in forced)


def test_the_selftest_judges_the_copy_passes_way_back_plants():
    from launcher.selftest import runner

    planted = [{"path": "README.md", "status": "type-changed", "dir": "new", "old": file_state(b"r\n"), "new": None},
               {"path": "README.md/in/deep/f", "status": "added", "old": None, "new": file_state(b"x\n")},
               {"path": "tracked.txt", "status": "type-changed", "old": file_state(b"t\n"),
                "new": {"type": "other", "kind": "fifo"}}] + [
        {"path": f"wayback/{n}", "status": "added", "old": None, "new": file_state(b"x")}
        for n in ("nl\nx", "esc\x1b[31mx", "del\x7fx", "c1\x9bx")]
    verdicts = {r.id: r for r in runner.judge_way_back(review.annotated(planted, PROTECTED))}
    assert all(r.verdict == "pass" for r in verdicts.values()), verdicts
    lenient = review.annotated(planted, PROTECTED)
    lenient[-1]["refused"] = ""                               # a control name apply would write: FAIL
    lenient[2] = {**lenient[2], "new": {"type": "other"}}     # a FIFO not named as one: FAIL
    verdicts = {r.id: r for r in runner.judge_way_back(lenient)}
    assert {r.verdict for r in verdicts.values()} == {"FAIL"} and "c1\\u009bx" in verdicts["outside.copy_control_names"].observed


@pytest.mark.parametrize("fail", [False, True])
def test_files_of_the_host_named_like_applys_own_are_never_touched(tmp_path, monkeypatch, fail):
    host(tmp_path)
    for where in ("", "src/deep/er/"):   # the names apply would pick first, in the root and at depth
        for n in range(1, 8):
            for kind in ("new", "old"):
                (tmp_path / f"{where}.sandbox-{kind}-{os.getpid()}-{n}").write_bytes(b"the user's\n")
    before = tree(tmp_path)
    changes, files = work()
    if fail:
        monkeypatch.setattr(export.Blob, "write_to", lambda self, out: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
        with pytest.raises(PolicyError):
            apply.apply_to_tree(str(tmp_path), exported(changes, files))
        assert tree(tmp_path) == before
        return
    apply.apply_to_tree(str(tmp_path), exported(changes, files))
    after = tree(tmp_path)
    assert {k: v for k, v in before.items() if ".sandbox-" in k} == {k: v for k, v in after.items() if ".sandbox-" in k}


def test_type_changes_commit_to_a_branch_both_ways(tmp_path):
    from launcher.copies.branch import commit_to_branch

    host(tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "start"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    changes, files = work()
    data = export.spooled(tuple({**c, "refused": ""} for c in changes), {"head": head}, files)
    commit = commit_to_branch(str(tmp_path), data, "agent/types", "m")
    listed = subprocess.run(git + ["ls-tree", "-r", "--name-only", commit], capture_output=True, text=True).stdout.split()
    assert sorted(listed) == ["a.txt", "new/one/two/n.txt", "plain/inside", "src/deep/er/c.py", "sub", "z-last.txt"]
