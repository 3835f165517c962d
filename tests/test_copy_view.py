"""How diff and apply show a copy's changes to a person (issue 44, item 6), without an engine:
the diff's lines marked for colour (and plain unmarked), git's own records in .git counted in one
line but still refused, `apply -i`'s questions and answers as per-path yeses, the pager on a real
pseudo-terminal, and -i refused without a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time

import pytest

from launcher.copies import apply, review
from launcher.style import ADDED, BAD, HEADER, HUNK, REMOVED, WARN
from tests.test_copy_review import PROTECTED, exported, file_state
from tests.test_output_style import ESC, SANDBOX, env  # noqa: F401 - env: a fixture

pytestmark = pytest.mark.usefixtures("private_tempdir")


def tagged(text: str, kind: str) -> str:
    return f"<{kind}>{text}</{kind}>"


def modified(path: str, patch: str = "", **more) -> dict:
    return {"path": path, "status": "modified", "old": file_state(b"a\n"), "new": file_state(b"b\n"),
            **({"patch": patch, "added": 1, "removed": 1} if patch else {}), **more}


PATCH = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n keep\n--- was a rule\n+++ is a rule\n\\ No newline at end of file\n"


def test_a_patch_marks_its_headers_hunks_added_and_removed_lines():
    shown = review.patch_lines(review.annotated([modified("x", PATCH)], PROTECTED), tagged)
    assert shown == [f"<{HEADER}>diff --sandbox a/x b/x</{HEADER}>", f"<{HEADER}>--- a/x</{HEADER}>",
                     f"<{HEADER}>+++ b/x</{HEADER}>", f"<{HUNK}>@@ -1,2 +1,2 @@</{HUNK}>", " keep",
                     f"<{REMOVED}>--- was a rule</{REMOVED}>",          # a removed line, however it begins
                     f"<{ADDED}>+++ is a rule</{ADDED}>", "\\ No newline at end of file"]


def test_refusals_and_needs_stand_out_and_an_unmarked_view_is_plain_text():
    changes = review.annotated([modified(".envrc", PATCH), modified("pkg/.npmrc", PATCH),
                                {"path": "new.txt", "status": "added", "old": None, "new": file_state(b"n\n")}],
                               PROTECTED)
    stat = review.stat_lines(changes, tagged)
    assert f"<{BAD}>REFUSED: protected (.envrc" in stat[0] and f"<{WARN}>NEEDS --allow-surface:" in stat[1]
    assert stat[2].startswith(f" <{ADDED}>A</{ADDED}> new.txt")
    assert f"   # <{BAD}>REFUSED" in review.patch_lines(changes, tagged)[0]
    for lines in (review.stat_lines(changes), review.patch_lines(changes)):
        assert not any("<" in line for line in lines)


def test_the_escaping_comes_before_the_marks():
    patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\x1b[2J\n+\x1b]0;owned\x07\n"
    shown = "\n".join(review.patch_lines(review.annotated([modified("x", patch)], PROTECTED), tagged))
    assert "\x1b" not in shown and "\x07" not in shown and f"<{REMOVED}>-\\u001b[2J</{REMOVED}>" in shown


RECORDS = [".git/index", ".git/objects/ab/" + "c" * 38, ".git/objects/pack/pack-" + "d" * 40 + ".idx",
           ".git/logs/HEAD", ".git/logs/refs/heads/main", ".git/COMMIT_EDITMSG", ".git/ORIG_HEAD"]
FINDINGS = [".git/hooks/pre-commit", ".git/config", ".git/refs/heads/main", ".git/HEAD", ".git/info/attributes",
            ".GIT/index", ".git\u200c/index", "vendor/.git/index", ".git/objects/info/alternates",
            ".git/objects/ab/not-an-object", ".git/logs/refs/heads/\x1b[2J"]


def test_git_s_own_records_are_refused_counted_in_one_line_and_never_listed():
    changes = apply.judged("/nonexistent", [modified(p) for p in RECORDS + FINDINGS], PROTECTED, review.Allowed(),
                           preview=True)
    assert all(c["refused"] and not c["needs"] for c in changes)          # refused as ever, no yes lifts it
    assert {c["path"] for c in changes if review.git_record(c)} == set(RECORDS)
    listed = "\n".join(review.stat_lines(changes) + review.patch_lines(changes) + review.refusal_lines(changes))
    assert not any(f" {p} " in listed or f"b/{p}" in listed or f": {p}:" in listed for p in RECORDS)
    for path in (".git/hooks/pre-commit", ".git/config", ".git/refs/heads/main", ".GIT/index", "vendor/.git/index"):
        assert f"not applied: {path}: " in listed and f"b/{path}" in listed
    assert review.stat_lines(changes)[-1].startswith(f" {len(FINDINGS)} changed")
    assert review.git_records_line(changes) == (
        "not listed: 7 changes git made to its own records in .git (COMMIT_EDITMSG, ORIG_HEAD, index, logs, "
        "objects), never applied like all of .git (`--json` lists them)")
    assert review.git_records_line(changes[len(RECORDS):]) == ""


def test_a_git_record_that_is_no_plain_file_is_listed():
    for new in ({"type": "symlink", "target": "../x"}, {"type": "other", "kind": "fifo"}):
        change = review.annotated([{"path": ".git/index", "status": "type-changed", "old": file_state(b"i"),
                                    "new": new}], PROTECTED)[0]
        assert change["refused"] and not review.git_record(change)


def test_apply_never_writes_the_index_it_does_not_list(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_bytes(b"host\n")
    changes = [{"path": ".git/index", "status": "modified", "old": file_state(b"host\n"), "new": file_state(b"copy\n")},
               {"path": "a.txt", "status": "added", "old": None, "new": file_state(b"a\n")}]
    data = apply.reviewed(str(tmp_path), exported(changes, {".git/index": b"copy\n", "a.txt": b"a\n"}), PROTECTED,
                          review.Allowed())
    assert apply.apply_to_tree(str(tmp_path), data) == (1, 0)
    assert (tmp_path / ".git" / "index").read_bytes() == b"host\n" and (tmp_path / "a.txt").read_bytes() == b"a\n"
    with pytest.raises(Exception, match="refused"):   # and no yes lifts it
        apply.reviewed(str(tmp_path), data, PROTECTED, review.Allowed.given(surfaces=(".git/index",)))


def test_apply_i_asks_about_what_it_writes_or_a_yes_lets_through_and_a_yes_is_that_flag():
    changes = apply.judged("/nonexistent", [
        modified("a.txt"), modified(".envrc"), modified("pkg/.npmrc"),
        {"path": "l", "status": "added", "old": None, "new": {"type": "symlink", "target": "a.txt"}}],
        PROTECTED, review.Allowed(), preview=True)
    asked = review.asked(changes)
    assert [c["path"] for c in asked] == ["a.txt", "pkg/.npmrc", "l"]
    given = review.Allowed.given(surfaces=("other/.npmrc",)).adding(asked)
    assert given == review.Allowed(surfaces=frozenset({"other/.npmrc", "pkg/.npmrc"}), symlinks=frozenset({"l"}))
    assert review.stat_line(asked[0]) == " M a.txt  100644 2 bytes"


def on_pty(argv: list[str], env: dict, cwd, answers: tuple[str, ...] = (), stdout_is_tty: bool = True,
           prompt: bytes = b"write it? [y/N/q]: ", seconds: float = 300) -> tuple[int, str, str]:
    """Run argv with stdin and stderr (and stdout unless piped) on a pseudo-terminal, typing the
    next of `answers` at each `prompt`. (exit code, what the terminal showed, what the pipe got)

    The pty is the process's controlling terminal, in a session of its own, as a shell's terminal
    is: only then is a typed Ctrl-C a SIGINT (on a pty that controls no one, the line discipline
    drops it and the process reads an empty line). A prompt beyond the answers ends the run at
    once (killed: exit -9), so a test that answered too few fails at once, not at a timeout; one
    still running after `seconds` (a prompt that never came) is killed too."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave if stdout_is_tty else subprocess.PIPE, stderr=slave,
                            env=env, cwd=cwd, start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    shown, typed, deadline, stuck = b"", 0, time.monotonic() + seconds, True
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 0.2)[0]:
                if proc.poll() is not None:
                    stuck = False
                    break
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:   # EIO: the process ended and closed the terminal
                chunk = b""
            if not chunk:
                stuck = False
                break
            shown += chunk
            if shown.count(prompt) > len(answers):
                break
            if shown.count(prompt) > typed:
                os.write(master, answers[typed].encode() + b"\r")
                typed += 1
        if stuck:
            proc.kill()
        piped = proc.stdout.read() if proc.stdout else b""
        proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, shown.decode(errors="replace"), piped.decode(errors="replace")


