"""Secrets injected by the proxy (pure parts): validation, layering, and a plan that names where a
value comes from but never holds it. The engine-backed leak search is in test_secrets_engine.py."""

from __future__ import annotations

import json

import pytest

from conftest import fake_facts
from launcher.check import explain
from launcher.errors import PolicyError
from launcher.pipeline import stack
from launcher.plan.compiler import compile_policy
from launcher.policy import layers
from launcher.policy.layers import LayerKind, full_layer
from launcher.policy.policy import parse_policy
from launcher.targets import argv as render

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
    ('{name: m, env: K, upstream: "https://a.test", header: "x-api-key: %{Host}>h {value}"}', "no quote, backslash or other brace"),
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
    changed = narrow(keep.replace(b"api.example.com", b"evil.example.com"))   # another upstream: not in both
    assert changed.policy.secrets == () and [n.field for n in changed.notes] == ["secrets"]


def test_explain_says_the_proxy_enforces_secrets():
    base = policy()
    eff = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    row = next(r for r in explain.rows(eff) if r.field == "secrets")
    assert row.enforcement.component is explain.Component.PROXY and "model" in row.value
    assert "MODEL_API_KEY" in row.value   # where it comes from, never a value


def test_check_warns_about_a_secret_sent_without_tls(tmp_path):
    from launcher.check import lintstack

    path = tmp_path / "p.yaml"
    path.write_bytes(BASE)
    findings, _ = lintstack.check((str(path),), str(tmp_path))
    warned = [f for f in findings if f.code == "secret-cleartext"]
    assert [f.path for f in warned] == ["secrets[1].upstream"] and "search" in warned[0].message


# ---- ca_file: the CA(s) the proxy trusts for an https:// upstream instead of its system CAs

# A throwaway test CA's certificate (its key was discarded): public data, as a CA bundle is.
TEST_CA = """-----BEGIN CERTIFICATE-----
MIIBkzCCATmgAwIBAgIUKfCnu9xz/6GQjXdQr/M3UQfNJk8wCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUc2FuZGJveCB0ZXN0IGdvb2QgQ0EwHhcNMjYxMTMwMjMxMzU2
WhcNMjYxMjAyMjMxMzU2WjAfMR0wGwYDVQQDDBRzYW5kYm94IHRlc3QgZ29vZCBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABHniIJYEz0M9ruU2p8sgney9UL92
WOXuYD2723mbCEZi1BFPpmB0+elJYLxwKS3pPOmQ6IatoFzodXemc4+HJS6jUzBR
MB0GA1UdDgQWBBQi6x9yPbdwX/VLd+o+INa2nU+fcTAfBgNVHSMEGDAWgBQi6x9y
PbdwX/VLd+o+INa2nU+fcTAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gA
MEUCIQDPebwZNdelpOh3PXuK/pmEYt3PRThHPvMPvkUd/jBhzwIgK3bYxrgzZSIO
HKko3xDlTE21vEAMxiRllAuo7EQMjqY=
-----END CERTIFICATE-----
"""
WITH_CA = BASE.replace(b'header: "Authorization: Bearer {value}"}',
                       b'header: "Authorization: Bearer {value}", ca_file: /etc/company-ca.pem}')


def ca_facts(data: bytes, kind: str = "file"):
    from launcher.host.hostpaths import PathFact

    return fake_facts(ca_files=[(PathFact(given="/etc/company-ca.pem", real="/etc/company-ca.pem", kind=kind), data)])


def test_a_ca_file_is_the_only_ca_the_proxy_trusts_for_that_upstream():
    import base64

    from launcher.plan.plan import proxy_env
    from launcher.targets import compose

    comment = b"# Issuer: Company Root CA \xc3\xa9\n"   # text around the block is dropped
    plan = compile_policy(policy(WITH_CA), ca_facts(comment + TEST_CA.encode() + b"\n" + TEST_CA.encode()))
    model, search = plan.proxy.secrets
    assert (model.ca_file, model.ca_pem) == ("/etc/company-ca.pem", TEST_CA + TEST_CA) and search.ca_pem == ""
    assert "forceddomain=api.example.com tls tls-default-ca=off tls-cafile=/run/squid/ca-0.pem\n" in plan.proxy.config
    env = proxy_env(plan.proxy)
    assert base64.b64decode(env["SANDBOX_CA_0"]).decode() == model.ca_pem and "SANDBOX_CA_1" not in env
    assert compose.to_compose(plan)["services"]["proxy"]["environment"]["SANDBOX_CA_0"] == env["SANDBOX_CA_0"]
    assert f"SANDBOX_CA_0={env['SANDBOX_CA_0']}" in render.argv_text(plan)
    # without ca_file: the system CAs, as before
    assert "forceddomain=api.example.com tls\n" in compile_policy(policy(), fake_facts()).proxy.config


