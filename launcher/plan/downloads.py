"""The download cache of a sandbox with read-only registries: one volume per workspace and trust key
(trustlevel.key, as the home volume), mounted at CACHE_DIR for pip, npm and uv, so that a second
install is fast. What a sandbox of one reach downloaded is never mounted into a sandbox of another:
the launcher refuses a volume of that name written under another key (launch/home.py prepare)."""

from __future__ import annotations

from launcher import labels as label
from launcher.plan.plan import CACHE_DIR, CACHE_PROFILE, HomeSpec, Mount, MountKind, cache_volume_name
from launcher.policy import registries
from launcher.policy.model import Policy

LAUNCHED = ("run", "up")   # files for another tool keep no volume of ours
# Each tool's cache directory variable (a policy's env.set still decides).
VARIABLES = {"PIP_CACHE_DIR": "pip", "npm_config_cache": "npm", "UV_CACHE_DIR": "uv"}


def cache(policy: Policy, workspace: str, trust: str, uid: int, gid: int, kind: str
          ) -> tuple[HomeSpec | None, tuple[Mount, ...], dict[str, str]]:
    """The cache volume's spec, its mount and the tools' variables; nothing without a registry."""
    if kind not in LAUNCHED or not registries.chosen(policy):
        return None, (), {}
    volume = cache_volume_name(workspace, trust)
    spec = HomeSpec(volume=volume, workspace=workspace, profile=CACHE_PROFILE, trust=trust, uid=uid, gid=gid,
                    labels=tuple(sorted({label.MANAGED: "1", label.KIND: "home", label.WORKSPACE: workspace,
                                         label.PROFILE: CACHE_PROFILE, label.TRUST: trust}.items())))
    mount = Mount(kind=MountKind.VOLUME, source=volume, target=CACHE_DIR, read_only=False, no_copy=True)
    return spec, (mount,), {name: f"{CACHE_DIR}/{tool}" for name, tool in VARIABLES.items()}
