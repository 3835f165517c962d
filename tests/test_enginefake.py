"""The engine seam: launcher.engine.engine.Engine and the in-package fake answer the same Protocol
(engineproto.Engine), and the fake's model behaves as the engine does for what the launcher asks."""

from __future__ import annotations

import inspect

import pytest

from conftest import fake_facts, preset, untrusted_bind
from launcher import labels as label
from launcher.engine import engineproto
from launcher.engine.engine import Engine
from launcher.engine.enginefake import FakeEngine, tar_of
from launcher.errors import EngineError, NotFound
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import with_allowed

PROTOCOL = {name for name, member in vars(engineproto.Engine).items()
            if callable(member) and not name.startswith("_")}
PLAN = compile_policy(untrusted_bind(), fake_facts())


@pytest.mark.parametrize("cls", [Engine, FakeEngine])
def test_engine_and_fake_have_every_method_of_the_protocol_with_its_parameters(cls):
    for name in sorted(PROTOCOL):
        wanted = list(inspect.signature(getattr(engineproto.Engine, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == wanted, name


def test_the_protocol_is_what_the_engine_offers():
    public = {n for cls in Engine.__mro__[:-1] for n, m in vars(cls).items() if callable(m) and not n.startswith("_")}
    assert public == PROTOCOL


def test_a_container_goes_through_its_life_in_typed_answers():
    engine = FakeEngine(output=[(b"hello\n", None)], exit_code=3)
    ref = engine.create(PLAN.container)
    info = engine.inspect(ref)
    assert isinstance(info, engineproto.ContainerInfo) and info.name == PLAN.container.name and not info.running
    assert info.labels[label.MANAGED] == "1" and info.host.read_only_root is True and info.user == PLAN.container.user
    assert [m.target for m in info.mounts] == [m.target for m in PLAN.container.mounts if not m.owned_tmpfs]
    [listed] = engine.list()
    assert (listed.id, listed.name, listed.state) == (ref, PLAN.container.name, "created")
    engine.start(ref)
    assert engine.inspect(ref).running and list(engine.output(ref)) == [(b"hello\n", None)]
    assert engine.wait(ref) == 3 and engine.inspect(ref).exit_code == 3 and engine.list()[0].state == "exited"
    engine.remove(ref)
    engine.remove(ref)   # gone already: not an error
    assert engine.calls == ["create", "start", "remove"] and engine.list() == []
    with pytest.raises(NotFound, match=f"inspecting container {ref}"):
        engine.inspect(ref)


def test_volumes_networks_and_labels_filter_as_the_engine_does():
    engine = FakeEngine()
    made = engine.create_volume("v", {label.MANAGED: "1", label.KIND: "copy"})
    engine.create_volume("theirs", {"x": "1"})   # not ours: no managed label
    assert engine.volume_info("v") == made and made.mountpoint and engine.volume_info("w") is None
    assert [v.name for v in engine.list_volumes()] == ["v"] and engine.list_volumes("dev.sandbox.kind=home") == []
    assert engine.volume_labels("v") == {label.MANAGED: "1", label.KIND: "copy"}
    engine.remove_volume("v")
    assert engine.removed_volumes == ["v"]
    with pytest.raises(NotFound):
        engine.remove_volume("v")
    proxied = compile_policy(with_allowed(preset("ci"), ("allowed.test",)), fake_facts(), command=("true",))
    for spec in proxied.networks:
        assert engine.create_network(spec) == ""   # made; Docker does not say the subnet it chose
    assert sorted(n.name for n in engine.list_networks()) == sorted(n.name for n in proxied.networks)
    ref = engine.create_proxy(proxied.proxy)
    assert set(engine.inspect(ref).networks) == {proxied.proxy.internal_network, proxied.proxy.egress_network}
    engine.remove(ref)
    for spec in proxied.networks:
        engine.remove_network(spec.name)
    assert engine.list_networks() == []


def test_images_failures_and_files():
    engine = FakeEngine(images={"a:1": {"Labels": {"k": "v"}, "Env": ["A=1"]}},
                        fail={"DELETE /containers/": "the engine went away"},
                        archive=lambda info, path: tar_of("f", b"data") if path == "/f" else None)
    assert engine.image_exists("a:1") and not engine.image_exists("b:1")
    assert engine.image_labels("a:1") == {"k": "v"} and engine.image_env("a:1") == ["A=1"]
    ref = engine.http.add_container("box", {label.MANAGED: "1"}, image="a:1")
    assert engine.read_file(ref, "/f", 100) == b"data" and engine.read_file(ref, "/g", 100) is None
    assert engine.exists(ref, "/f") and not engine.exists(ref, "/g")
    with pytest.raises(EngineError, match="removing box: the engine went away"):
        engine.remove("box")
    with pytest.raises(EngineError, match="no SDK client"):
        engine.client
