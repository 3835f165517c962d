"""A launch's own CA files (rules per request) that a killed launcher left: `sandbox gc` removes
those no proxy names once they are an hour old, and nothing else in the folder."""

from __future__ import annotations

import os

from launcher.host import host
from launcher.plan import trustfiles


def _file(name: str, age: float, now: float) -> str:
    folder = os.path.join(host.state_dir(), "cas")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as out:
        out.write("-----BEGIN CERTIFICATE-----\n")
    os.utime(path, (now - age, now - age))
    return path


def test_only_old_launch_files_no_proxy_names_go():
    now = 1_800_000_000.0
    left = _file("bump-dead-extra.pem", 7200, now)
    named = _file("bump-live-extra.pem", 7200, now)
    starting = _file("bump-new-extra.pem", 60, now)
    shared = _file("0123456789abcdef-extra.pem", 7200, now)   # content-named, shared by launches
    assert trustfiles.stale_launch_files({named}, older_than=3600, now=now) == [left]
    assert not os.path.exists(left)
    assert all(os.path.exists(p) for p in (named, starting, shared))


def test_no_folder_is_nothing_to_do():
    assert trustfiles.stale_launch_files(set(), older_than=3600, now=0) == []
