"""Layers only narrow: each combine rule, `extends`, the stack a run applies, and the git hooks path."""

from __future__ import annotations

import os
import subprocess

import pytest

from launcher.errors import PolicyError
from launcher.pipeline import stack
from launcher.policy import layers
from launcher.policy.layers import FIELDS, LayerKind, effective, full_layer
from launcher.policy.model import BUILTIN_PROTECTED, Access, NetworkMode
from launcher.policy.policy import parse_policy
from launcher.policy.schema import policy_schema

BASE = b"""version: 1
name: base
description: test base
image: sandbox/agent:bookworm
workspace: {access: read-write, protect: [docs]}
mounts: [{source: /srv/data, target: /data, access: read-write}, {source: /srv/ref, target: /ref}]
tmpfs: [{target: /tmp, size: 256m}, {target: /cache, size: 64m}]
network: {mode: proxy, allow: [api.example.com, '*.pypi.org', 'git.example.com:8443']}
env: {pass: [TERM, LANG], set: {A: '1', B: '2'}}
limits: {pids: 256, memory: 2g, cpus: 2, timeout: 30m}
user: '1000:1000'
capabilities: [CHOWN, KILL]
command: [bash]
"""


def base():
    policy = parse_policy(BASE, "base.yaml")
    return policy, layers.effective(policy, [full_layer(LayerKind.BASE, policy)])


def narrow(*docs: bytes, kinds=None):
    """The effective policy of BASE narrowed by each document in turn (org, user, repository...)."""
    policy, prior = base()
    kinds = kinds or [LayerKind.ORG, LayerKind.USER, LayerKind.REPO]
    parsed = [stack.parse_layer(b"version: 1\n" + d, f"{k.value}.yaml", k) for d, k in zip(docs, kinds)]
    return effective(policy, parsed, prior=prior)


def widening(*docs: bytes) -> str:
    with pytest.raises(PolicyError) as info:
        narrow(*docs)
    return str(info.value)


def test_every_schema_field_has_a_combine_rule():
    def leaves(props, prefix=""):
        for key, sub in props.items():
            name = prefix + key
            if name in FIELDS or name in stack.META_KEYS:
                yield name
            elif "properties" in sub:
                yield from leaves(sub["properties"], name + ".")
            else:
                yield name
    # an alias sets another field (network.registries are network.allow rules)
    assert set(leaves(policy_schema()["properties"])) - set(stack.META_KEYS) - set(stack.ALIASES) == set(FIELDS)
    assert set(stack.ALIASES.values()) <= set(FIELDS)
    assert {rule for _, rule in FIELDS.values()} == set(layers.RULES)


@pytest.mark.parametrize("doc, field, value", [
    (b"limits: {memory: 1g, pids: 64, cpus: 0.5, timeout: 10m}\n", "limits.memory", 1024 ** 3),
    (b"limits: {pids: 64}\n", "limits.pids", 64),
    (b"workspace: {access: read-only}\n", "workspace.access", Access.READ_ONLY),
    (b"network: {mode: none}\n", "network.mode", NetworkMode.NONE),
    (b"capabilities: [KILL]\n", "capabilities", ("KILL",)),
    (b"env: {pass: [LANG], set: {B: '2'}}\n", "env.set", (("B", "2"),)),
    (b"workspace: {protect: [secrets]}\n", "workspace.protect", BUILTIN_PROTECTED + ("docs", "secrets")),
    (b"command: [sh]\n", "command", ("sh",)),
])
def test_narrowing_layers_apply(doc, field, value):
    assert layers.get(narrow(doc).policy, field) == value


def test_none_network_drops_the_allow_list_and_later_layers_cannot_bring_it_back():
    eff = narrow(b"network: {mode: none}\n", b"network: {allow: [api.example.com]}\n")
    assert eff.policy.network.mode is NetworkMode.NONE and eff.policy.network.allow == ()
    assert {d.field: d.decided_by for d in eff.decisions}["network.allow"] == "org org.yaml"


def test_allow_rules_intersect_with_wildcards_and_ports_and_the_loss_is_a_note():
    eff = narrow(b"network: {allow: [pypi.org, 'api.example.com:8443', '*.example.com', 'files.pypi.org']}\n")
    # pypi.org is not below *.pypi.org; api.example.com has no port 8443; *.example.com (80, 443)
    # meets api.example.com but not git.example.com:8443
    assert [str(r) for r in eff.policy.network.allow] == ["api.example.com", "files.pypi.org"]
    assert [str(n) for n in eff.notes] == [
        "org org.yaml: network.allow: asked api.example.com, *.pypi.org, git.example.com:8443 (policy base.yaml), "
        "left api.example.com, files.pypi.org"]


