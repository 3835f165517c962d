"""Copy mode's host side without an engine: what apply refuses, and all-or-nothing writes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from launcher.copies import apply, review
from launcher.errors import CopyConflict
from launcher.policy.model import BUILTIN_PROTECTED

pytestmark = pytest.mark.usefixtures("private_tempdir")   # their exports' spools go with the test

PROTECTED = (".git",) + BUILTIN_PROTECTED


def file_state(data: bytes, executable: bool = False) -> dict:
    return {"type": "file", "exec": executable, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def exported(changes: list[dict], files: dict[str, bytes]) -> apply.Exported:
    """What copytool's export would send: changes.json, then files/PATH."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in [("changes.json", json.dumps({"changes": changes, "meta": {}}).encode())] + \
                          [(f"files/{p}", d) for p, d in files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return apply.read_export(buffer.getvalue(), PROTECTED)


@pytest.mark.parametrize("path, new, why", [
    (".git/hooks/pre-commit", file_state(b"x"), "git directory"),
    ("vendor/lib/.git/config", file_state(b"x"), "git directory"),
    (".envrc", file_state(b"x"), "protected (.envrc"),
    (".github/workflows/x.yml", file_state(b"x"), "protected (.github"),
    ("link", {"type": "symlink", "target": "/etc/passwd"}, "leaving the workspace"),
    ("a/link", {"type": "symlink", "target": "../../outside"}, "leaving the workspace"),
    ("fifo", {"type": "other"}, "not a regular file"),
    ("docs/hooks", {"type": "symlink", "target": "../.git/hooks"}, "into a refused path"),
    ("ci", {"type": "symlink", "target": ".github/workflows"}, "into a refused path"),
])
def test_apply_refuses_what_host_tools_would_run_or_follow(path, new, why):
    assert why in review.refusal({"path": path, "status": "added", "old": None, "new": new}, PROTECTED)


def test_plain_files_and_links_inside_are_not_refused():
    for path, new in (("src/app.py", file_state(b"x")), ("docs/link", {"type": "symlink", "target": "../README.md"})):
        assert review.refusal({"path": path, "status": "added", "old": None, "new": new}, PROTECTED) == ""


def test_stat_and_patch_escape_what_the_agent_named():
    changes = review.annotated([{"path": "a\x1b[2Jb\nc", "status": "added", "old": None, "new": file_state(b"x\n"),
                                 "patch": "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+\x1b]0;owned\x07\n",
                                 "added": 1, "removed": 0}], PROTECTED)
    text = "\n".join(review.stat_lines(changes) + review.patch_lines(changes))
    assert "\x1b" not in text and "\x07" not in text and "\\u001b" in text
    assert all("\n" not in line for line in review.stat_lines(changes))


def test_apply_writes_all_or_nothing(tmp_path):
    (tmp_path / "keep.txt").write_bytes(b"old\n")
    (tmp_path / "edited.txt").write_bytes(b"the user changed this\n")
    changes = [{"path": "keep.txt", "status": "modified", "old": file_state(b"old\n"), "new": file_state(b"new\n")},
               {"path": "edited.txt", "status": "modified", "old": file_state(b"base\n"), "new": file_state(b"agent\n")}]
    data = exported(changes, {"keep.txt": b"new\n", "edited.txt": b"agent\n"})
    with pytest.raises(CopyConflict) as info:
        apply.apply_to_tree(str(tmp_path), data)
    assert "edited.txt" in str(info.value) and info.value.exit_code == 119
    assert (tmp_path / "keep.txt").read_bytes() == b"old\n"        # nothing was written


def test_apply_creates_deletes_and_is_a_no_op_the_second_time(tmp_path):
    (tmp_path / "gone.txt").write_bytes(b"bye\n")
    changes = [{"path": "gone.txt", "status": "deleted", "old": file_state(b"bye\n"), "new": None},
               {"path": "new/dir/run.sh", "status": "added", "old": None, "new": file_state(b"#!/bin/sh\n", True)},
               {"path": ".envrc", "status": "added", "old": None, "new": file_state(b"evil\n")}]
    data = exported(changes, {"new/dir/run.sh": b"#!/bin/sh\n", ".envrc": b"evil\n"})
    assert apply.apply_to_tree(str(tmp_path), data) == (2, 0)
    assert not (tmp_path / "gone.txt").exists() and not (tmp_path / ".envrc").exists()
    assert os.stat(tmp_path / "new" / "dir" / "run.sh").st_mode & 0o7777 == 0o755
    assert apply.apply_to_tree(str(tmp_path), data) == (0, 2)
    assert apply.pending(str(tmp_path), data) == 0


def test_apply_refuses_content_that_does_not_match_the_change_list(tmp_path):
    changes = [{"path": "a.txt", "status": "added", "old": None, "new": file_state(b"listed\n")}]
    with pytest.raises(CopyConflict):
        apply.apply_to_tree(str(tmp_path), exported(changes, {"a.txt": b"something else\n"}))
