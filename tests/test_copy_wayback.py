"""The way back on the real engine, second round (issue 40): type changes in every direction are
diffed and applied or refused, names with control bytes never reach the host, a failed apply
leaves the tree as it was, a rewind invalidates a review, discard says what it loses, and an
interrupted run says the copy was kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import docker_sdk, owned_workspace
from test_copy import SANDBOX, run_copy, sandbox, snapshot

pytestmark = pytest.mark.engine


def tree(ws, files: dict[str, str], links: dict[str, str] = ()) -> None:
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    for rel, target in dict(links).items():
        os.symlink(target, ws / rel)
    subprocess.run(["chown", "-R", "-h", "1000:1000", str(ws)], check=True)


def named(ws) -> list[str]:
    return [os.path.relpath(os.path.join(top, n), ws) for top, dirs, files in os.walk(ws) for n in dirs + files]


HOST = {"d1/a": "a\n", "d1/sub/b": "b\n", "x/y/d3/c": "c\n", "f1": "f1\n", "x/f2": "f2\n", "ff": "fifo soon\n",
        "sk/s": "s\n", "dd/k": "k\n", "g": "g\n", "name é/z": "z\n", "keep.txt": "keep\n", "x/y/fd/q": "q\n"}
# Every direction: directory -> file (depth 1 and 3, a unicode name), file -> directory (with files
# at depth), symlink -> directory, directory -> symlink, file -> FIFO, directory -> socket, file -> symlink,
# symlink -> file, directory -> FIFO at depth.
AGENT = ("rm -rf d1 && echo d1 > d1 && rm -rf x/y/d3 && echo d3 > x/y/d3 && rm -rf 'name é' && echo e > 'name é' && "
         "rm f1 && mkdir -p f1/in && echo in > f1/in/n && rm x/f2 && mkdir -p x/f2/p/q && echo q > x/f2/p/q/r && "
         "rm lnk && mkdir lnk && echo l > lnk/l && rm -rf dd && ln -s keep.txt dd && rm ff && mkfifo ff && "
         "rm -rf sk && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sk\")' && "
         "rm g && ln -s keep.txt g && rm lnk2 && echo was-a-link > lnk2 && rm -rf x/y/fd && mkfifo x/y/fd")


def test_every_type_change_is_diffed_and_applied_or_refused(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"types-{os.getpid()}"
    tree(ws, HOST, {"lnk": "keep.txt", "lnk2": "keep.txt"})
    try:
        ran = run_copy(ws, name, "bash", "-c", AGENT)
        assert ran.returncode == 0, ran.stderr                      # was 121: the copy tool crashed
        listed = [line for line in sandbox("ls").stdout.splitlines() if line.startswith(name + " ")]
        assert listed and " none " not in listed[0] and "?" not in listed[0], listed
        shown = sandbox("diff", name, "--json")
        assert shown.returncode == 0, shown.stderr
        found = {c["path"]: c for c in json.loads(shown.stdout)["changes"]}
        for path in ("d1", "x/y/d3", "name é"):
            assert found[path]["status"] == "type-changed" and found[path]["dir"] == "old" and not found[path]["refused"]
        for path in ("f1", "x/f2", "lnk"):
            assert found[path]["status"] == "type-changed" and found[path]["dir"] == "new", found[path]
        assert found["ff"]["new"] == {"type": "other", "kind": "fifo"} and found["ff"]["refused"].endswith("(a fifo)")
        assert found["sk"]["new"]["kind"] == "socket" and found["sk"]["dir"] == "old" and found["sk"]["refused"]
        assert "REFUSED" in found["dd"]["refused"] or found["dd"]["refused"]       # never a link over a directory
        assert found["g"]["needs"] == ["--allow-symlink"]
        assert found["lnk2"]["status"] == "type-changed" and found["lnk2"]["old"]["type"] == "symlink"
        assert found["x/y/fd"]["new"]["kind"] == "fifo" and found["x/y/fd"]["dir"] == "old" and found["x/y/fd"]["refused"]
        stat = sandbox("diff", name, "--stat")
        assert "directory -> 100644" in stat.stdout and "file -> directory" in stat.stdout and "fifo" in stat.stdout
        assert "Traceback" not in stat.stderr + shown.stderr

        applied = sandbox("apply", name, "--json")
        assert applied.returncode == 0, applied.stderr
        assert (ws / "d1").read_text() == "d1\n" and (ws / "x" / "y" / "d3").read_text() == "d3\n"
        assert (ws / "name é").read_text() == "e\n"
        assert (ws / "f1" / "in" / "n").read_text() == "in\n" and (ws / "x" / "f2" / "p" / "q" / "r").read_text() == "q\n"
        assert (ws / "lnk").is_dir() and not (ws / "lnk").is_symlink() and (ws / "lnk" / "l").read_text() == "l\n"
        assert (ws / "ff").read_text() == "fifo soon\n"                              # a FIFO is never written
        assert (ws / "dd").is_dir() and not (ws / "dd").is_symlink() and (ws / "g").read_text() == "g\n"
        assert (ws / "sk").is_dir() and not os.path.lexists(ws / "sk" / "s")       # its deletions, not the socket
        assert (ws / "x" / "y" / "fd").is_dir() and not (ws / "x" / "y" / "fd" / "q").exists()
        assert not (ws / "lnk2").is_symlink() and (ws / "lnk2").read_text() == "was-a-link\n"
        assert json.loads(applied.stdout)["remaining"] == ["g"] and "work remains" in applied.stderr.splitlines()[-1]
        assert not [n for n in named(ws) if ".sandbox-" in n]
    finally:
        sandbox("discard", "--yes", name)


def test_names_with_control_bytes_never_reach_the_host_and_are_shown_escaped(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"ctl-{os.getpid()}"
    tree(ws, {"keep.txt": "keep\n"})
    make = ("import os\n"
            "for n in ['new\\nline', 'esc\\x1b[31mred', 'tab\\tx', 'del\\x7f', 'csi\\u009bx', 'cr\\rx']:\n"
            "    open(n, 'w').write('x')\n"
            "os.makedirs('deep/dir\\nname/more', exist_ok=True); open('deep/dir\\nname/more/f', 'w').write('x')\n"
            "os.symlink('keep\\x1b.txt', 'link')\n"
            "open('plain.txt', 'w').write('plain')\n")
    try:
        assert run_copy(ws, name, "python3", "-c", make).returncode == 0
        shown, stat = sandbox("diff", name), sandbox("diff", name, "--stat")
        everything = shown.stdout + shown.stderr + stat.stdout + stat.stderr
        assert not any(c in everything.replace("\n", "") for c in "\x1b\t\x7f\x9b\r"), everything
        assert everything.count("control characters") >= 8 and "esc\\u001b[31mred" in stat.stdout
        applied = sandbox("apply", name, "--json")
        assert applied.returncode == 0, applied.stderr
        assert sorted(named(ws)) == ["keep.txt", "plain.txt"]                       # nothing else arrived
        assert len(json.loads(applied.stdout)["refused"]) == 8
        assert not any(c in applied.stderr + applied.stdout for c in "\x1b\t\x7f\x9b\r")
        listed = sandbox("diff", name, "--json").stdout
        assert "\x7f" not in listed and "del\u007f" in {c["path"] for c in json.loads(listed)["changes"]}
    finally:
        sandbox("discard", "--yes", name)


def test_an_apply_that_fails_half_way_leaves_the_tree_as_it_was_then_finishes(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"atomic-{os.getpid()}"
    tree(ws, {"a.txt": "a\n", "m/n/o/locked.txt": "l\n", "z.txt": "z\n", "gone/g.txt": "g\n"})
    locked = ws / "m" / "n" / "o"
    try:
        assert run_copy(ws, name, "bash", "-c", "echo A > a.txt && echo L > m/n/o/locked.txt && echo new > m/n/o/new.txt "
                                                "&& echo Z > z.txt && rm -r gone && echo w > well.txt").returncode == 0
        before = snapshot(ws)
        subprocess.run(["chattr", "+i", str(locked)], check=True)       # root writes through modes: immutable
        try:
            failed = sandbox("apply", name)
        finally:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
        assert failed.returncode == 120 and "exactly as it was before" in failed.stderr, failed.stderr
        assert snapshot(ws) == before and not [n for n in named(ws) if ".sandbox-" in n]
        done = sandbox("apply", name)
        assert done.returncode == 0 and "applied 7 changes" in done.stderr, done.stderr
        assert (locked / "new.txt").read_text() == "new\n" and not (ws / "gone").exists()
    finally:
        sandbox("discard", "--yes", name)


def test_a_rewind_or_a_later_change_invalidates_the_review(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"review-{os.getpid()}"
    tree(ws, {"a.txt": "a\n"})
    try:
        assert run_copy(ws, name, "bash", "-c", "echo one > a.txt").returncode == 0
        reviewed = json.loads(sandbox("diff", name, "--json").stdout)["checkpoint"]
        assert sandbox("rewind", name, "0").returncode == 0
        refused = sandbox("apply", name)
        assert refused.returncode == 120 and f"sandbox diff {name}" in refused.stderr, refused.stderr
        assert (ws / "a.txt").read_text() == "a\n"
        assert sandbox("rewind", name, str(reviewed)).returncode == 0            # back to what was reviewed: fine
        assert sandbox("apply", name).returncode == 0 and (ws / "a.txt").read_text() == "one\n"

        assert run_copy(ws, name, "bash", "-c", "echo two > b.txt").returncode == 0    # the copy goes on
        assert sandbox("diff", name, "--stat").returncode == 0
        assert run_copy(ws, name, "bash", "-c", "echo three > b.txt").returncode == 0  # after the review
        again = sandbox("apply", name, "--json")
        said = json.loads(again.stdout)   # --json: the envelope of a refusal (docs/library.md)
        assert again.returncode == 120 and not said["ok"] and said["exit_code"] == 120, (again.stdout, again.stderr)
        assert not (ws / "b.txt").exists()
        assert sandbox("diff", name).returncode == 0
        assert sandbox("apply", name).returncode == 0 and (ws / "b.txt").read_text() == "three\n"
    finally:
        sandbox("discard", "--yes", name)


def test_discard_says_what_it_loses_and_needs_a_yes_for_unapplied_work(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"discard-{os.getpid()}"
    tree(ws, {"a.txt": "a\n"})
    try:
        assert run_copy(ws, name, "bash", "-c", "echo one > a.txt && echo new > b.txt").returncode == 0
        dry = sandbox("discard", name, "--dry-run")
        assert dry.returncode == 0 and "2 changes not applied" in dry.stderr and "nothing was dropped" in dry.stderr
        refused = sandbox("discard", name)                                   # no terminal, no --yes
        assert refused.returncode == 120 and "--yes" in refused.stderr, refused.stderr
        assert name in sandbox("ls").stdout
        assert sandbox("apply", name).returncode == 0
        gone = sandbox("discard", name)                                      # all of it is on the host: no yes needed
        assert gone.returncode == 0 and name not in sandbox("ls").stdout, gone.stderr

        assert run_copy(ws, name, "bash", "-c", "echo two > c.txt").returncode == 0
        docker_sdk().volumes.get(f"{name}-tree").remove()                  # a broken copy: its overlay is gone
        listed = sandbox("ls")
        assert listed.returncode == 0 and name in listed.stdout, listed.stderr   # ls works whatever state
        broken = sandbox("discard", name)
        assert broken.returncode == 120 and "could not be counted" in broken.stderr, broken.stderr
        dropped = sandbox("discard", name, "--yes")
        assert dropped.returncode == 0 and name not in sandbox("ls").stdout, dropped.stderr
    finally:
        sandbox("discard", "--yes", name)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_says_the_copy_was_kept_and_ls_counts_it(engine, tmp_path, sig, code):
    ws, name = owned_workspace(tmp_path), f"intr-{os.getpid()}-{sig}"
    tree(ws, {"a.txt": "a\n"})
    proc = subprocess.Popen(SANDBOX + ["run", "--workspace-mode", "copy", "--name", name, "-w", str(ws), "--",
                                       "bash", "-c", "echo work > work.txt; mkdir d; echo READY; sleep 300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err
        assert f"the copy {name} was kept" in err and "removed" in err, err
        listed = [line for line in sandbox("ls").stdout.splitlines() if line.startswith(name + " ")]
        assert listed and "1 file" in listed[0], listed
    finally:
        proc.kill()
        sandbox("discard", "--yes", name)


def test_a_checkpoint_that_fails_leaves_ls_saying_not_known_never_a_stale_count(engine, tmp_path):
    ws, name = owned_workspace(tmp_path), f"stale-{os.getpid()}"
    tree(ws, {"a.txt": "a\n"})
    try:
        assert run_copy(ws, name, "bash", "-c", "echo one > a.txt").returncode == 0
        assert "1 file" in [line for line in sandbox("ls").stdout.splitlines() if line.startswith(name + " ")][0]
        docker_sdk().containers.run("sandbox/agent:bookworm", ["sh", "-c", "echo broken > /v/checkpoints/0/meta.json"],
                                    user="0", remove=True, network_mode="none",
                                    volumes={f"{name}-upper": {"bind": "/v", "mode": "rw"}})
        failed = sandbox("diff", name)                                  # its checkpoint reads them: it fails
        assert failed.returncode == 121, failed.stderr
        listed = sandbox("ls")
        row = [line for line in listed.stdout.splitlines() if line.startswith(name + " ")]
        assert listed.returncode == 0 and row and " ? " in row[0], listed.stdout
        assert sandbox("discard", name, "--yes").returncode == 0 and name not in sandbox("ls").stdout
    finally:
        sandbox("discard", "--yes", name)
