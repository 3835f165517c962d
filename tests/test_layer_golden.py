"""Golden files, one per combine rule: a base, a layer that narrows, and one that asks for more
(capped by the ceiling, with the notes a user sees).
Regenerate with UPDATE_GOLDEN=1 after reviewing the change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.errors import PolicyError
from launcher.pipeline import stack
from launcher.policy import layers
from launcher.policy.layers import FIELDS, LayerKind, full_layer
from launcher.policy.policy import parse_policy

GOLDEN = Path(__file__).parent / "golden" / "layers"
BASE = """version: 1
name: base
description: golden base
image: sandbox/agent:bookworm
workspace: {access: read-write, protect: [docs]}
mounts: [{source: /srv/data, target: /data, access: read-write}, {source: /srv/ref, target: /ref}]
tmpfs: [{target: /tmp, size: 256m, mode: '0750'}]
home: {mode: volume, size: 256m}
network: {mode: proxy, allow: [api.example.com, '*.pypi.org'], allow_ip_literals: true}
env: {pass: [TERM, LANG], set: {A: '1', B: '2'}}
limits: {pids: 256, memory: 2g, cpus: 2, timeout: 30m}
user: '1000:1000'
capabilities: [CHOWN, KILL]
command: [bash]
"""

# rule -> [(title, layer documents applied in order as org, user, repository)]
CASES = {
    "pin": [("pinned to a digest", ["image: sandbox/agent:bookworm@sha256:" + "a" * 64]),
            ("another image", ["image: sandbox/agent:trixie"]),
            ("two digests", ["image: sandbox/agent:bookworm@sha256:" + "a" * 64,
                             "image: sandbox/agent:bookworm@sha256:" + "b" * 64])],
    "fixed": [("repeated", ["user: '1000:1000'\nworkspace: {target: /workspace}\nhome: {target: /home/agent}"]),
              ("changed", ["user: '1001:1001'\nworkspace: {target: /src}\nhome: {target: /home/me}"])],
    "read-only-wins": [("read-only", ["workspace: {access: read-only}"]),
                       ("read-write after read-only", ["workspace: {access: read-only}", "workspace: {access: read-write}"])],
    "copy-wins": [("copy", ["workspace: {mode: copy}"]),
                  ("bind after copy", ["workspace: {mode: copy}", "workspace: {mode: bind}"])],
    "union": [("paths add up", ["workspace: {protect: [secrets]}", "workspace: {protect: [.env, docs]}"]),
              ("exclusions add up", ["workspace: {exclude: [node_modules]}", "workspace: {exclude: [build]}"])],
    "intersect": [("fewer entries", ["network: {allow: [files.pypi.org]}\nenv: {pass: [LANG], set: {B: '2'}}\n"
                                     "capabilities: [KILL]\nmounts: [{source: /srv/data, target: /data}]\n"
                                     "tmpfs: [{target: /tmp, size: 64m, mode: '0700'}]"]),
                  ("new entries", ["network: {allow: [evil.example.net, '*.example.com']}\nenv: {pass: [HOME], set: {A: '2'}}\n"
                                   "capabilities: [SETUID]\nmounts: [{source: /srv/ref, target: /ref, access: read-write}]\n"
                                   "tmpfs: [{target: /tmp, size: 1g}, {target: /more}]"])],
    "tmpfs-wins": [("tmpfs", ["home: {mode: tmpfs}"]),
                   ("volume after tmpfs", ["home: {mode: tmpfs}", "home: {mode: volume}"])],
    "none-wins": [("none", ["network: {mode: none}"]),
                  ("proxy after none", ["network: {mode: none}", "network: {mode: proxy}"])],
    "gvisor-wins": [("gvisor", ["runtime: gvisor"]),
                    ("runc after gvisor", ["runtime: gvisor", "runtime: runc"])],
    "false-wins": [("off", ["network: {allow_ip_literals: false}"]),
                   ("on after off", ["network: {allow_ip_literals: false}", "network: {allow_ip_literals: true}"])],
    "minimum": [("lower", ["limits: {pids: 64, memory: 512m, cpus: 0.5, timeout: 10m}\nhome: {size: 128m}"]),
                ("higher", ["limits: {pids: 64}", "limits: {pids: 128, memory: 4g, cpus: 4, timeout: 2h}\nhome: {size: 1g}"])],
    "replace": [("another command", ["command: [sh, -c, make test]"])],
}


def render(rule: str) -> str:
    base = parse_policy(BASE.encode(), "base.yaml")
    prior = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    fields = [f for f, (_, r) in FIELDS.items() if r == rule]
    out = [f"# rule {rule}: {layers.RULES[rule]}", f"# fields: {', '.join(fields)}", ""]
    for title, docs in CASES[rule]:
        kinds = [LayerKind.ORG, LayerKind.USER, LayerKind.REPO]
        out.append(f"## {title}")
        for doc, kind in zip(docs, kinds):
            out += [f"--- {kind.value}.yaml", f"version: 1\n{doc}"]
        parsed = [stack.parse_layer(f"version: 1\n{doc}\n".encode(), f"{kind.value}.yaml", kind)
                  for doc, kind in zip(docs, kinds)]
        try:
            eff = layers.effective(base, parsed, prior=prior)
        except PolicyError as exc:
            out += ["=> refused:", str(exc), ""]
            continue
        decided = {d.field: d for d in eff.decisions}
        touched = [f for f in FIELDS if any(f in dict(layer.values) for layer in parsed)]
        out.append("=> applied:")
        out += [f"{f} = {decided[f].value}   [{decided[f].rule}; decided by {decided[f].decided_by}]" for f in touched]
        out += [f"note ({n.kind}): {n}" for n in eff.notes]
        out.append("")
    return "\n".join(out)


def test_every_rule_has_a_golden_case():
    assert set(CASES) == set(layers.RULES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_combine_rule_matches_its_golden_file(rule):
    got = render(rule)
    path = GOLDEN / f"{rule}.txt"
    if os.environ.get("UPDATE_GOLDEN") and (not path.exists() or path.read_text() != got + "\n"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(got + "\n")
        pytest.fail(f"rewrote {path.name}: review the diff, then run again without UPDATE_GOLDEN")
    assert got + "\n" == path.read_text(), "combine result changed: review, then UPDATE_GOLDEN=1 pytest"
