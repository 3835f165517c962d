"""The probe's files in the launcher's own directory on this host (launcher/host/probedir.py): an
engine daemon on this host binds it instead of the shared volume, and the launcher reads it itself
before every start (probefiles.dir_problems). Its engine tests: test_probedir_engine.py."""

from __future__ import annotations

import os
import socket
from dataclasses import replace

import pytest

from conftest import preset

from launcher.engine import probefiles
from launcher.host import hostfacts, probedir
from launcher.pipeline import pipeline
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import PROBE_DIR, MountKind

BUSYBOX = b"\x7fELF a busybox stand-in"
SCRIPT = probefiles.script_digest()


def _fill(where: str, **changed) -> None:
    from launcher import resources

    files = {"busybox": (BUSYBOX, 0o555), "probe.sh": ((resources.images_dir() / "probe" / "probe.sh").read_bytes(), 0o444)}
    probedir.fill(where, {**files, **changed}, probefiles.DIR_MODE)


def _problems(where: str) -> list[str]:
    return probefiles.dir_problems(where, probefiles.sha256(BUSYBOX))


def test_the_launcher_s_own_directory_passes_and_a_refill_replaces_it(tmp_path):
    where = str(tmp_path / "probe" / "tag")
    _fill(where)
    assert _problems(where) == []
    assert os.stat(where).st_mode & 0o7777 == 0o555
    assert sorted(os.listdir(tmp_path / "probe")) == ["tag"]   # no temporary directory left
    _fill(where, busybox=(b"other", 0o555))
    assert "probe file busybox has sha256" in _problems(where)[0]


@pytest.mark.parametrize("tamper, said", [
    (lambda w: _write(w, "probe.sh", b"echo changed\n"), "probe file probe.sh has sha256"),
    (lambda w: _write(w, "busybox", b"#!/bin/sh\n"), "probe file busybox has sha256"),
    (lambda w: os.chmod(os.path.join(w, "probe.sh"), 0o666), "probe file probe.sh is not a regular file of this user's of mode 444"),
    (lambda w: _write(w, "extra.sh", b"echo\n", keep=False), "holds 'extra.sh', which the launcher did not put there"),
    (lambda w: _replace(w, "busybox", lambda p: os.symlink("/bin/sh", p)), "probe file busybox cannot be opened"),
    (lambda w: _replace(w, "probe.sh", lambda p: None), "probe file probe.sh is missing"),
    (lambda w: os.chmod(w, 0o755), "is not a directory of this user's of mode 555"),
], ids=["probe.sh changed", "busybox changed", "probe.sh writable", "a file added", "busybox a symlink",
        "probe.sh removed", "the directory writable"])
def test_a_changed_directory_is_refused(tmp_path, tamper, said):
    where = str(tmp_path / "tag")
    _fill(where)
    tamper(where)
    assert any(said in line for line in _problems(where)), _problems(where)


def test_a_directory_replaced_by_a_symlink_to_the_same_files_is_refused(tmp_path):
    real = str(tmp_path / "elsewhere")
    _fill(real)
    os.symlink(real, tmp_path / "tag")
    assert _problems(str(tmp_path / "tag")) == [f"{tmp_path / 'tag'} is not a directory of this user's of mode 555"]


def test_no_directory_and_no_record_are_refused(tmp_path):
    assert _problems(str(tmp_path / "none")) == [f"{tmp_path / 'none'} is missing"]
    _fill(str(tmp_path / "tag"))
    assert "no record of its busybox" in probefiles.dir_problems(str(tmp_path / "tag"), None)[0]


def _write(where: str, name: str, data: bytes, keep: bool = True) -> None:
    os.chmod(where, 0o755)
    path = os.path.join(where, name)
    if os.path.exists(path):
        os.chmod(path, 0o644)
    with open(path, "wb") as out:
        out.write(data)
    os.chmod(path, 0o555 if name == "busybox" else 0o444)
    os.chmod(where, 0o555)


def _replace(where: str, name: str, make) -> None:
    os.chmod(where, 0o755)
    os.unlink(os.path.join(where, name))
    make(os.path.join(where, name))
    os.chmod(where, 0o555)


def test_a_socket_answered_by_another_process_is_not_a_local_engine(tmp_path):
    """Only an engine daemon answering the socket itself (SO_PEERCRED's pid) binds from this host:
    this test's own listener (python, as a forwarder would be) is not one."""
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    try:
        assert probedir.engine_is_local(path) is False
    finally:
        server.close()
    assert probedir.engine_is_local(None) is False
    assert probedir.engine_is_local(str(tmp_path / "nothing.sock")) is False


def test_a_daemon_named_as_an_engine_is_one(tmp_path, monkeypatch):
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    me = open(f"/proc/{os.getpid()}/comm").read().strip()
    monkeypatch.setattr(probedir, "ENGINE_DAEMONS", frozenset({me}))
    try:
        assert probedir.engine_is_local(path) is True
    finally:
        server.close()


def test_the_plan_binds_the_directory_read_only_or_mounts_the_volume(tmp_path):
    policy = preset("untrusted")
    facts = hostfacts.gather(policy, str(tmp_path), "sandbox-probe-x")
    volume = next(m for m in compile_policy(policy, facts, command=("true",)).container.mounts if m.target == PROBE_DIR)
    assert (volume.kind, volume.source, volume.read_only) == (MountKind.VOLUME, "sandbox-probe-x", True)
    bound = compile_policy(policy, replace(facts, probe_dir="/state/probe/x"), command=("true",))
    mount = next(m for m in bound.container.mounts if m.target == PROBE_DIR)
    assert (mount.kind, mount.source, mount.read_only) == (MountKind.BIND, "/state/probe/x", True)


def test_sandbox_probe_volume_keeps_the_volume_and_files_for_another_tool_never_bind(monkeypatch, tmp_path):
    monkeypatch.setattr(probedir, "engine_is_local", lambda path: True)
    monkeypatch.setenv("SANDBOX_PROBE_VOLUME", "1")
    assert pipeline._probe_dir() == ""
    monkeypatch.delenv("SANDBOX_PROBE_VOLUME")
    assert pipeline._probe_dir().startswith(os.path.realpath(os.environ["XDG_STATE_HOME"]) + "/sandbox/probe/")
    policy = preset("untrusted")
    assert pipeline.facts_and_files(policy, str(tmp_path), launched=False)[0].probe_dir == ""
    assert pipeline.facts_and_files(policy, str(tmp_path))[0].probe_dir == pipeline._probe_dir()
    monkeypatch.setattr(probedir, "engine_is_local", lambda path: False)
    assert pipeline._probe_dir() == ""


def test_gc_removes_other_versions_and_orphaned_half_written_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    for tag in ("old", "now"):
        _fill(probedir.path(tag))
    top = os.path.dirname(probedir.path("now"))
    os.mkdir(os.path.join(top, "now.999999999.abcdef.tmp"))           # its writer is gone
    os.mkdir(os.path.join(top, f"now.{os.getpid()}.abcdef.tmp"))      # being written
    removed = probedir.remove_stale("now")
    assert removed == ["probe files now.999999999.abcdef.tmp", "probe files old"]
    assert sorted(os.listdir(top)) == ["now", f"now.{os.getpid()}.abcdef.tmp"] and _problems(probedir.path("now")) == []
    assert probedir.remove_stale("now") == []
