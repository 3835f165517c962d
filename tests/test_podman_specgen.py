"""podman containers are made by its own create (POST /libpod/containers/create, a specgen body):
its compat create adds a writable tmpfs at /run, /tmp and /var/tmp to every read-only root. The
plan's settings in specgen's words, read back through the fake's model of podman 4.3's inspect
(launcher/engine/podmanfake.py), agree with the plan; a tampered one is still a difference."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import fake_facts, untrusted_bind
from launcher.plan.dialects import PODMAN as PODMAN_DIALECT
from launcher.engine.dialects.podman import specgen_body
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import compare_inspect
from launcher.errors import EngineError
from launcher.plan.compiler import compile_policy

PLAN = compile_policy(untrusted_bind(), fake_facts())
PODMAN = {"Version": "4.3.1", "ApiVersion": "1.41", "Components": [
    {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}}]}


def created(spec=PLAN.container, tamper=lambda doc: None, libpod=lambda doc: None, **knobs):
    engine = FakeEngine(engine_version=PODMAN, libpod_info={}, tamper=tamper, **knobs)
    ref = engine.create(spec)
    libpod(engine.http.libpod[ref])
    return engine, compare_inspect(spec, engine.inspect(ref), engine.image_env(spec.image), PODMAN_DIALECT)


def test_podman_gets_its_own_create_and_the_container_agrees_with_the_plan():
    engine, diffs = created()
    assert diffs == []
    body = engine.created[-1]
    assert "HostConfig" not in body and body["read_only_filesystem"] is True and body["systemd"] == "false"
    assert body["manage_password"] is False   # else podman binds /etc/passwd and /etc/group for a user the image lacks
    assert body["netns"] == {"nsmode": "none"} and body["cap_drop"] == ["ALL"] and body["no_new_privileges"] is True
    assert body["resource_limits"]["pids"] == {"limit": 256}
    assert body["log_configuration"] == {"driver": "json-file", "size": 10_000_000}   # 10m as podman reads it


def test_docker_still_gets_the_compat_create():
    engine = FakeEngine()
    engine.create(PLAN.container)
    assert "HostConfig" in engine.created[-1]


@pytest.mark.parametrize("change, says", [
    (lambda d: d["HostConfig"]["Tmpfs"].update({"/run": "rw,rprivate,nosuid,nodev,tmpcopyup"}), "Tmpfs: /run added ("),
    (lambda d: d["HostConfig"]["Tmpfs"].update({"/var/tmp": "rw,rprivate,nosuid,nodev"}), "Tmpfs: /var/tmp added ("),
    (lambda d: d["HostConfig"].update(ReadonlyRootfs=False), "ReadonlyRootfs"),
    (lambda d: d["HostConfig"].update(SecurityOpt=[]), "SecurityOpt"),
    (lambda d: d["HostConfig"].update(PidsLimit=0), "PidsLimit"),
    (lambda d: d["HostConfig"]["Binds"].append("/:/host:rw,rprivate,rbind"), "Binds: /:/host"),
    (lambda d: d["Config"].update(Image="localhost/evil:1"), "Image"),
])
def test_a_container_podman_made_otherwise_is_refused(change, says):
    _, diffs = created(tamper=change)
    assert any(d.startswith(says.split(":")[0]) and says in d for d in diffs), diffs


def test_what_libpod_inspect_says_is_held_to_the_plan():
    _, diffs = created(libpod=lambda doc: doc.update(OCIRuntime="crun"))
    assert any(d.startswith("Runtime") for d in diffs), diffs


def test_a_security_option_specgen_cannot_say_is_refused_not_dropped():
    spec = dataclasses.replace(PLAN.container, security_opt=("no-new-privileges", "apparmor=sandbox"))
    with pytest.raises(EngineError, match=r"cannot take the security option 'apparmor=sandbox'"):
        specgen_body(spec)


def test_podman_s_own_path_is_accepted_only_where_the_image_has_none():
    bare = {PLAN.container.image: {"Env": []}}   # busybox-like: no PATH of its own
    assert created(images=bare)[1] == []
    _, diffs = created(images=bare, tamper=lambda d: d["Config"]["Env"].append("LD_PRELOAD=/x.so"))
    assert any(d.startswith("Env names") and "LD_PRELOAD added" in d for d in diffs), diffs
