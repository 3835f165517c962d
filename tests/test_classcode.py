"""launcher/classcode.py: the dataclasses' generated methods compiled once and kept; a class made
with the kept code is the class made without it."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import os
import subprocess
import sys
import types
from importlib.util import MAGIC_NUMBER

import pytest

from launcher import classcode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    return module


def _make(module: types.ModuleType):
    # in `module`, as a class of that module is made at its import (dataclasses takes its globals)
    namespace = {"__module__": module.__name__, "__annotations__": {"a": int, "b": "str", "c": tuple}, "b": "x",
                 "c": dataclasses.field(default=())}
    cls = type("Point", (), namespace)
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    made = classcode._Cache(str(tmp_path / "__pycache__" / "dataclass-code.bin"))
    monkeypatch.setattr(dataclasses, "exec", made.exec, raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    yield made
    for name in ("launcher.fake_classcode", "elsewhere_classcode"):
        sys.modules.pop(name, None)


def test_kept_code_makes_the_same_class(cache):
    patched = dataclasses.exec
    del dataclasses.exec   # the standard library's own
    plain = _make(_module("elsewhere_classcode"))
    dataclasses.exec = patched
    assert str(inspect.signature(_make(_module("elsewhere_classcode")))) == str(inspect.signature(plain))
    first = _make(_module("launcher.fake_classcode"))
    assert cache.new and list(cache.used) == ["launcher.fake_classcode"]   # compiled, and kept (ours alone)
    cache.save()
    again = classcode._Cache(cache.path)
    assert list(again.stored) == ["launcher.fake_classcode"] and not again.known   # decoded only when needed
    sys.modules.pop("launcher.fake_classcode")
    dataclasses.exec = again.exec
    second = _make(_module("launcher.fake_classcode"))
    assert not again.new and set(again.known["launcher.fake_classcode"]) == set(cache.used["launcher.fake_classcode"])
    for cls in (first, second):
        p = cls(a=1)
        assert repr(p) == repr(plain(a=1)).replace("elsewhere_classcode.", "launcher.fake_classcode.")
        assert p == cls(a=1, b="x") and p != cls(a=2) and hash(p) == hash(cls(a=1))
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.a = 2
        with pytest.raises(TypeError):
            cls(1)   # keyword-only, as declared
        assert str(inspect.signature(cls)) == str(inspect.signature(plain))
        assert dataclasses.replace(p, b="y").b == "y"


def test_only_the_launchers_classes_are_kept(cache):
    _make(_module("elsewhere_classcode"))
    assert not cache.known and not cache.used and not cache.new


def test_a_changed_class_leaves_its_old_code_behind(cache, tmp_path):
    module = _module("launcher.fake_classcode")
    _make(module)
    cache.save()
    stale = classcode._Cache(cache.path)
    stale.known["launcher.fake_classcode"] = {"old text": compile("pass", "<string>", "exec"),
                                              **classcode._decoded(stale.stored.pop("launcher.fake_classcode"))}
    stale.new = True
    stale.used = {"launcher.fake_classcode": {"new text": compile("pass", "<string>", "exec")}}
    stale.save()
    assert set(classcode._decoded(classcode._read(cache.path)["launcher.fake_classcode"])) == {"new text"}


@pytest.mark.parametrize("content", [b"", b"not marshal", MAGIC_NUMBER + b"\xff\x00garbage",
                                     MAGIC_NUMBER + marshal.dumps({"launcher.x": 1}), MAGIC_NUMBER + marshal.dumps([1]),
                                     b"\x00\x00\r\n" + marshal.dumps({})])
def test_a_bad_or_foreign_file_is_ignored(tmp_path, content):
    path = tmp_path / "dataclass-code.bin"
    path.write_bytes(content)
    assert classcode._read(str(path)) == {}


@pytest.mark.parametrize("part", [b"garbage", marshal.dumps({"text": 1}), marshal.dumps({1: compile("", "", "exec")}),
                                  marshal.dumps(["x"])])
def test_a_bad_module_part_is_compiled_anew(part):
    assert classcode._decoded(part) == {}


def test_nothing_written_without_bytecode(cache, monkeypatch):
    _make(_module("launcher.fake_classcode"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache.save()
    assert not os.path.exists(cache.path)


def test_the_cli_keeps_the_file_beside_the_bytecode(tmp_path):
    """Two starts of the CLI: the first writes the file (under PYTHONPYCACHEPREFIX), the second
    compiles nothing new."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPYCACHEPREFIX=str(tmp_path), PYTHONPATH=ROOT)
    probe = ("import launcher.cli, launcher.classcode as c, dataclasses; "
             "print(c.cache_path()); print(dataclasses.exec.__self__.new)")
    first = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    path, new = first.stdout.split()
    assert path.startswith(str(tmp_path)) and new == "True" and os.path.isfile(path)
    second = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert second.stdout.split() == [path, "False"]