def test_a_ceiling_note_names_layer_field_what_was_asked_and_what_is_left():
    eff = narrow(b"limits: {memory: 1g}\n", b"limits: {memory: 4g}\n")
    assert eff.policy.limits.memory_bytes == 1024 ** 3
    assert [str(n) for n in eff.notes] == ["org org.yaml: limits.memory: asked 2g (policy base.yaml), left 1g"]


def test_a_layer_wider_than_the_base_changes_nothing_and_is_never_refused():
    doc = (b"limits: {pids: 999}\nworkspace: {access: read-write}\ncapabilities: [CHOWN, SETUID]\nuser: '1001:1001'\n"
           b"mounts: [{source: /srv/ref, target: /ref, access: read-write}, {source: /srv/data, target: /data, access: read-write}]\n"
           b"tmpfs: [{target: /tmp, size: 1g}, {target: /cache, size: 64m}]\nenv: {set: {A: '9', B: '2'}}\nimage: other:1\n")
    policy, _ = base()
    eff = narrow(doc)
    for field in ("limits.pids", "workspace.access", "user", "tmpfs", "image"):
        assert layers.get(eff.policy, field) == layers.get(policy, field), field
    assert eff.policy.capabilities == ("CHOWN",)                     # what both allow
    assert [m.target for m in eff.policy.mounts] == ["/data", "/ref"] and eff.policy.mounts[1].access is Access.READ_ONLY
    assert eff.policy.env.set_values == (("B", "2"),)                # A differs: neither value is "allowed by both"
    ignored = {n.field for n in eff.notes if n.kind == "ignored"}
    assert ignored == {"user", "image"}


def test_read_only_beats_read_write_for_the_workspace():
    assert narrow(b"workspace: {access: read-only}\n", b"workspace: {access: read-write}\n").policy.workspace.access \
        is Access.READ_ONLY


@pytest.mark.parametrize("image, result", [
    ("sandbox/agent:bookworm@sha256:" + "a" * 64, "sandbox/agent:bookworm@sha256:" + "a" * 64),
    ("sandbox/agent@sha256:" + "b" * 64, "sandbox/agent@sha256:" + "b" * 64),
    ("sandbox/agent:bookworm", "sandbox/agent:bookworm"),
])
def test_image_may_be_pinned(image, result):
    assert narrow(f"image: '{image}'\n".encode()).policy.image == result


@pytest.mark.parametrize("image", ["sandbox/agent:trixie", "evil/agent:bookworm", "evil/agent@sha256:" + "a" * 64])
def test_another_image_is_ignored_with_a_note(image):
    eff = narrow(f"image: '{image}'\n".encode())
    assert eff.policy.image == "sandbox/agent:bookworm"
    assert [(n.field, n.kind) for n in eff.notes] == [("image", "ignored")]


def test_a_pinned_image_keeps_its_pin_and_two_digests_conflict_unless_the_repository_says_it():
    pinned = "sandbox/agent:bookworm@sha256:" + "a" * 64
    assert narrow(f"image: '{pinned}'\n".encode(), b"image: sandbox/agent:bookworm\n").policy.image == pinned
    with pytest.raises(PolicyError, match="pinned to different digests"):
        narrow(f"image: '{pinned}'\n".encode(), f"image: '{pinned[:-1]}b'\n".encode())
    # a repository layer never fails a job: its other digest is ignored, with a note
    eff = narrow(f"image: '{pinned}'\n".encode(), b"", f"image: '{pinned[:-1]}b'\n".encode())
    assert eff.policy.image == pinned and eff.notes[-1].kind == "ignored"
    assert narrow(f"image: '{pinned}'\n".encode(), b"image: sandbox/agent:trixie\n").policy.image == pinned


def test_protected_paths_only_add_up():
    eff = narrow(b"workspace: {protect: [secrets]}\n", b"workspace: {protect: [.env]}\n")
    assert eff.policy.workspace.protect == BUILTIN_PROTECTED + ("docs", "secrets", ".env")


def test_layers_need_a_version_and_cannot_extend_or_set_fields_without_a_rule(monkeypatch):
    with pytest.raises(PolicyError, match="version: expected this key"):
        stack.parse_layer(b"limits: {pids: 10}\n", "org.yaml", LayerKind.ORG)
    with pytest.raises(PolicyError, match="only the base policy"):
        stack.parse_layer(b"version: 1\nextends: [untrusted]\n", "org.yaml", LayerKind.ORG)
    monkeypatch.setattr(stack, "FIELDS", {f: rule for f, rule in FIELDS.items() if f != "limits.pids"})
    with pytest.raises(PolicyError, match="limits.pids: expected a field a layer can narrow"):
        stack.parse_layer(b"version: 1\nlimits: {pids: 64}\n", "org.yaml", LayerKind.ORG)


