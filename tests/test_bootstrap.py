"""A fresh machine: `sandbox images bootstrap` (and a first build where no registry answers)
installs a missing debootstrap with apt-get when it runs as root, and otherwise names the one
command to run. Unit tests fake the host at images.py's seam (which, geteuid, Popen); the real one
removes debootstrap from this host and lets the launcher put it back (CI only)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from launcher.engine import images
from launcher.errors import EngineError


class Host:
    """The host as images.py sees it: installed binaries, the euid, and each command it runs.
    `apt` is what apt-get install answers: "ok", "no-lists" (until apt-get update ran) or "offline"."""

    def __init__(self, monkeypatch, *, root=True, have=("apt-get", "tar"), apt="ok"):
        self.have, self.apt, self.ran, self.updated = set(have), apt, [], False
        monkeypatch.setattr(images.os, "geteuid", lambda: 0 if root else 1000)
        monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/bin/{name}" if name in self.have else None)
        monkeypatch.setattr(images.subprocess, "Popen", self.popen)

    def popen(self, argv, **kwargs):
        assert kwargs.get("stdin") is subprocess.DEVNULL   # nothing may wait for an answer
        command = [a for a in argv if not a.startswith("DPkg::") and a != "-o"]
        self.ran.append(" ".join(command[:2]))
        code, lines = 0, []
        if command[:2] == ["apt-get", "update"]:
            self.updated, lines = True, ["Get:1 http://deb.debian.org/debian bookworm InRelease"]
        elif command[:2] == ["apt-get", "install"]:
            if self.apt == "offline":
                code, lines = 100, ["E: Failed to fetch http://deb.debian.org/… Temporary failure resolving"]
            elif self.apt == "no-lists" and not self.updated:
                code, lines = 100, ["Reading package lists...", "E: Unable to locate package debootstrap"]
            else:
                self.have.add("debootstrap")
                lines = ["Unpacking debootstrap (1.0.128) ...", "Setting up debootstrap (1.0.128) ..."]
        return _Proc(code, lines)


class _Proc:
    def __init__(self, code, lines):
        self.returncode, self.stdout = code, iter(line + "\n" for line in lines)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Importer:
    def __init__(self):
        self.imported = []

    def import_tar(self, path, ref):
        self.imported.append(ref)

    def image_exists(self, ref):
        return ref in self.imported


def test_as_root_a_missing_debootstrap_is_installed_with_apt_get_and_said_so(monkeypatch):
    host, engine, lines = Host(monkeypatch), Importer(), []
    images.bootstrap(engine, lines.append, tag="sandbox-test/base:unit")
    assert host.ran == ["apt-get install", "debootstrap --variant=minbase", "tar -C"]
    assert lines[0] == "debootstrap is missing; installing it with apt-get (the base image is made from Debian packages)"
    assert any(line.startswith("installed debootstrap in ") for line in lines)
    assert engine.imported == ["sandbox-test/base:unit"]


class Renamer(Importer):
    """podman 4.3's compat import when the tag is passed on its own: NAME:latest, not NAME:TAG."""

    def import_tar(self, path, ref):
        self.imported.append(ref.rpartition(":")[0] + ":latest")


def test_an_import_the_engine_names_otherwise_is_an_error_that_says_so(monkeypatch):
    Host(monkeypatch, have=("apt-get", "tar", "debootstrap"))
    with pytest.raises(EngineError, match="imported the base image but not as sandbox-test/base:unit") as caught:
        images.bootstrap(Renamer(), lambda line: None, tag="sandbox-test/base:unit")
    assert caught.value.exit_code == 121 and "tag it sandbox-test/base:unit" in str(caught.value)


def test_without_package_lists_apt_get_update_runs_first_then_the_install_again(monkeypatch):
    host, lines = Host(monkeypatch, apt="no-lists"), []
    images.bootstrap(Importer(), lines.append)
    assert host.ran[:3] == ["apt-get install", "apt-get update", "apt-get install"]
    assert any("running apt-get update first" in line for line in lines)


def test_an_install_that_fails_otherwise_is_not_retried_and_names_the_command(monkeypatch):
    host = Host(monkeypatch, apt="offline")
    with pytest.raises(EngineError) as caught:
        images.bootstrap(Importer(), lambda line: None)
    assert host.ran == ["apt-get install"]
    assert "cannot install debootstrap: apt-get failed with exit code 100" in str(caught.value)
    assert "hint: `sudo apt-get install debootstrap`" in str(caught.value)


def test_not_root_and_no_debootstrap_says_to_run_the_bootstrap_with_sudo_and_runs_nothing(monkeypatch):
    host = Host(monkeypatch, root=False)
    with pytest.raises(EngineError, match=r"hint: run `sudo sandbox images bootstrap` once") as caught:
        images.bootstrap(Importer(), lambda line: None)
    assert "debootstrap is not installed" in str(caught.value) and host.ran == []
    assert caught.value.exit_code == 121


def test_root_without_apt_get_says_what_to_install_and_runs_nothing(monkeypatch):
    host = Host(monkeypatch, have=("tar",))
    with pytest.raises(EngineError, match="no apt-get to install it") as caught:
        images.bootstrap(Importer(), lambda line: None)
    assert "hint: install debootstrap with this system's package manager" in str(caught.value) and host.ran == []


def test_not_root_with_debootstrap_still_needs_root(monkeypatch):
    host = Host(monkeypatch, root=False, have=("apt-get", "tar", "debootstrap"))
    with pytest.raises(EngineError, match="debootstrap needs root"):
        images.bootstrap(Importer(), lambda line: None)
    assert host.ran == []


TEST_TAG = "sandbox-test/base:bootstrap"   # never the shared debian:bookworm-slim others build on


@pytest.mark.engine
@pytest.mark.slow
def test_a_fresh_host_without_debootstrap_gets_it_and_the_base_image(engine):
    """Changes this host's packages: only under CI=true, as root, with apt-get (about a minute)."""
    if os.environ.get("CI", "").lower() not in ("1", "true"):
        pytest.skip("removes and reinstalls debootstrap on this host: runs only under CI=true")
    assert os.geteuid() == 0 and shutil.which("apt-get"), "CI=true: this test needs root and apt-get"
    subprocess.run(["docker", "image", "rm", TEST_TAG], capture_output=True)
    removed = subprocess.run(["dpkg", "-r", "debootstrap"], capture_output=True, text=True)
    assert removed.returncode == 0 and shutil.which("debootstrap") is None, removed.stderr
    lines = []
    try:
        images.bootstrap(engine, lines.append, tag=TEST_TAG)
        assert shutil.which("debootstrap") is not None
        assert "debootstrap is missing; installing it with apt-get" in lines[0]
        assert engine.image_exists(TEST_TAG) and lines[-1].startswith(f"created {TEST_TAG} locally")
        ran = subprocess.run(["docker", "run", "--rm", "--network", "none", TEST_TAG, "cat", "/etc/debian_version"],
                             capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and ran.stdout.startswith("12."), ran.stderr
    finally:
        subprocess.run(["docker", "image", "rm", TEST_TAG], capture_output=True)
        if shutil.which("debootstrap") is None:   # the launcher did not put it back: the host must not lose it
            subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
                           capture_output=True, stdin=subprocess.DEVNULL)
    assert not engine.image_exists(TEST_TAG)
