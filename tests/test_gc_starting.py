"""`sandbox gc` beside a launch in progress: a sandbox whose networks exist but whose proxy and
container do not yet belongs to a launcher that is alive, and stays; one whose launcher died goes."""

from __future__ import annotations

import os
import subprocess

from launcher import labels as label
from launcher.engine.enginefake import FakeEngine
from launcher.launch import sandboxes


def _networks_of(pid: int) -> FakeEngine:
    fake = FakeEngine()
    fake.http.networks["box-net"] = {"Name": "box-net", "Id": "n1", "Internal": True, "IPAM": {"Config": []},
                                     "Containers": [], "Labels": {label.MANAGED: "1", label.KIND: "network",
                                                                  label.SANDBOX: "box", label.OWNER_PID: str(pid)}}
    return fake


def test_the_networks_of_a_sandbox_still_being_made_stay():
    fake = _networks_of(os.getpid())
    assert sandboxes.gc(fake, False) == []
    assert "box-net" in fake.http.networks


def test_the_networks_a_killed_launcher_left_go():
    gone = subprocess.Popen(["true"])
    gone.wait()
    fake = _networks_of(gone.pid)
    assert sandboxes.gc(fake, False) == ["box"]
    assert "box-net" not in fake.http.networks


def test_everything_takes_them_whoever_made_them():
    fake = _networks_of(os.getpid())
    assert sandboxes.gc(fake, True) == ["box"]
