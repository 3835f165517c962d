"""The code of the dataclasses' generated methods, compiled once and kept beside the bytecode.

`@dataclass` writes each class's `__init__`, `__eq__`, `__hash__`, `__repr__`, `__setattr__` and
`__delattr__` as source text and compiles it with `exec` at import: about 0.7 ms per frozen class,
some 60 ms of every `sandbox` command's start on ~90 classes. The same text always compiles to the
same code, so the CLI keeps that code, keyed by the exact text, in one file in the package's
`__pycache__` (where Python keeps the modules' bytecode, trusted alike: whoever can write one can
write the other; `sys.pycache_prefix` and `PYTHONDONTWRITEBYTECODE` are honoured as Python honours
them for bytecode). A text not in the file is compiled as `dataclasses` compiles it; the file is
read once (each module's part decoded when that module makes its first class), and written again
at exit only when this process compiled something new. Nothing else is kept: what a class does is
decided by its text alone, exactly as without the file.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER, cache_from_source
from types import CodeType

MAX_BYTES = 8 << 20     # a larger file is not read; past half of it, only this process's modules are written
_installed = False


class _Cache:
    """The kept code by module (each decoded when that module makes its first class), and the
    texts this process's classes had: a module's part is written back with those alone (all of a
    module's classes are made at its import), so a class changed by an upgrade leaves nothing behind."""

    def __init__(self, path: str):
        self.path = path
        self.stored: dict[str, bytes] = _read(path)    # module -> its texts' code, still marshalled
        self.known: dict[str, dict[str, CodeType]] = {}
        self.used: dict[str, dict[str, CodeType]] = {}
        self.new = False

    def _module(self, name: str) -> dict[str, CodeType]:
        if name not in self.known:
            self.known[name] = _decoded(self.stored.pop(name, b""))
        return self.known[name]

    def exec(self, source, globals=None, locals=None, /):
        """`exec` as the dataclasses module sees it: the text of one of the launcher's classes that
        was compiled before runs its kept code (any other class's is compiled as always)."""
        if isinstance(source, str):
            name = _ours(globals)
            kept = self._module(name) if name else {}
            code = kept.get(source)
            if code is None:
                # as exec compiles a text called from dataclasses: no __future__ flags (it has none;
                # a text exec'd from here would take this module's)
                code = compile(source, "<string>", "exec", dont_inherit=True)
                if name:
                    kept[source] = code
                    self.new = True
            if name:
                self.used.setdefault(name, {})[source] = code
            source = code
        return builtins.exec(source, globals, locals)

    def save(self) -> None:
        if not self.new or sys.dont_write_bytecode:
            return
        modules = {name: marshal.dumps(code) for name, code in self.used.items()}
        if sum(len(v) for v in self.stored.values()) + sum(len(v) for v in modules.values()) <= MAX_BYTES // 2:
            modules = {**self.stored, **modules}   # beyond: this process's modules alone (old versions' go)
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(temporary, "wb") as out:
                out.write(MAGIC_NUMBER + marshal.dumps(modules))
            os.replace(temporary, self.path)   # whole or not at all, also with many launchers at once
        except (OSError, ValueError):   # a read-only install: every start compiles, as without the file
            try:
                os.unlink(temporary)
            except OSError:
                pass


def _ours(namespace) -> str:
    """The module whose class this is (the generated methods' globals are its module's), when it is
    one of the launcher's own; else ""."""
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    return name if isinstance(name, str) and (name == "launcher" or name.startswith("launcher.")) else ""


def _read(path: str) -> dict[str, bytes]:
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_BYTES + 1)
    except OSError:
        return {}
    if len(data) > MAX_BYTES or not data.startswith(MAGIC_NUMBER):   # another Python's, or not ours
        return {}
    try:
        found = marshal.loads(data[len(MAGIC_NUMBER):])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, bytes) for k, v in found.items()):
        return {}
    return found


def _decoded(data: bytes) -> dict[str, CodeType]:
    """One module's texts and their code; {} when that part of the file is not such a mapping."""
    try:
        found = marshal.loads(data) if data else {}
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, CodeType) for k, v in found.items()):
        return {}
    return found


def cache_path() -> str:
    """The file, where Python would keep the bytecode of a module `dataclass-code` beside this one."""
    pyc = cache_from_source(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataclass-code.py"))
    return pyc.removesuffix(".pyc") + ".bin"   # not bytecode Python would load: the texts' code, marshalled


def install() -> None:
    """From now on, dataclasses created in this process take their methods' code from the file.
    Only the CLI calls this (it owns its process), and only the launcher's own classes are concerned."""
    global _installed
    if _installed:
        return
    try:
        cache = _Cache(cache_path())
    except (NotImplementedError, ValueError):   # no bytecode cache at all (sys.implementation.cache_tag None)
        return
    dataclasses.exec = cache.exec   # a module global shadows the builtin for the module's own calls
    atexit.register(cache.save)
    _installed = True
