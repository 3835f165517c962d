"""Shell completion (click's `_SANDBOX_COMPLETE=bash_source sandbox`): preset names, agent profiles
and the names of sandboxes and copies. A completion never fails and never waits long: without an
engine that answers within a second or two it offers nothing."""

from __future__ import annotations

import threading

from click.shell_completion import CompletionItem

ENGINE_WAIT = 2.0   # seconds; a shell waiting on Tab longer than this feels hung
SANDBOXES = ("run", "up", "external")   # kinds `sandbox ls` lists that exec, down, port and logs take
COPIES = ("copy",)


def _matching(names, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def presets(ctx, param, incomplete: str) -> list[CompletionItem]:
    """The bundled presets; something with a / or a dot is a file, for the shell to complete."""
    from launcher import resources

    if "/" in incomplete or "." in incomplete:
        return [CompletionItem(incomplete, type="file")]
    try:
        return _matching(resources.preset_names(), incomplete)
    except Exception:   # noqa: BLE001 - a completion never fails
        return []


def agents(ctx, param, incomplete: str) -> list[CompletionItem]:
    try:
        from launcher.agents import PROFILES

        return _matching(sorted(PROFILES), incomplete)
    except Exception:   # noqa: BLE001 - a completion never fails
        return []


def _engine_names(kinds: tuple[str, ...]) -> list[str]:
    from launcher.engine import engine
    from launcher.launch import sandboxes

    return sorted({item.name for item in sandboxes.ls(engine.connect()) if item.kind in kinds})


def names(kinds: tuple[str, ...], wait: float = ENGINE_WAIT, lookup=_engine_names):
    """A completion of the names of what `sandbox ls` lists of these kinds, asked of the engine in
    a daemon thread: a hung socket leaves that thread behind, not the shell."""
    def complete(ctx, param, incomplete: str) -> list[CompletionItem]:
        found: list[str] = []

        def ask() -> None:
            try:
                found.extend(lookup(kinds))
            except BaseException:   # noqa: BLE001 - no engine, no permission, anything: no names
                pass

        worker = threading.Thread(target=ask, daemon=True)
        worker.start()
        worker.join(wait)
        return [] if worker.is_alive() else _matching(list(found), incomplete)
    return complete
