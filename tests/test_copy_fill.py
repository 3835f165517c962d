"""The copy made through the engine's archive API (launcher/copies/fill.py) is the copy the tools
container's tar|tar makes: same entries, types, modes, owners, link targets, content and times,
the same upper volume; its excludes are GNU tar's. A run whose upper layer is still empty drops
its copy without a tools container; any other is checkpointed as before."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from launcher import labels as label
from launcher.copies import fill, store
from launcher.engine.enginefake import FakeEngine
from launcher.engine.tools import read_files, run_tool
from launcher.plan.plan import CopySpec, Mount, MountKind

PATTERNS = ["node_modules", "*.o", "build/*.tmp", "./top.txt", "deep/x", "d?r", "*/cache", "a b", "ünï", "src/",
            ".*rc", "*", "no-such", "deep", "x*y/z"]


def rich_tree(root) -> None:
    """Symlinks (relative, absolute, dangling, to a directory), executable and setuid bits, empty
    and private directories, hard links, a FIFO, odd and long names, a .git with a commit."""
    os.makedirs(root / "src" / "deep" / "x")
    (root / "src" / "deep" / "x" / "f.py").write_text("print(1)\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "src" / "run.sh", 0o755)
    (root / "setuid").write_text("s\n")
    os.chmod(root / "setuid", 0o6755)
    (root / "private").write_text("p\n")
    os.chmod(root / "private", 0o600)
    os.makedirs(root / "empty" / "nested")
    os.makedirs(root / "closed")
    os.chmod(root / "closed", 0o700)
    os.makedirs(root / "sticky")
    os.chmod(root / "sticky", 0o1777)
    os.symlink("src/run.sh", root / "rel-link")
    os.symlink("/etc/passwd", root / "abs-link")
    os.symlink("missing", root / "dangling")
    os.utime(root / "dangling", ns=(10**18, 10**18), follow_symlinks=False)
    os.symlink("src", root / "dir-link")
    os.link(root / "src" / "run.sh", root / "hard")
    os.mkfifo(root / "fifo")
    (root / os.fsdecode(b"bad-\xff-name")).write_text("b\n")
    (root / ("long-" + "n" * 150)).write_text("l\n")
    (root / "a b").write_text("space\n")
    (root / "big.bin").write_bytes(os.urandom(3 << 20))
    for rel in ("node_modules/pkg/index.js", "x.o", "src/y.o", "build/a.tmp", "build/keep.txt", "top.txt",
                "src/top.txt", "dir/f", "dar/f", "lib/cache/c", ".envrc", "sub/.bashrc", "xay/z"):
        os.makedirs(root / os.path.dirname(rel), exist_ok=True)
        (root / rel).write_text(rel + "\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "src"], check=True)
    subprocess.run(git + ["commit", "-qm", "start"], check=True)


def gnu_tar_names(root, pattern) -> set[bytes]:
    listing = subprocess.run(f"tar -C {root} -cf - --exclude='{pattern}' . 2>/dev/null | tar -tf - --quoting-style=literal", shell=True,
                             capture_output=True, check=True).stdout
    return {n.rstrip(b"/") for n in listing.splitlines()}


def fill_names(root, pattern) -> set[bytes]:
    found = fill.plan(CopySpec(name="t", source=str(root), uid=1000, gid=1000, exclude=(pattern,), protected=(),
                               labels=()))
    if found is None:
        return {b"<tools container>"}
    return {b"./" + rel if rel else b"." for rel, _ in found.entries}


@pytest.mark.skipif(b"GNU tar" not in subprocess.run(["tar", "--version"], capture_output=True).stdout,
                    reason="needs GNU tar to compare with")
def test_excludes_leave_out_what_gnu_tar_leaves_out(tmp_path):
    rich_tree(tmp_path)
    for pattern in PATTERNS:
        want = gnu_tar_names(tmp_path, pattern)
        if pattern == "*":   # it excludes the root: left to the tools container (GNU tar itself)
            assert want == set() and fill_names(tmp_path, pattern) == {b"<tools container>"}
            continue
        assert fill_names(tmp_path, pattern) == want, pattern


def test_patterns_it_cannot_match_exactly_go_to_the_tools_container(tmp_path):
    (tmp_path / "f").write_text("x")
    for pattern in ("[ab]*", "a\\*", "x]"):
        assert fill_names(tmp_path, pattern) == {b"<tools container>"}


def test_the_head_is_read_from_the_files_of_git(tmp_path):
    git = tmp_path / ".git"
    os.makedirs(git / "refs" / "heads")
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    assert fill.head_commit(str(tmp_path)) == ""               # an unborn branch
    (git / "packed-refs").write_text("# pack-refs\n" + "a" * 40 + " refs/heads/main\n")
    assert fill.head_commit(str(tmp_path)) == "a" * 40
    (git / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    assert fill.head_commit(str(tmp_path)) == "b" * 40         # a loose ref wins
    (git / "HEAD").write_text("c" * 40 + "\n")
    assert fill.head_commit(str(tmp_path)) == "c" * 40         # detached
    (git / "HEAD").write_text("ref: ../../etc/passwd\n")
    assert fill.head_commit(str(tmp_path)) == ""


def looked(upper: bytes, later: bool = False) -> FakeEngine:
    """The fake engine holding copy c, whose v/upper the archive API answers with the tar `upper`
    (and v/checkpoints/1 exists when `later`)."""
    answers = {"/v/upper": upper, **({"/v/checkpoints/1": b""} if later else {})}
    engine = FakeEngine(archive=lambda info, path: answers.get(path))
    for part in ("base", "upper", "tree"):
        engine.create_volume(f"c-{part}", {label.MANAGED: "1", label.KIND: "copy", label.COPY: "c"})
    return engine


def archive(*members, pax=None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.pax_headers = kind, len(data), pax or {}
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def checkpointed(monkeypatch):
    taken = []
    monkeypatch.setattr(store, "checkpoint", lambda eng, name, message: taken.append(message) or
                        {"changes": 1, "clean": False})
    return taken


def test_a_copy_whose_upper_layer_is_an_empty_directory_is_dropped_with_no_tools_container(checkpointed):
    eng = looked(archive(("upper", tarfile.DIRTYPE, b"")))
    assert store.settle(eng, "c", "run ended", made=True) == (0, True)
    # the overlay first; its two layers then go at once, in either order
    assert checkpointed == [] and eng.removed_volumes[0] == "c-tree" and sorted(eng.removed_volumes[1:]) == ["c-base", "c-upper"]
    look = eng.created[0]   # a look, read-only, removed
    assert look["Cmd"] == [] and look["HostConfig"]["ReadonlyRootfs"] is True
    assert [m["ReadOnly"] for m in look["HostConfig"]["Mounts"]] == [True] and eng.calls == ["create", "remove"]


@pytest.mark.parametrize("upper", [
    archive(("upper", tarfile.DIRTYPE, b""), ("upper/new.txt", tarfile.REGTYPE, b"x")),
    archive(("upper", tarfile.DIRTYPE, b""), ("upper/README.md", tarfile.CHRTYPE, b"")),   # a whiteout
    archive(("upper", tarfile.DIRTYPE, b""), ("upper/src", tarfile.DIRTYPE, b"")),        # maybe opaque
    archive(("upper", tarfile.DIRTYPE, b""), ("upper/big", tarfile.REGTYPE, os.urandom(8192)))[:4096],
    archive(("other", tarfile.DIRTYPE, b"")),
    archive(("upper", tarfile.DIRTYPE, b""), ("upper/new", tarfile.REGTYPE, b"x"), pax={"comment": "c" * 2900}),  # cut

    b"", b"\0" * 1024, b"not a tar" * 100,
], ids=["a-file", "a-whiteout", "a-directory", "cut-in-a-file", "no-upper", "cut-in-a-pax-header", "empty", "zeros",
        "not-a-tar"])   # named: the bytes differ per collection (a random file, mtimes), and workers compare ids
def test_anything_but_an_empty_upper_layer_is_checkpointed_as_before(checkpointed, upper):
    eng = looked(upper)
    assert store.settle(eng, "c", "run ended", made=True) == (1, False)
    assert checkpointed == ["run ended"] and eng.removed_volumes == []


def test_a_later_checkpoint_or_a_copy_the_run_did_not_make_is_checkpointed_as_before(checkpointed):
    empty = archive(("upper", tarfile.DIRTYPE, b""))
    assert store.settle(looked(empty, later=True), "c", "m", made=True) == (1, False)
    assert store.settle(looked(empty), "c", "m", made=False) == (1, False)
    assert checkpointed == ["m", "m"]


SNAPSHOT = r'''
import hashlib, json, os, stat, sys
out = {}
for top in sys.argv[1:]:
    found = {}
    for where, dirs, files in os.walk(top):
        for name in [""] + dirs + files if where == top else dirs + files:
            path = os.path.join(where, name) if name else where
            st = os.lstat(path)
            rel = os.fsencode(os.path.relpath(path, top)).hex()
            kind = stat.S_IFMT(st.st_mode)
            data = ""
            if stat.S_ISREG(st.st_mode):
                data = hashlib.sha256(open(path, "rb").read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(path)).hex()
            times = st.st_mtime_ns
            found[rel] = [kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_rdev, st.st_size if
                          stat.S_ISREG(st.st_mode) else 0, st.st_nlink if not stat.S_ISDIR(st.st_mode) else 0,
                          data, times, sorted(os.listxattr(path, follow_symlinks=False))]
    out[top] = found
json.dump(out, sys.stdout)
'''


def snapshot(engine, names) -> dict:
    mounts = [Mount(kind=MountKind.VOLUME, source=f"{n}-{p}", target=f"/{n}/{p}", read_only=True)
              for n in names for p in ("base", "upper")]
    answer = run_tool(engine, name="fill-test", entrypoint=("python3", "-c", SNAPSHOT),
                      argv=[f"/{n}/{p}" for n in names for p in ("base", "upper")], mounts=mounts,
                      caps=("DAC_READ_SEARCH",), labels={}, what="snapshotting the copies")
    return json.loads(answer)


def without_times(blob: str) -> dict:
    return {k: v for k, v in json.loads(blob).items() if k not in ("time", "created")}


@pytest.mark.engine
def test_the_archive_copy_is_the_tools_containers_copy(engine, tmp_path, monkeypatch):
    root = tmp_path / "ws"
    root.mkdir()
    rich_tree(root)
    os.chmod(root, 0o2750)   # the root's mode and owner are the copy's and the upper layer's
    pid, made = os.getpid(), []

    def spec(name, exclude=("node_modules", "*.o", "build/*.tmp")):
        made.append(name)
        return CopySpec(name=name, source=str(root), uid=1000, gid=1001, exclude=exclude, protected=(),
                        labels=((label.MANAGED, "1"), (label.KIND, "copy"), (label.COPY, name),
                                (label.WORKSPACE, str(root)), (label.OWNER_PID, str(pid))))
    old, new = f"fill-old-{pid}", f"fill-new-{pid}"
    try:
        assert fill.plan(spec(new)) is not None
        with monkeypatch.context() as patched:
            patched.setattr(fill, "plan", lambda spec: None)       # the tools container's tar|tar
            assert store.prepare(engine, spec(old), lambda m: None)
        assert store.prepare(engine, spec(new), lambda m: None)
        found = snapshot(engine, [old, new])
        for part in ("base", "upper"):
            a, b = found[f"/{old}/{part}"], found[f"/{new}/{part}"]
            assert set(a) == set(b), part
            for rel in a:
                if part == "upper" and bytes.fromhex(rel).endswith(b".json"):
                    a[rel][7] = b[rel][7] = None          # written at another second: compared below
                if part == "upper":
                    a[rel][8] = b[rel][8] = None
                assert a[rel] == b[rel], (part, bytes.fromhex(rel))
        base = found[f"/{new}/base"]
        assert {bytes.fromhex(r) for r in base} >= {b".", b"src/deep/x/f.py", b"empty/nested", b"fifo", b".git/HEAD",
                                                    b"bad-\xff-name", b"rel-link", b"hard"}
        assert not {bytes.fromhex(r) for r in base} & {b"node_modules", b"x.o", b"src/y.o", b"build/a.tmp"}
        assert base[b"setuid".hex()][1] == 0o755 and base[b".".hex()][1:4] == [0o750, 1000, 1001]
        assert base[b"hard".hex()][6] == 2 and base[b"big.bin".hex()][5] == 3 << 20
        for name in ("meta.json", "state.json", "checkpoints/0/meta.json"):
            texts = [read_files(engine, name="fill-test", paths=[f"/v/{name}"], labels={},
                                      mounts=[Mount(kind=MountKind.VOLUME, source=f"{n}-upper", target="/v",
                                                    read_only=True)])[f"/v/{name}"] for n in (old, new)]
            assert without_times(texts[0]) == without_times(texts[1]), name
        assert json.loads(texts[1])["digest"] and store.checkpoints(engine, new)[0]["changes"] == 0
        assert store.changes(engine, new)["changes"] == [] and store.changes(engine, new)["meta"]["head"]
    finally:
        for name in made:
            store.drop(engine, name)
        shutil.rmtree(root, ignore_errors=True)


def started_tools(name: str, since: float) -> list[str]:
    """Names of the tools containers of copy `name` the engine started since `since`."""
    found = subprocess.run(["docker", "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
                            "--filter", "type=container", "--filter", "event=start", "--filter",
                            f"label={label.COPY}={name}", "--filter", f"label={label.KIND}=tool",
                            "--format", "{{.Actor.Attributes.name}}"], capture_output=True, text=True, check=True)
    return found.stdout.split()


@pytest.mark.engine
def test_a_run_that_changes_nothing_starts_no_tools_container_and_a_deletion_keeps_its_copy(engine, workspace):
    run = [sys.executable, "-m", "launcher", "run", "--policy", "untrusted", "-w", str(workspace)]
    name, kept = f"fill-run-{os.getpid()}", f"fill-keep-{os.getpid()}"
    try:
        since = time.time()
        nothing = subprocess.run(run + ["--name", name, "--", "sh", "-c", "echo x > a && rm a"], capture_output=True,
                                 text=True, timeout=300)
        assert nothing.returncode == 0 and f"no changes: copy {name} dropped" in nothing.stderr, nothing.stderr
        assert started_tools(name, since) == [] and engine.volume_info(f"{name}-upper") is None
        since = time.time()
        deleted = subprocess.run(run + ["--name", kept, "--", "rm", "README.md"], capture_output=True, text=True,
                                 timeout=300)   # a whiteout only: the upper layer is not empty
        assert deleted.returncode == 0 and f"copy {kept} (1 changed)" in deleted.stderr, deleted.stderr
        assert len(started_tools(kept, since)) == 1   # the checkpoint at the end
    finally:
        for copy in (name, kept):
            store.drop(engine, copy)