@pytest.mark.parametrize("doc, fragment", [
    (b"version: 1\nnetwork: {netmode: none}\n", "did you mean 'mode'"),
    (b"version: 1\nlimits: {pids: 64}\nlimits: {pids: 32}\n", "duplicate key 'limits'"),
    (b"version: 1\nenv: {set: {NOTE: 'ghp_abcdefghijklmnop'}}\n", "env.set.NOTE: expected a non-secret variable"),
    (b"version: 1\ncapabilities: [SYS_ADMIN]\n", "known container escape"),
    (b"- 1\n", "expected a mapping with version: 1"),
])
def test_layers_are_validated_like_the_base(doc, fragment):
    with pytest.raises(PolicyError) as info:
        stack.parse_layer(doc, "user.yaml", LayerKind.USER)
    assert fragment in str(info.value) and "user.yaml" in str(info.value)


def test_extends_starts_from_presets_and_the_file_overrides_them(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("version: 1\nname: team\ndescription: d\nextends: [untrusted, read-only]\nlimits: {pids: 64}\n")
    eff = stack.load_base(str(path))
    assert eff.policy.name == "team" and eff.policy.source == str(path)
    assert eff.policy.workspace.access is Access.READ_ONLY and eff.policy.limits.pids == 64
    assert [layer.kind for layer in eff.layers] == [LayerKind.PRESET, LayerKind.PRESET, LayerKind.BASE]
    decided = {d.field: d.decided_by for d in eff.decisions}
    assert decided["limits.pids"] == f"policy {path}" and decided["workspace.access"].startswith("preset ")
    # The base is the user's own choice: "the ci preset plus my model API host" is a small file.
    path.write_text("version: 1\nname: team\ndescription: d\nextends: [ci]\nnetwork: {allow: [api.example.com]}\n"
                    "workspace: {access: read-only}\n")
    eff = stack.load_base(str(path))
    assert [str(r) for r in eff.policy.network.allow] == ["api.example.com"]
    assert [(n.field, n.kind) for n in eff.notes] == [("network.allow", "widened")]   # read-only narrows: no note
    path.write_text("version: 1\nname: team\ndescription: d\nextends: [read-only]\nworkspace: {access: read-write}\n")
    assert stack.load_base(str(path)).policy.workspace.access is Access.READ_WRITE
    path.write_text("version: 1\nname: team\ndescription: d\nextends: [/etc/passwd]\n")
    with pytest.raises(PolicyError, match="extends\\[0\\]"):
        stack.load_base(str(path))


def test_a_single_file_keeps_its_digest_and_more_layers_get_a_combined_one():
    policy, prior = base()
    assert prior.policy.digest == policy.digest
    assert narrow(b"limits: {pids: 64}\n").policy.digest not in (policy.digest, "")


@pytest.fixture
def host_env(tmp_path, monkeypatch):
    """Org, user and state locations of this test only."""
    for name in ("config", "state"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(tmp_path / "org.yaml"))
    (tmp_path / "org.yaml").write_text("version: 1\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    return tmp_path


def build(ws, **kwargs):
    prior = stack.load_base("untrusted")
    return stack.build(prior.policy, prior, str(ws), **kwargs)


def test_stack_applies_org_then_user_then_flags(host_env):
    (host_env / "org.yaml").write_text("version: 1\nlimits: {memory: 1g, timeout: 20m}\n")
    (host_env / "config" / "sandbox").mkdir()
    (host_env / "config" / "sandbox" / "policy.yaml").write_text("version: 1\nlimits: {pids: 100}\n")
    eff = build(host_env / "ws", timeout="5m").effective
    assert [layer.kind for layer in eff.layers] == [LayerKind.BASE, LayerKind.ORG, LayerKind.USER, LayerKind.FLAGS]
    assert (eff.policy.limits.memory_bytes, eff.policy.limits.pids, eff.policy.limits.timeout_seconds) == (1 << 30, 100, 300)


def test_an_explicit_request_a_ceiling_removes_is_a_note_and_under_ci_an_error(host_env, monkeypatch):
    (host_env / "org.yaml").write_text("version: 1\nlimits: {timeout: 20m}\n")
    monkeypatch.delenv("CI", raising=False)
    result = build(host_env / "ws", timeout="1h")
    assert result.effective.policy.limits.timeout_seconds == 20 * 60
    assert any(n.startswith("ceiling: command line --timeout: limits.timeout: asked 1h") and "left 20m" in n
               for n in result.notes), result.notes
    with pytest.raises(PolicyError, match="limits.timeout: expected what the command line asked: 1h"):
        build(host_env / "ws", timeout="1h", strict=True)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(PolicyError, match="a ceiling left 20m"):
        build(host_env / "ws", timeout="1h")


def test_a_named_org_policy_that_is_missing_is_an_error(host_env):
    os.remove(host_env / "org.yaml")
    with pytest.raises(PolicyError, match="org.yaml: expected a readable regular file, found no such file"):
        build(host_env / "ws")


def test_hooks_path_inside_the_workspace_is_protected(host_env):
    ws = host_env / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "config").write_text('[core]\n\tbare = false\n\thooksPath = "tools/hooks" ; team hooks\n'
                                        "[include]\n\tpath = ../repo.gitconfig\n")
    result = build(ws)
    assert result.effective.policy.workspace.protect[-2:] == ("tools/hooks", "repo.gitconfig")
    git = [layer for layer in result.effective.layers if layer.kind is LayerKind.GIT]
    assert git and git[0].file == str(ws / ".git" / "config")


def test_hooks_path_outside_the_workspace_is_a_note_and_at_its_root_a_refusal(host_env):
    ws = host_env / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / ".git" / "config").write_text("[core]\n\thooksPath = /opt/hooks\n")
    assert any("points outside the workspace" in n for n in build(ws).notes)
    (ws / ".git" / "config").write_text("[core]\n\thooksPath = .\n")
    with pytest.raises(PolicyError, match="core.hooksPath: expected a hooks directory below the workspace root"):
        build(ws)


