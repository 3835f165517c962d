"""Loading and validating policy files: every problem reported with file, key path and a hint."""

from __future__ import annotations

import pytest

from conftest import preset
from launcher import resources
from launcher.errors import PolicyError
from launcher.policy.model import BUILTIN_PROTECTED, Access, NetworkMode
from launcher.policy.policy import parse_policy

MINIMAL = b"version: 1\nname: t\ndescription: test policy\n"


def problems(text: bytes) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    return [str(p) for p in info.value.problems]


def test_minimal_policy_gets_safe_defaults():
    policy = parse_policy(MINIMAL, "p.yaml")
    assert policy.workspace.access is Access.READ_ONLY
    assert policy.network.mode is NetworkMode.NONE and policy.network.allow == ()
    assert policy.capabilities == ()
    assert policy.env.pass_names == () and policy.env.set_values == ()
    assert policy.workspace.protect == BUILTIN_PROTECTED
    assert policy.limits.pids == 256 and policy.limits.memory_bytes == 2 * 1024 ** 3


@pytest.mark.parametrize("name", resources.preset_names())
def test_every_preset_loads_and_starts_with_name_and_description(name):
    text = resources.preset_path(name).read_text()
    assert text.startswith(f"name: {name}\ndescription: ")
    assert preset(name).name == name


def test_presets_are_the_documented_ones():
    assert {"untrusted", "read-only"} <= set(resources.preset_names())
    assert preset("untrusted").workspace.access is Access.READ_WRITE
    assert preset("read-only").workspace.access is Access.READ_ONLY


def test_unknown_key_gets_did_you_mean():
    found = problems(MINIMAL + b"netwrok: {mode: none}\n")
    assert found == ["p.yaml: netwrok: expected a known key, found unknown key 'netwrok'\n    hint: did you mean 'network'?"]


def test_every_problem_is_reported_with_its_key_path():
    found = problems(b"version: 2\nname: t\nlimits: {pids: lots, memroy: 1g}\nmounts: [{source: /x}]\n")
    text = "\n".join(found)
    for expected in ("version: expected one of 1", "limits.pids: expected an integer, found a string ('lots')",
                     "limits.memroy", "did you mean 'memory'", "mounts[0].target: expected this key",
                     "description: expected this key"):
        assert expected in text
    assert len(found) == 5


def test_duplicate_keys_are_an_error():
    assert "duplicate key 'name'" in problems(MINIMAL + b"name: again\n")[0]


def test_aliases_are_refused():
    assert "aliases" in problems(b"a: &x [1]\nb: *x\n")[0]


def test_not_utf8_and_huge_files_are_refused():
    assert "UTF-8" in problems(b"name: \xff\n")[0]
    assert "bytes" in problems(b"#" * 300_000)[0]


def test_not_a_mapping():
    assert "(top level): expected a mapping, found a list" in problems(b"- 1\n")[0]


@pytest.mark.parametrize("entry, fragment", [
    ("https://api.example.com", "not a URL"),
    ("api.example.com/v1", "no path"),
    ("*", "valid host name"),
    ("*.com", "narrower wildcard"),
    ("*.co.uk", "narrower wildcard"),
    ("*.github.io", "narrower wildcard"),
    ("a.*.example.com", "wildcard only as the first label"),
    ("10.0.0.1", "IP literals need"),
    ("[::1]:443", "IPv6"),
    ("example.com:0", "port between"),
    ("exa_mple.com", "valid host name"),
])
def test_malformed_or_over_broad_allow_entries_are_refused(entry, fragment):
    text = f"network: {{mode: proxy, allow: ['{entry}']}}\n".encode()
    assert fragment in "\n".join(problems(MINIMAL + text))


def test_allow_entries_parse_into_rules():
    policy = parse_policy(MINIMAL + b"network: {mode: proxy, allow: [api.example.com, '*.pypi.org', 'git.example.com:8443', "
                                    b"'10.1.2.3:443'], allow_ip_literals: true}\n", "p.yaml")
    rules = policy.network.allow
    assert [str(r) for r in rules] == ["api.example.com", "*.pypi.org", "git.example.com:8443", "10.1.2.3:443"]
    assert rules[1].matches("files.pypi.org", 443) and not rules[1].matches("pypi.org", 443)
    assert not rules[2].matches("git.example.com", 443) and rules[2].matches("git.example.com", 8443)


def test_allow_needs_proxy_mode():
    assert "network.allow: expected no entries in mode none" in problems(MINIMAL + b"network: {allow: [a.example.com]}\n")[0]


@pytest.mark.parametrize("extra, fragment", [
    (b"user: '0:0'\n", "user: expected a non-root uid:gid"),
    (b"capabilities: [SYS_ADMIN]\n", "SYS_ADMIN is a known container escape"),
    (b"capabilities: [FLY]\n", "expected a Linux capability name"),
    (b"env: {pass: [GITHUB_TOKEN]}\n", "env.pass[0]: expected a non-secret variable name"),
    (b"env: {pass: [DOCKER_HOST]}\n", "env.pass[0]"),
    (b"env: {set: {NOTE: 'ghp_abcdefghijklmnop'}}\n", "env.set.NOTE: expected a non-secret variable"),
    (b"env: {set: {NOTE: \"a\\nb\"}}\n", "single-line"),
    (b"tmpfs: [{target: /proc/x}]\n", "tmpfs[0].target: expected a path outside"),
    (b"tmpfs: [{target: /tmp/../etc}]\n", "normalised absolute path"),
    (b"tmpfs: [{target: /tmp}, {target: /tmp}]\n", "also used by tmpfs[0].target"),
    (b"workspace: {protect: [../outside]}\n", "workspace.protect[0]"),
    (b"limits: {memory: 1k}\n", "limits.memory: expected at least 16m"),
])
def test_semantic_refusals(extra, fragment):
    assert fragment in "\n".join(problems(MINIMAL + extra))


def test_secret_value_is_never_printed():
    text = "\n".join(problems(MINIMAL + b"env: {set: {NOTE: 'AKIAABCDEFGHIJKLMNOP'}}\n"))
    assert "AKIA" not in text and "env.set.NOTE" in text


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(PolicyError) as info:
        preset("no-such-preset")
    assert "untrusted" in str(info.value)


def test_missing_file():
    with pytest.raises(PolicyError) as info:
        preset("/nonexistent/policy.yaml")
    assert "readable policy file" in str(info.value)


def test_privileged_and_host_namespaces_cannot_be_expressed():
    for extra in (b"privileged: true\n", b"network: {mode: host}\n", b"pid: host\n", b"devices: [/dev/sda]\n"):
        assert problems(MINIMAL + extra)


def test_a_document_that_extends_cannot_be_read_alone():
    """The only loader is the stack's: a policy read without what it extends would keep only its
    own fields (the old goldens pinned untrusted-gvisor as a read-only bind workspace that way)."""
    data = (resources.preset_path("untrusted-gvisor")).read_bytes()
    with pytest.raises(PolicyError) as info:
        parse_policy(data, "untrusted-gvisor.yaml")
    assert "extends" in str(info.value) and "load_base" in str(info.value)
    gvisor, untrusted = preset("untrusted-gvisor"), preset("untrusted")
    assert gvisor.workspace == untrusted.workspace and gvisor.runtime is not untrusted.runtime