PAGER = """#!/bin/sh
here="$(dirname "$0")"
echo "ran $* LESS=$LESS LV=$LV" >> "$here/pager.log"
cat > "$here/paged.txt"
"""


@pytest.fixture
def pager(tmp_path):
    """A $PAGER that records each start (its arguments, LESS and LV) and what it was given."""
    script = tmp_path / "pager"
    script.write_text(PAGER)
    script.chmod(0o755)
    return script


PAGE = [sys.executable, "-c", "import sys\nfrom launcher.cli.output import marker, page\n"
        "page([marker()('+added', 'added'), 'plain'], pager='--no-pager' not in sys.argv)"]


def test_page_goes_through_the_pager_on_a_terminal_only(env, tmp_path, pager):
    log, paged = tmp_path / "pager.log", tmp_path / "paged.txt"
    _, shown, _ = on_pty(PAGE, {**env, "PAGER": f"{pager} -x"}, tmp_path)
    assert log.read_text() == "ran -x LESS=FRX LV=-c\n" and shown == ""
    assert paged.read_text() == f"{ESC}32m+added{ESC}0m\nplain\n"            # colour goes to the pager
    _, _, _ = on_pty(PAGE, {**env, "PAGER": str(pager), "LESS": "-i", "NO_COLOR": "1"}, tmp_path)
    assert log.read_text().splitlines()[-1] == "ran  LESS=-i LV=-c" and paged.read_text() == "+added\nplain\n"
    log.unlink()
    _, shown, _ = on_pty(PAGE + ["--no-pager"], {**env, "PAGER": str(pager)}, tmp_path)
    assert f"{ESC}32m+added" in shown and not log.exists()
    for setting in ({"PAGER": "cat"}, {"PAGER": ""}):
        _, shown, _ = on_pty(PAGE, {**env, **setting}, tmp_path)
        assert "plain" in shown and not log.exists()
    _, shown, _ = on_pty(PAGE, {**env, "PAGER": str(tmp_path / "no-such-pager")}, tmp_path)
    assert "did not start" in shown and "plain" in shown
    _, _, piped = on_pty(PAGE, {**env, "PAGER": str(pager)}, tmp_path, stdout_is_tty=False)
    assert piped == "+added\nplain\n" and not log.exists()


