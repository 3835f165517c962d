"""podman's words for the same settings (its compat API, as podman 4.3.1 answers here): what the
launcher sends it and how compare_inspect reads its inspect. Each word it handles is still checked:
a tampered value is a difference, never waved through."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import fake_facts, untrusted_bind
from launcher.compiler import compile_policy
from launcher.engineapi import create_body
from launcher.enginefake import FakeEngine
from launcher.errors import EngineError
from launcher.verify import compare_inspect, docker_name

PLAN = compile_policy(untrusted_bind(), fake_facts())
# What podman 4.3.1 reported for the same create here (tests/test_podman_dialect.py's record):
# every Tmpfs entry gets its own rprivate,nosuid,nodev; the default namespaces are "private"; the
# image name is normalised; HOSTNAME and container=podman are in every container's environment.
HANDLED = ("Tmpfs", "PidMode", "UTSMode", "Image", "Env names")


def as_podman(doc: dict) -> None:
    host = doc["HostConfig"]
    owned = {m.target: m for m in PLAN.container.mounts if m.owned_tmpfs}
    host["Tmpfs"] = {target: owned[target].podman_tmpfs_reported() for target in host.get("Tmpfs") or {}}
    host.update(PidMode="private", UTSMode="private")
    doc["Config"]["Image"] = docker_name(doc["Config"]["Image"])
    doc["Config"]["Env"] += ["HOSTNAME=x", "container=podman"]


def podman_differences(change=lambda doc: None) -> list[str]:
    engine = FakeEngine(tamper=lambda doc: (as_podman(doc), change(doc)))
    ref = engine.create(PLAN.container)
    return compare_inspect(PLAN.container, engine.inspect(ref), engine.image_env(PLAN.container.image), podman=True)


def test_podman_s_words_for_the_plan_s_settings_agree_with_the_plan():
    assert [d for d in podman_differences() if d.startswith(HANDLED)] == []


def test_the_same_words_from_docker_are_differences():
    engine = FakeEngine(tamper=as_podman)
    ref = engine.create(PLAN.container)
    diffs = compare_inspect(PLAN.container, engine.inspect(ref), engine.image_env(PLAN.container.image))
    assert {d.split(":")[0] for d in diffs} >= set(HANDLED), diffs


@pytest.mark.parametrize("field, change, says", [
    ("Tmpfs", lambda d: d["HostConfig"]["Tmpfs"].update({"/home/agent": "rw,size=536870912,mode=0700,U,noexec,"
                                                                        "rprivate,nosuid,nodev,tmpcopyup"}),
     "tmpcopyup"),   # the image's files copied into the home
    ("Tmpfs", lambda d: d["HostConfig"]["Tmpfs"].update({"/tmp": "rw,size=268435456,mode=0700,rprivate,nosuid,nodev"}),
     "the container has"),   # not chowned to the agent (no U), executable
    ("Tmpfs", lambda d: d["HostConfig"]["Tmpfs"].update({"/run": "rw,rprivate,nosuid,nodev,tmpcopyup"}),
     "/run=rw"),   # podman's writable /run on a read-only root (read_only_tmpfs)
    ("PidMode", lambda d: d["HostConfig"].update(PidMode="host"), "the container has 'host'"),
    ("UTSMode", lambda d: d["HostConfig"].update(UTSMode="host"), "the container has 'host'"),
    ("Image", lambda d: d["Config"].update(Image="localhost/sandbox/agent:bookworm"),
     "the plan says 'docker.io/sandbox/agent:bookworm'"),
    ("Env names", lambda d: d["Config"]["Env"].append("DOCKER_HOST=tcp://x"), "DOCKER_HOST added"),
])
def test_a_tampered_podman_setting_is_a_difference(field, change, says):
    diffs = podman_differences(change)
    assert any(d.startswith(field) and says in d for d in diffs), diffs


def test_an_owned_tmpfs_goes_to_podman_with_U_noexec_and_notmpcopyup():
    tmpfs = create_body(PLAN.container, podman=True)["HostConfig"]["Tmpfs"]
    assert tmpfs["/home/agent"] == "rw,size=536870912,mode=0700,U,noexec,notmpcopyup"
    assert all("uid=" not in options for options in tmpfs.values())   # podman 4.3: "unknown mount option"


def test_podman_is_refused_a_tmpfs_owned_by_someone_but_the_container_s_user():
    other = dataclasses.replace(PLAN.container, user="1001:1001")
    with pytest.raises(EngineError, match=r"podman can make a tmpfs owned only by the container's user \(1001:1001\)"):
        create_body(other, podman=True)


@pytest.mark.parametrize("name, reported", [
    ("sandbox/agent:bookworm", "docker.io/sandbox/agent:bookworm"),
    ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"),
    ("ghcr.io/o/i:1", "ghcr.io/o/i:1"), ("localhost/x/y:1", "localhost/x/y:1"), ("reg:5000/x:1", "reg:5000/x:1"),
])
def test_image_names_as_podman_reports_them(name, reported):
    assert docker_name(name) == reported
