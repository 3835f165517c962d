"""podman's words for the same settings (its compat API, as podman 4.3.1 answers here): what the
launcher sends it and how compare_inspect reads its inspect. Each word it handles is still checked:
a tampered value is a difference, never waved through."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import fake_facts, untrusted_bind
from launcher.plan.dialects import PODMAN, podman
from launcher.plan.dialects.podman import DEFAULT_CAPS as PODMAN_DEFAULT_CAPS, docker_name
from launcher.engine.dialects.podman import specgen_body
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import compare_inspect
from launcher.errors import EngineError
from launcher.plan.compiler import compile_policy
from launcher.plan.plan import MountKind

PLAN = compile_policy(untrusted_bind(), fake_facts())
# What podman 4.3.1 reported for the same create here: every tmpfs in HostConfig.Tmpfs (none in
# Mounts) with its own rprivate,nosuid,nodev; every bind and volume in Binds too; Runtime "oci" (the
# real one only in its libpod inspect); the default capabilities it dropped, never ALL; an empty
# LogConfig.Config (the size in libpod's); "private" for the default namespaces; the image name
# normalised; HOSTNAME, TERM (containers.conf's default env) and container=podman in every
# container's environment.
HANDLED = ("Tmpfs", "Mounts", "Binds", "Runtime", "CapDrop", "LogConfig", "PidMode", "UTSMode", "Image", "Env names")
LIBPOD = {"podman_runtime": "runc", "podman_log_size": "10MB", "podman_bounding_caps": (), "podman_effective_caps": ()}


def as_podman(doc: dict) -> None:
    host = doc["HostConfig"]
    tmpfs = {m.target: m for m in PLAN.container.mounts if m.kind is MountKind.TMPFS}
    host["Tmpfs"] = {target: podman.tmpfs_reported(m) for target, m in tmpfs.items()}
    doc["Mounts"] = [m for m in doc["Mounts"] if m["Type"] != "tmpfs"]
    host["Binds"] = [f"{m['Source'] if m['Type'] == 'bind' else m['Name']}:{m['Destination']}:"
                     f"{'rw' if m['RW'] else 'ro'},rprivate,{'' if m['Type'] == 'bind' else 'nosuid,nodev,'}rbind"
                     for m in doc["Mounts"]]
    host.update(Runtime="oci", CapDrop=list(PODMAN_DEFAULT_CAPS), PidMode="private", UTSMode="private",
                LogConfig={"Type": "json-file", "Config": {}})
    doc["Config"]["Image"] = docker_name(doc["Config"]["Image"])
    doc["Config"]["Env"] += ["HOSTNAME=x", "TERM=xterm", "container=podman"]


def podman_differences(change=lambda doc: None, libpod=LIBPOD) -> list[str]:
    engine = FakeEngine(tamper=lambda doc: (as_podman(doc), change(doc)))
    ref = engine.create(PLAN.container)
    info = dataclasses.replace(engine.inspect(ref), **libpod)
    return compare_inspect(PLAN.container, info, engine.image_env(PLAN.container.image), PODMAN)


def test_podman_s_words_for_the_plan_s_settings_agree_with_the_plan():
    assert podman_differences() == []


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
     "Tmpfs: /run added ("),   # podman's writable /run on a read-only root (its read-only-tmpfs), named first
    ("PidMode", lambda d: d["HostConfig"].update(PidMode="host"), "the container has 'host'"),
    ("UTSMode", lambda d: d["HostConfig"].update(UTSMode="host"), "the container has 'host'"),
    ("Image", lambda d: d["Config"].update(Image="localhost/other/agent:bookworm"),
     "the plan says 'docker.io/sandbox/agent:bookworm-full'"),
    ("Image", lambda d: d["Config"].update(Image="quay.io/sandbox/agent:bookworm"), "the container has 'quay.io/"),
    ("Env names", lambda d: d["Config"]["Env"].append("DOCKER_HOST=tcp://x"), "DOCKER_HOST added"),
    ("CapDrop", lambda d: d["HostConfig"]["CapDrop"].remove("NET_RAW"), "NET_RAW not dropped"),
    ("Binds", lambda d: d["HostConfig"]["Binds"].append("/run/docker.sock:/var/run/docker.sock:rw,rprivate,rbind"),
     "/run/docker.sock:/var/run/docker.sock:rw,rprivate,rbind added"),
    ("Binds", lambda d: d["HostConfig"].update(Binds=[b.replace(":ro,", ":rw,") for b in d["HostConfig"]["Binds"]]),
     "added"),   # a read-only bind made writable
    ("Mounts", lambda d: d["Mounts"].append({"Type": "bind", "Destination": "/etc/cron.d", "RW": True, "Source": "/tmp"}),
     "/etc/cron.d is mounted"),
    ("Tmpfs", lambda d: d["HostConfig"]["Tmpfs"].pop("/workspace/lefthook.yml"), "/workspace/lefthook.yml missing"),
])
def test_a_tampered_podman_setting_is_a_difference(field, change, says):
    diffs = podman_differences(change)
    assert any(d.startswith(field) and says in d for d in diffs), diffs


@pytest.mark.parametrize("field, libpod, says", [
    ("Runtime", {**LIBPOD, "podman_runtime": "crun"}, "the plan says 'runc', the container has 'crun'"),
    ("Runtime", {**LIBPOD, "podman_runtime": None}, "the container has None"),   # no libpod answer: refused
    ("LogConfig", {**LIBPOD, "podman_log_size": None}, "the plan says json-file, 10MB, the container has json-file, None"),
    # libpod's capability sets, containers.conf's defaults included (the compat CapDrop cannot show those)
    ("BoundingCaps", {**LIBPOD, "podman_bounding_caps": ("CAP_SYS_ADMIN",)}, "CAP_SYS_ADMIN added"),
    ("BoundingCaps", {**LIBPOD, "podman_bounding_caps": None}, "the container has None"),   # no libpod answer
    ("EffectiveCaps", {**LIBPOD, "podman_effective_caps": ("CAP_NET_RAW",)}, "the container has CAP_NET_RAW"),
])
def test_what_only_podman_s_libpod_inspect_says_is_checked_there(field, libpod, says):
    diffs = podman_differences(libpod=libpod)
    assert any(d.startswith(field) and says in d for d in diffs), diffs


def test_an_owned_tmpfs_goes_to_podman_with_U_noexec_and_notmpcopyup():
    mounts = specgen_body(PLAN.container)["mounts"]
    tmpfs = {m["destination"]: ",".join(m["options"]) for m in mounts if m["type"] == "tmpfs"}
    assert tmpfs["/home/agent"] == "rw,size=536870912,mode=0700,U,noexec,notmpcopyup"
    assert all("uid=" not in options for options in tmpfs.values())   # podman 4.3: "unknown mount option"
    masks = [m.target for m in PLAN.container.mounts if m.kind is MountKind.TMPFS and not m.owned_tmpfs]
    assert masks and all(tmpfs[t].endswith(",mode=1777,noexec,notmpcopyup") for t in masks)   # no copy-up, no mode 0


def test_podman_is_refused_a_tmpfs_owned_by_someone_but_the_container_s_user():
    other = dataclasses.replace(PLAN.container, user="1001:1001")
    with pytest.raises(EngineError, match=r"podman can make a tmpfs owned only by the container's user \(1001:1001\)"):
        specgen_body(other)


@pytest.mark.parametrize("name, reported", [
    ("sandbox/agent:bookworm", "docker.io/sandbox/agent:bookworm"),
    ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"),
    ("ghcr.io/o/i:1", "ghcr.io/o/i:1"), ("localhost/x/y:1", "localhost/x/y:1"), ("reg:5000/x:1", "reg:5000/x:1"),
])
def test_image_names_as_podman_reports_them(name, reported):
    assert docker_name(name) == reported


def test_the_proxy_s_scratch_tmpfs_go_to_podman_without_uid_and_without_copy_up():
    from launcher.plan.plan import ProxySpec

    spec = ProxySpec(name="p", image="i", config="", internal_network="n", egress_network="e", alias="a", port=3128,
                     labels=())
    assert spec.scratch_options == "uid=13,gid=13,mode=0700,size=16m"   # Docker's words
    assert podman.scratch_options(spec) == "rw,size=16m,mode=0700,U,noexec,notmpcopyup" and spec.user == "13:13"
