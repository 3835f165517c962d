"""The way back costs the host bounded work, without an engine: the export is streamed into a
private spool with sparse files kept sparse, files over the size caps are refused before any of
them arrives, and a tools container's output is read as a stream."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import stat
import tarfile
import tempfile

import pytest

from launcher.copies import apply
from launcher.copies.export import read_export
from launcher.copies.limits import Limits
from launcher.errors import CopyConflict, PolicyError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("copytool", os.path.join(ROOT, "images", "tools", "copytool.py"))
copytool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(copytool)


class OnlyForward(io.RawIOBase):
    """A pipe: no seek, no tell, read once (what the tools container's stdout is)."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        count = min(len(buffer), len(self.data) - self.at)
        buffer[:count] = self.data[self.at:self.at + count]
        self.at += count
        return count


def sparse_file(path, size: int, pieces: dict[int, bytes]) -> str:
    with open(path, "wb") as out:
        out.truncate(size)
        for offset, data in pieces.items():
            out.seek(offset)
            out.write(data)
    return str(path)


def digest_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tool_export(files: dict[str, str], listed: dict[str, dict] | None = None) -> bytes:
    """An export as copytool writes it: changes.json, then each file by copytool.add_file."""
    changes = [{"path": p, "status": "added", "old": None,
                "new": (listed or {}).get(p) or {"type": "file", "exec": False, "size": os.path.getsize(f),
                                                  "sha256": digest_of(f)}} for p, f in files.items()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        blob = json.dumps({"changes": changes, "meta": {}, "checkpoint": 3}).encode()
        info = tarfile.TarInfo("changes.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for path, source in files.items():
            with open(source, "rb") as data:
                copytool.add_file(tar, "files/" + path, data)
    return buffer.getvalue()


@pytest.fixture
def spool_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_copytool_sends_only_the_data_runs_of_a_sparse_file(tmp_path):
    path = sparse_file(tmp_path / "s", 64 << 20, {0: b"head", 40 << 20: b"middle", (64 << 20) - 4: b"tail"})
    with open(path, "rb") as data:
        runs = copytool._runs(data.fileno(), 64 << 20)
    assert sum(length for _, length in runs) < 1 << 20 and len(runs) == 3, runs    # the holes are not sent
    assert runs[0][0] == 0 and runs[-1][0] + runs[-1][1] == 64 << 20
    with open(path, "rb") as data:
        assert copytool._sha256(data, 64 << 20) == digest_of(path)               # holes hashed, not read


def test_an_export_streams_into_a_private_spool_and_sparse_files_stay_sparse(tmp_path, spool_root):
    big = sparse_file(tmp_path / "big", 64 << 20, {32 << 20: b"data"})
    name = "dir/\udcff-odd name"                 # a name that is not UTF-8 travels intact
    small = tmp_path / "small"
    small.write_bytes(b"hello\n")
    stream = io.BufferedReader(OnlyForward(tool_export({name: big, "small.txt": str(small)})))
    exported = read_export(stream, (".git",))
    try:
        assert exported.checkpoint == 3
        (spool,) = spool_root.iterdir()
        assert stat.S_IMODE(os.stat(spool).st_mode) == 0o700
        blob = exported.data[name]
        assert blob.size == 64 << 20 and os.stat(blob.path).st_blocks * 512 < 1 << 20
        assert blob.sha256 == digest_of(big) and exported.data["small.txt"].read() == b"hello\n"
        with open(tmp_path / "out", "wb") as out:
            blob.write_to(out)
        assert digest_of(tmp_path / "out") == digest_of(big) and os.stat(tmp_path / "out").st_blocks * 512 < 1 << 20
    finally:
        exported.close()
    assert list(spool_root.iterdir()) == []


def test_a_file_over_the_cap_is_refused_by_the_list_before_any_file_arrives(tmp_path, spool_root):
    listed = {"huge\u202e.bin": {"type": "file", "exec": False, "size": 5 << 30, "sha256": "0" * 64}}
    buffer = io.BytesIO()   # only the change list: the file is refused before it would be read
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        blob = json.dumps({"changes": [{"path": p, "status": "added", "old": None, "new": n}
                                       for p, n in listed.items()], "meta": {}}).encode()
        info = tarfile.TarInfo("changes.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(PolicyError) as refused:
        read_export(buffer.getvalue(), (".git",), Limits(file_bytes=1 << 30), "mycopy")
    text = str(refused.value)
    assert "copy mycopy" in text and "huge\\u202e.bin" in text and "\u202e" not in text
    assert "5.0 GiB" in text and "1.0 GiB" in text and "--max-file-size" in text and refused.value.exit_code == 120
    assert list(spool_root.iterdir()) == []


def test_all_files_together_over_the_copy_cap_are_refused(tmp_path, spool_root):
    files = {f"f{i}": sparse_file(tmp_path / f"f{i}", 3 << 20, {0: b"x"}) for i in range(3)}
    with pytest.raises(PolicyError, match=r"at most 8.0 MiB together.*9.0 MiB in 3 files"):
        read_export(tool_export(files), (".git",), Limits(file_bytes=4 << 20, copy_bytes=8 << 20))
    read_export(tool_export(files), (".git",), Limits(file_bytes=4 << 20, copy_bytes=9 << 20)).close()


@pytest.mark.parametrize("tamper", ["content", "size"])
def test_an_export_that_does_not_match_its_list_is_refused_and_leaves_no_spool(tmp_path, spool_root, tamper):
    source = tmp_path / "a"
    source.write_bytes(b"what the list says\n")
    listed = {"type": "file", "exec": False, "size": source.stat().st_size, "sha256": digest_of(source)}
    source.write_bytes(b"something else!!!!\n" if tamper == "content" else b"longer than the list says\n")
    blob = tool_export({"a.txt": str(source)}, {"a.txt": listed})
    with pytest.raises(CopyConflict):
        read_export(blob, (".git",))
    assert list(spool_root.iterdir()) == []


def test_apply_writes_a_sparse_file_sparse_and_gc_counts_without_files(tmp_path, spool_root):
    from launcher.copies.export import listing

    big = sparse_file(tmp_path / "big", 64 << 20, {1 << 20: b"x"})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with read_export(tool_export({"big.bin": big}), (".git",)) as exported:
        assert apply.apply_to_tree(str(workspace), exported) == (1, 0)
        st = os.stat(workspace / "big.bin")
        assert st.st_size == 64 << 20 and st.st_blocks * 512 < 1 << 20 and digest_of(workspace / "big.bin") == digest_of(big)
        answer = {"changes": list(exported.changes), "meta": {}}
    assert apply.pending(str(workspace), listing(answer, (".git",))) == 0


def test_a_containers_stdout_is_a_stream_and_its_stderr_a_bounded_tail():
    from launcher.engine.streams import Attached

    frames = iter([(b"ab", None), (None, b"x" * 70000), (b"cd" * 10, b"last words")])
    run = Attached(frames)
    assert run.stdout.read(3) == b"abc" and run.stdout.read() == b"d" + b"cd" * 9
    assert len(run.stderr) == 65536 and run.stderr.endswith(b"last words")
