"""The policy's digests. The trust key of state kept between runs (a home volume, a copy): a
digest of every part of the effective policy that decides what the agent can reach, so what a
sandbox of one envelope wrote is never mounted into a sandbox of another (trust flows one way, and
here it does not flow at all). The effective digest: of every value (a sandbox's label)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from launcher.policy.model import Policy

KEY_LENGTH = 12   # hex digits: in volume names and labels


def parts(policy: Policy) -> dict:
    """What the key covers: the workspace's mode, access, git and protected paths, the extra
    mounts, the network (mode, allow-list, IP literals, the model API), the environment passed or
    set, the secrets the proxy adds, the CAs trusted, the user, the capabilities, the image and
    the runtime. Not: limits, timeout, command, names, tmpfs sizes (they grant nothing)."""
    ws = policy.workspace
    return {
        "workspace": {"mode": ws.mode.value, "access": ws.access.value, "git": ws.git.value,
                      "protect": sorted(ws.protect), "exclude": sorted(ws.exclude)},
        "mounts": sorted([m.source, m.target, m.access.value] for m in policy.mounts),
        "network": {"mode": policy.network.mode.value, "allow": sorted(repr(r) + (repr(r.http) if r.http else "") for r in policy.network.allow),
                    "ip_literals": policy.network.allow_ip_literals, "model": policy.network.model},
        "env": {"pass": sorted(policy.env.pass_names), "set": sorted(list(kv) for kv in policy.env.set_values)},
        "secrets": sorted([s.name, s.upstream, s.header, s.login, s.path, bool(s.env), bool(s.file)]
                          + ([repr(s.bind)] if s.bind else []) for s in policy.secrets),
        "ca_certificates": sorted(policy.ca_certificates),
        "user": list(policy.user) if policy.user else "auto",
        "capabilities": sorted(policy.capabilities),
        "image": policy.image,
        # packages: / build: another image (only when set: the key of a policy without them is unchanged)
        **({"packages": sorted(policy.packages)} if policy.packages else {}),
        **({"build": [policy.build.dockerfile, policy.build.context]} if policy.build.dockerfile else {}),
        "runtime": policy.runtime.value,
    }


def key(policy: Policy) -> str:
    """Equal keys: the same reach. Any difference gives another key, hence another home volume."""
    text = json.dumps(parts(policy), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]


def effective_digest(policy: Policy) -> str:
    """sha256 of every effective value (flags and layers included, not where it was read from):
    equal digests mean the same envelope. A policy that extends no image keeps the digest it had
    before packages: and build: were fields (a running `up` sandbox is still the same one)."""
    text = repr(replace(policy, source="", digest="")).replace(_UNEXTENDED, "")
    # Fields kept out of their dataclass's repr (so older digests stand): present only when set.
    text += "".join(f"\n{x!r}" for x in [r.http for r in policy.network.allow] + [s.bind for s in policy.secrets] if x)
    return hashlib.sha256(text.encode()).hexdigest()


_UNEXTENDED = ", packages=(), build=BuildPolicy(dockerfile='', context='.', devcontainer='')"
