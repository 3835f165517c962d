"""Where bundled presets and Dockerfiles are: inside the wheel, or at the top of a source checkout."""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    inside = _PACKAGE / "_bundled" / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


def package_file(name: str) -> Path:
    """A data file of the package itself (the policy schema), without importlib.resources (~5 ms to import)."""
    return _PACKAGE / name


def policies_dir() -> Path:
    return _bundled("policies")


def images_dir() -> Path:
    return _bundled("images")


def preset_names() -> list[str]:
    return sorted(p.stem for p in policies_dir().glob("*.yaml"))


def looks_like_preset(ref: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9-]*", ref))


def preset_path(name: str) -> Path | None:
    path = policies_dir() / f"{name}.yaml"
    return path if path.is_file() else None