def test_a_relative_global_hooks_path_is_protected_in_every_workspace(host_env):
    (host_env / "config" / "git").mkdir()
    (host_env / "config" / "git" / "config").write_text("[core]\n    hooksPath = .githooks\n")
    assert ".githooks" in build(host_env / "ws").effective.policy.workspace.protect


def test_show_layers_table_names_the_deciding_layer():
    text = layers.layers_table(narrow(b"limits: {pids: 64}\n"))
    assert "1. policy base.yaml" in text and "2. org org.yaml" in text
    row = next(line for line in text.splitlines() if line.startswith("limits.pids"))
    assert "minimum" in row and "org org.yaml" in row and row.endswith("64")


@pytest.mark.parametrize("preset", ["untrusted", "read-only", "ci", "devcontainer"])
def test_the_example_org_ceiling_composes_with_every_preset(preset, tmp_path, monkeypatch):
    from launcher.policy.allowlist import parse_rule

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", os.path.join(root, "examples", "team", "org-policy.yaml"))
    monkeypatch.delenv("CI", raising=False)
    org = [parse_rule(r, False) for r in ["pypi.org", "files.pythonhosted.org", "github.com", "codeload.github.com",
                                          "*.example.com"]]
    base_ = stack.load_base(preset)
    if base_.policy.network.mode is NetworkMode.PROXY:   # as a pipeline would: its model API host
        from launcher.policy.policy import with_allowed
        policy = with_allowed(base_.policy, ("api.example.com",))
    else:
        policy = base_.policy
    eff = stack.build(policy, base_, str(tmp_path)).effective.policy
    assert all(any(layers.covers(o, r) for o in org) for r in eff.network.allow)
    assert eff.limits.memory_bytes == min(base_.policy.limits.memory_bytes, 8 * 1024 ** 3)
    assert eff.limits.timeout_seconds == min(base_.policy.limits.timeout_seconds, 4 * 3600)
    assert {"deploy", ".pre-commit-config.yaml"} <= set(eff.workspace.protect)
    if base_.policy.network.mode is NetworkMode.PROXY:
        assert "api.example.com" in [str(r) for r in eff.network.allow]


def test_an_allow_beyond_the_org_ceiling_is_a_note_and_an_error_in_ci(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "SANDBOX_ORG_POLICY": os.path.join(root, "examples", "team", "org-policy.yaml")}
    env.pop("CI", None)
    args = [sys.executable, "-m", "launcher", "compile", "-p", "ci", "-w", str(tmp_path),
            "--allow", "api.example.com", "--allow", "evil.example.net"]
    relaxed = subprocess.run(args, capture_output=True, text=True, env=env)
    assert relaxed.returncode == 0, relaxed.stderr
    assert "ceiling: org" in relaxed.stderr and "evil.example.net (--allow)" in relaxed.stderr
    strict = subprocess.run(args, capture_output=True, text=True, env={**env, "CI": "true"})
    assert strict.returncode == 120 and "expected what the command line asked: evil.example.net" in strict.stderr