def test_apply_i_is_refused_without_a_terminal_before_an_engine_is_needed(env, tmp_path):
    result = subprocess.run(SANDBOX + ["apply", "mycopy", "-i"], stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    assert result.returncode == 120 and "-i: expected a terminal on stdin" in result.stderr and not result.stdout
    assert "nothing was written" in result.stderr and "docker" not in result.stderr.lower()
    result = subprocess.run(SANDBOX + ["apply", "mycopy", "-i", "--json"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    answer = json.loads(result.stdout)                    # --json: the refusal is the envelope on stdout
    assert result.returncode == 120 and answer["exit_code"] == 120 and not answer["ok"] and answer["command"] == "apply"
    assert answer["sandbox"] == "mycopy" and "-i: expected a terminal on stdin" in answer["error"]


QUESTION = [sys.executable, "-c", "import sys\nfrom launcher.cli.output import question\n"
            "try:\n    while True:\n        answer = question('write it?', 'ynq')\n        print(answer)\n"
            "        if answer is None:\n            break\nexcept KeyboardInterrupt:\n    sys.exit(130)"]


def test_a_question_is_asked_on_stderr_and_answered_on_stdin_never_stdout(env, tmp_path):
    # one prompt per answer: "maybe" is asked again; Ctrl-D (at a line's start) is the end of input
    code, shown, piped = on_pty(QUESTION, env, tmp_path, answers=("yes", "", "maybe", "n", "Q", "\x04"),
                                stdout_is_tty=False, seconds=60)
    assert code == 0 and piped == "y\nn\nn\nq\nNone\n", (shown, piped)
    assert shown.count("write it? [y/N/q]: ") == 6 and "answer y (yes), n (no), q (quit)" in shown
    code, shown, piped = on_pty(QUESTION, env, tmp_path, answers=("\x03",), stdout_is_tty=False, seconds=60)
    assert code == 130 and piped == "", (shown, piped)


ASK = [sys.executable, "-c", """import json, sys
from types import SimpleNamespace
from launcher.cli import applying
from launcher.copies import apply, review
from launcher.errors import SandboxError
from tests.test_copy_view import PROTECTED, modified
changes = tuple(modified(p) for p in (".envrc", "a.txt", "b.txt", "c.txt", "pkg/.npmrc"))
copy = SimpleNamespace(workspace="/nonexistent", protected=PROTECTED)
try:
    kept, allowed, skipped = applying.ask(copy, apply.Exported(changes=changes, meta={}), review.Allowed())
except SandboxError as exc:
    print(exc, file=sys.stderr)
    sys.exit(exc.exit_code)
except KeyboardInterrupt:
    sys.exit(130)
print(json.dumps({"kept": [c["path"] for c in kept.changes], "surfaces": sorted(allowed.surfaces),
                  "skipped": skipped}))
"""]


def test_apply_i_q_leaves_that_path_and_the_rest_and_ctrl_c_or_the_end_of_input_write_nothing(env, tmp_path):
    # asked in order: a.txt, b.txt, c.txt, pkg/.npmrc (.envrc is refused, never asked)
    code, shown, piped = on_pty(ASK, env, tmp_path, answers=("y", "q"), stdout_is_tty=False, seconds=60)
    assert code == 0, shown
    assert json.loads(piped) == {"kept": [".envrc", "a.txt"], "surfaces": [], "skipped": ["b.txt", "c.txt", "pkg/.npmrc"]}
    assert "q: this change and the 2 after it stay in the copy" in shown
    code, shown, piped = on_pty(ASK, env, tmp_path, answers=("y", "n", "n", "y"), stdout_is_tty=False, seconds=60)
    assert code == 0 and json.loads(piped) == {"kept": [".envrc", "a.txt", "pkg/.npmrc"], "surfaces": ["pkg/.npmrc"],
                                 "skipped": ["b.txt", "c.txt"]}, shown
    code, shown, piped = on_pty(ASK, env, tmp_path, answers=("y", "\x04"), stdout_is_tty=False, seconds=60)
    assert code == 120 and piped == "" and "the end of input at change 2; nothing was written" in shown, shown
    code, shown, piped = on_pty(ASK, env, tmp_path, answers=("y", "\x03"), stdout_is_tty=False, seconds=60)
    assert code == 130 and piped == "" and "interrupted: nothing was written" in shown, shown
