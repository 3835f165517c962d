"""Agent profiles: what each real agent CLI needs inside a sandbox, as data (one module per agent). A
profile only adds environment, files in the agent's home and an image; never network, mounts or
capabilities (layers still narrow everything). `PROFILES` is the registry, keyed by name; wiring.py
applies one to the base policy and the command, logins.py brokers subscription logins through the
proxy.

May import: host, plan, policy."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from launcher.agents.profile import ENDPOINT, PLACEHOLDER_KEY, AgentProfile, ModelWiring, Package, check

__all__ = ["ENDPOINT", "PLACEHOLDER_KEY", "AgentProfile", "ModelWiring", "Package", "PROFILES", "check", "get"]


def _registry() -> Mapping[str, AgentProfile]:
    from launcher.agents import aider, claude_code, codex, gemini_cli, neo, opencode

    profiles = [check(m.PROFILE) for m in (claude_code, codex, gemini_cli, aider, opencode, neo)]
    return MappingProxyType({p.name: p for p in profiles})


PROFILES = _registry()


def get(name: str) -> AgentProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"no agent profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None