def test_a_ca_file_needs_an_https_upstream():
    text = BASE.replace(b'header: "x-api-key: {value}"}', b'header: "x-api-key: {value}", ca_file: ca.pem}')
    message = refused(text)
    assert "secrets[1].ca_file: expected an https:// upstream, found upstream 'http://search.test:8080/'" in message
    assert "use https:// or drop ca_file" in message


@pytest.mark.parametrize("data, kind, fragment", [
    (b"", "missing", "/etc/company-ca.pem: no such file"),
    (b"", "dir", "a directory, not a file"),
    (b"", "other", "a FIFO or device, not a regular file"),
    (TEST_CA.encode() + b"#" * (256 * 1024), "file", "more than 256 KiB"),
    (b"just some text\n", "file", "no -----BEGIN CERTIFICATE----- block"),
    (TEST_CA.encode() + b"-----BEGIN PRIVATE KEY-----\nMIG...\n-----END PRIVATE KEY-----\n", "file", "a private key"),
    (TEST_CA.replace("MIIBkz", "AAAAAA").encode(), "file", "a certificate OpenSSL cannot read"),
])
def test_an_unusable_ca_file_is_refused_with_the_key_path(data, kind, fragment):
    with pytest.raises(PolicyError) as info:
        compile_policy(policy(WITH_CA), ca_facts(data, kind))
    message = str(info.value)
    assert "secrets[0].ca_file: expected a PEM file of CA certificates (at most 256 KiB)" in message
    assert fragment in message and "the CA certificate(s) that sign the upstream's certificate" in message


def test_the_host_reads_a_ca_file_and_the_cli_refuses_a_bad_one_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys

    from launcher.host import hostfacts

    ca, ws = tmp_path / "ca.pem", tmp_path / "ws"
    ws.mkdir()
    ca.write_text(TEST_CA)
    text = WITH_CA.replace(b"/etc/company-ca.pem", str(ca).encode())
    parsed = policy(text)
    plan = compile_policy(parsed, hostfacts.gather(parsed, str(ws), "vol"))
    assert plan.proxy.secrets[0].ca_pem == TEST_CA
    os.mkfifo(tmp_path / "fifo")   # never opened: it could hang the launcher
    for bad, fragment in ((tmp_path / "none.pem", "no such file"), (tmp_path / "fifo", "a FIFO or device, not a regular file")):
        (tmp_path / "p.yaml").write_bytes(WITH_CA.replace(b"/etc/company-ca.pem", str(bad).encode()))
        result = subprocess.run([sys.executable, "-m", "launcher", "compile", "-p", str(tmp_path / "p.yaml"),
                                 "-w", str(ws)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 120 and "Traceback" not in result.stderr, result.stderr
        assert "secrets[0].ca_file" in result.stderr and fragment in result.stderr


def test_a_layer_may_not_change_a_secrets_ca_file():
    base = policy(WITH_CA)
    prior = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    entry = b'{name: model, env: MODEL_API_KEY, upstream: "https://api.example.com", header: "Authorization: Bearer {value}"'
    layer = stack.parse_layer(b"version: 1\nsecrets:\n  - " + entry + b", ca_file: /tmp/evil.pem}\n", "org.yaml", LayerKind.ORG)
    changed = layers.effective(base, [layer], prior=prior)   # another CA is another secret: dropped, with a note
    assert changed.policy.secrets == () and [n.field for n in changed.notes] == ["secrets"]
    kept = stack.parse_layer(b"version: 1\nsecrets:\n  - " + entry + b", ca_file: /etc/company-ca.pem}\n", "org.yaml",
                             LayerKind.ORG)
    assert layers.effective(base, [kept], prior=prior).policy.secrets[0].ca_file == "/etc/company-ca.pem"
