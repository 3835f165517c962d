"""Secrets injected by the proxy (pure parts): validation, layering, and a plan that names where a
value comes from but never holds it. The engine-backed leak search is in test_secrets_engine.py."""

from __future__ import annotations

import json

import pytest

from conftest import fake_facts
from launcher import explain, layers, render, stack
from launcher.compiler import compile_policy
from launcher.errors import PolicyError
from launcher.layers import LayerKind, full_layer
from launcher.policy import parse_policy

BASE = b"""version: 1
name: secrets
description: a policy with injected secrets
workspace: {access: read-write}
network: {mode: proxy, allow: [api.example.com]}
secrets:
  - {name: model, env: MODEL_API_KEY, upstream: "https://api.example.com", header: "Authorization: Bearer {value}"}
  - {name: search, file: ~/.config/search/key, upstream: "http://search.test:8080/", header: "x-api-key: {value}"}
"""


def policy(text: bytes = BASE):
    return parse_policy(text, "secrets.yaml")


def refused(text: bytes) -> str:
    with pytest.raises(PolicyError) as info:
        policy(text)
    return str(info.value)


def test_a_valid_secrets_entry_is_typed():
    model, search = policy().secrets
    assert (model.name, model.env, model.file, model.upstream) == ("model", "MODEL_API_KEY", "", "https://api.example.com")
    assert search.upstream == "http://search.test:8080" and search.header == "x-api-key: {value}"


@pytest.mark.parametrize("entry, fragment", [
    ('{name: m, env: K, file: /k, upstream: "https://a.test", header: "x-api-key: {value}"}', "exactly one of env and file"),
    ('{name: m, upstream: "https://a.test", header: "x-api-key: {value}"}', "found neither"),
    ('{name: m, env: K, upstream: "https://a.test/v1", header: "x-api-key: {value}"}', "without path"),
    ('{name: m, env: K, upstream: "https://*.a.test", header: "x-api-key: {value}"}', "secrets[0].upstream"),
    ('{name: m, env: K, upstream: "https://10.0.0.1", header: "x-api-key: {value}"}', "secrets[0].upstream"),
    ('{name: m, env: K, upstream: "ftp://a.test", header: "x-api-key: {value}"}', "secrets[0].upstream"),
    ('{name: m, env: K, upstream: "https://a.test", header: "x-api-key: {value} {value}"}', "{value} exactly once"),
    ('{name: m, env: K, upstream: "https://a.test", header: "x-api-key: \\"{value}\\""}', "no quote"),
    ('{name: m, env: K, upstream: "https://a.test", header: "Host: {value}"}', "a header name"),
    ('{name: m, env: K, upstream: "https://a.test", header: "x-api-key {value}"}', "secrets[0].header"),
    ('{name: api_token, env: K, upstream: "https://a.test", header: "x-api-key: {value}"}', "SANDBOX_ENDPOINT_API_TOKEN"),
    ('{name: M, env: K, upstream: "https://a.test", header: "x-api-key: {value}"}', "secrets[0].name"),
    ('{name: m, env: K, upstream: "https://a.test", header: "x-api-key: {value}", value: x}', "unknown key 'value'"),
])
def test_bad_entries_are_refused_with_the_key_path(entry, fragment):
    text = (b"version: 1\nname: t\ndescription: t\nnetwork: {mode: proxy}\nsecrets:\n  - " + entry.encode() + b"\n")
    assert fragment in refused(text)


def test_secrets_need_proxy_mode_and_unique_names():
    entry = b'{name: m, env: K, upstream: "https://a.test", header: "x-api-key: {value}"}'
    message = refused(b"version: 1\nname: t\ndescription: t\nsecrets:\n  - " + entry + b"\n")
    assert "secrets[0]: expected network.mode proxy, found mode none" in message
    message = refused(b"version: 1\nname: t\ndescription: t\nnetwork: {mode: proxy}\nsecrets:\n  - " + entry
                      + b"\n  - " + entry + b"\n")
    assert "secrets[1].name: expected a name used once" in message


def test_the_plan_names_the_source_and_the_endpoint_never_a_value(monkeypatch):
    monkeypatch.setenv("MODEL_API_KEY", "value-that-must-not-appear")
    plan = compile_policy(policy(), fake_facts())
    text = json.dumps(render.plan_to_dict(plan)) + render.argv_text(plan)
    assert "value-that-must-not-appear" not in text
    env = dict(plan.container.env)
    assert env["SANDBOX_ENDPOINT_MODEL"] == "http://sandbox-proxy:3130"
    assert env["SANDBOX_ENDPOINT_SEARCH"] == "http://sandbox-proxy:3131"
    assert "sandbox-proxy" in env["NO_PROXY"].split(",") and "sandbox-proxy" in env["no_proxy"].split(",")
    model, search = plan.proxy.secrets
    assert (model.var, model.from_env, model.scheme, model.host, model.upstream_port) == (
        "SANDBOX_SECRET_0", "MODEL_API_KEY", "https", "api.example.com", 443)
    assert (search.from_file, search.scheme, search.upstream_port) == ("~/.config/search/key", "http", 8080)
    config = plan.proxy.config
    assert "http_port sandbox-proxy:3130 accel defaultsite=api.example.com no-vhost name=secret0_in" in config
    assert "cache_peer api.example.com parent 443 0" in config and "forceddomain=api.example.com tls" in config
    assert 'request_header_add Authorization "Bearer @SANDBOX_SECRET_0@" secret0_in' in config
    assert 'request_header_add x-api-key "@SANDBOX_SECRET_1@" secret1_in' in config
    assert "request_header_access Authorization deny secret0_in" in config
    # the docker commands take the value from the caller's environment, by name only
    assert "--env SANDBOX_SECRET_0 " in render.argv_text(plan)


def test_percent_in_a_header_template_is_escaped_for_squid():
    text = BASE.replace(b"Authorization: Bearer {value}", b"x-key: 100% {value}")
    config = compile_policy(policy(text), fake_facts()).proxy.config
    assert 'request_header_add x-key "100%% @SANDBOX_SECRET_0@"' in config


def test_without_secrets_the_sandbox_environment_is_unchanged():
    plan = compile_policy(policy(BASE.split(b"secrets:")[0]), fake_facts())
    assert dict(plan.container.env)["NO_PROXY"] == "localhost,127.0.0.1"
    assert "accel" not in plan.proxy.config and plan.proxy.secrets == ()


def narrow(doc: bytes):
    base = policy()
    prior = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    layer = stack.parse_layer(b"version: 1\n" + doc, "org.yaml", LayerKind.ORG)
    return layers.effective(base, [layer], prior=prior)


def test_layers_may_keep_or_drop_secrets_but_never_add_or_change_one():
    keep = b'secrets:\n  - {name: model, env: MODEL_API_KEY, upstream: "https://api.example.com", header: "Authorization: Bearer {value}"}\n'
    assert [s.name for s in narrow(keep).policy.secrets] == ["model"]
    assert narrow(b"secrets: []\n").policy.secrets == ()
    assert narrow(b"network: {mode: none}\n").policy.secrets == ()
    with pytest.raises(PolicyError) as info:
        narrow(keep.replace(b"api.example.com", b"evil.example.com"))
    assert "org.yaml: secrets[0]" in str(info.value)


def test_explain_says_the_proxy_enforces_secrets():
    base = policy()
    eff = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    row = next(r for r in explain.rows(eff) if r.field == "secrets")
    assert row.enforcement.component is explain.Component.PROXY and "model" in row.value
    assert "MODEL_API_KEY" in row.value   # where it comes from, never a value


def test_check_warns_about_a_secret_sent_without_tls(tmp_path):
    from launcher import lint

    path = tmp_path / "p.yaml"
    path.write_bytes(BASE)
    findings, _ = lint.check((str(path),), str(tmp_path))
    warned = [f for f in findings if f.code == "secret-cleartext"]
    assert [f.path for f in warned] == ["secrets[1].upstream"] and "search" in warned[0].message
