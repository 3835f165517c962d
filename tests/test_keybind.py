"""Keys bound to their destination (secrets[].bind, issue 42 item 3), without an engine: the policy
shape and its errors, layers, the proxy's configuration and key helper, and the value kept out of
everything the launcher writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import fake_facts
from launcher.errors import PolicyError
from launcher.pipeline import stack
from launcher.plan.compiler import compile_policy
from launcher.policy import keybind, layers
from launcher.policy.layers import LayerKind, full_layer
from launcher.policy.model import KeyBinding
from launcher.policy.policy import parse_policy
from launcher.targets import argv as render
from test_cli_inputs import place, run_process  # noqa: F401 - a fixture

HELPER = Path(__file__).parent.parent / "images" / "proxy" / "sandbox-keys"
BASE = """version: 1
name: keys
description: a key bound to its destination
network:
  mode: proxy
  allow:
    - {host: api.example.com, http: {methods: [GET, POST], paths: [/v1/, /v2/]}}
    - {host: 'other.example.com:8443', http: {methods: [GET]}}
    - plain.example.com
secrets:
  - name: anthropic
    env: ANTHROPIC_API_KEY
    header: "Authorization: Bearer {value}"
    bind: {host: api.example.com, paths: [/v1/]}
"""


def policy(text: str = BASE):
    return parse_policy(text.encode(), "keys.yaml")


def refused(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        policy(text)
    return str(info.value)


def plan(text: str = BASE, nonce: str = "abc123"):
    from dataclasses import replace

    return compile_policy(policy(text), replace(fake_facts(bump_store=("/state/ca.pem", "/state/extra.pem")), nonce=nonce))


def test_a_bound_key_is_typed_with_its_variable_defaulting_to_env():
    (secret,) = policy().secrets
    assert secret.upstream == "" and secret.bind == KeyBinding(host="api.example.com", port=443, paths=("/v1/",),
                                                               variable="ANTHROPIC_API_KEY")
    other = policy(BASE.replace("bind: {host: api.example.com, paths: [/v1/]}",
                                "bind: {host: 'other.example.com:8443', variable: OTHER_KEY}"))
    assert other.secrets[0].bind == KeyBinding(host="other.example.com", port=8443, paths=("/",), variable="OTHER_KEY")


@pytest.mark.parametrize("bind, said", [
    ("{host: plain.example.com}", "secrets[0].bind.host: expected a host with http: rules in network.allow (TLS "
                                  "terminated by the proxy), found plain.example.com:443 (a plain tunnel"),
    ("{host: nowhere.example.com}", "found nowhere.example.com:443 (not allowed)"),
    ("{host: 'api.example.com:8443'}", "found api.example.com:8443 (not allowed)"),
    ("{host: '*.example.com'}", "secrets[0].bind.host: expected one exact host, not a wildcard"),
    ("{host: api.example.com, paths: [/v3/]}", "secrets[0].bind.paths: expected paths the host's http: rule allows"),
    ("{host: api.example.com, paths: [v1]}", "secrets[0].bind.paths[0]: expected a plain path prefix"),
    ("{host: api.example.com, paths: ['/v1/../v3']}", "secrets[0].bind.paths[0]: expected a plain path prefix"),
    ("{host: api.example.com, variable: HTTPS_PROXY}", "secrets[0].bind.variable: expected the agent's variable"),
    ("{host: api.example.com, variable: SANDBOX_KEY}", "secrets[0].bind.variable"),
    ("{host: api.example.com, variable: '1KEY'}", "secrets[0].bind.variable"),
    ("{paths: [/v1/]}", "secrets[0].bind.host: expected the host the key goes to"),
    ("{host: api.example.com, upstream: x}", "secrets[0].bind.upstream: expected a known key"),
])
def test_a_binding_the_proxy_cannot_serve_is_refused_with_the_key_path(bind, said):
    assert said in refused(BASE.replace("{host: api.example.com, paths: [/v1/]}", bind))


@pytest.mark.parametrize("old, new, said", [
    ('"Authorization: Bearer {value}"', '"Authorization: Bearer <{value}>"', "secrets[0].header: expected a bound key's header form"),
    ('"Authorization: Bearer {value}"', '"Authorization: Bearer \'{value}\'"', "secrets[0].header: expected a bound key's header form"),
    ('"Authorization: Bearer {value}"', '"Host: {value}"', "secrets[0].header: expected a header name"),
    ("    bind:", '    upstream: "https://api.example.com"\n    bind:', "secrets[0].upstream: expected no upstream or ca_file with bind"),
    ("    bind:", "    ca_file: ca.pem\n    bind:", "secrets[0].ca_file: expected no upstream or ca_file with bind"),
    ("    bind: {host: api.example.com, paths: [/v1/]}\n", "", "secrets[0]: expected exactly one of upstream and bind"),
    ("    env: ANTHROPIC_API_KEY", "    file: ~/key", "secrets[0].bind.variable: expected the agent's variable"),
    ("secrets:", "env: {set: {ANTHROPIC_API_KEY: x}}\nsecrets:", "secrets[0].bind.variable: expected a variable env.pass"),
])
def test_the_rest_of_a_bound_entry_is_checked_too(old, new, said):
    assert old in BASE
    assert said in refused(BASE.replace(old, new))


def test_one_variable_holds_one_placeholder():
    second = BASE + ('  - {name: second, env: OTHER, header: "x-api-key: {value}", '
                     'bind: {host: api.example.com, variable: ANTHROPIC_API_KEY}}\n')
    assert "secrets[1].bind.variable: expected a variable one binding uses" in refused(second)


def test_check_names_file_key_expected_and_hint_without_a_traceback(place):  # noqa: F811
    (place / "p.yaml").write_text(BASE.replace("{host: api.example.com, paths: [/v1/]}", "{host: plain.example.com}"))
    done = run_process("check", "./p.yaml", cwd=place)
    assert done.returncode == 120, done.stdout
    assert "p.yaml" in done.stdout and "secrets[0].bind.host" in done.stdout and "hint: add {host: plain.example.com" \
        in done.stdout and "Traceback" not in done.stdout + done.stderr


def narrow(doc: str):
    base = policy()
    prior = layers.effective(base, [full_layer(LayerKind.BASE, base)])
    layer = stack.parse_layer(("version: 1\n" + doc).encode(), "org.yaml", LayerKind.ORG)
    return layers.effective(base, [layer], prior=prior)


LAYER = ('secrets:\n  - {name: anthropic, env: ANTHROPIC_API_KEY, header: "Authorization: Bearer {value}", '
         'bind: {host: api.example.com, paths: PATHS}}\n')


def test_a_later_layer_may_narrow_or_drop_a_binding_never_widen_or_move_it():
    assert narrow(LAYER.replace("PATHS", "[/v1/messages/]")).policy.secrets[0].bind.paths == ("/v1/messages/",)
    assert narrow(LAYER.replace("PATHS", "[/]")).policy.secrets[0].bind.paths == ("/v1/",)   # not widened
    assert narrow(LAYER.replace("PATHS", "[/v2/]")).policy.secrets == ()                      # nothing in both
    assert narrow(LAYER.replace("PATHS", "[/v1/]").replace("api.example.com", "other.example.com:8443")).policy.secrets == ()
    assert narrow(LAYER.replace("PATHS", "[/v1/]").replace("paths:", "variable: OTHER_KEY, paths:")).policy.secrets == ()
    assert narrow("secrets: []\n").policy.secrets == ()
    # the host gone from a later layer's allow-list: nothing would swap the placeholder, the key goes
    assert narrow("network: {allow: [plain.example.com]}\n").policy.secrets == ()
    assert narrow("network: {allow: [{host: api.example.com, http: {methods: [GET]}}]}\n").policy.secrets != ()


def test_the_digest_and_trust_key_see_the_binding():
    from launcher.plan import trustlevel
    from launcher.plan.trustlevel import effective_digest

    wider = policy(BASE.replace("paths: [/v1/]", "paths: [/v1/, /v2/]"))
    assert effective_digest(policy()) != effective_digest(wider)
    assert trustlevel.key(policy()) != trustlevel.key(wider)


def test_the_agent_gets_a_placeholder_and_the_proxy_the_swap(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-value-that-must-not-appear")
    compiled = plan()
    env = dict(compiled.container.env)
    placeholder = env["ANTHROPIC_API_KEY"]
    assert placeholder.startswith("sandbox-placeholder-") and len(placeholder) == 52
    assert not any(k.startswith("SANDBOX_ENDPOINT_") for k in env) and env["NO_PROXY"] == "localhost,127.0.0.1"
    assert f"keyvars=ANTHROPIC_API_KEY={placeholder}" in compiled.probe.to_args()
    (secret,) = compiled.proxy.secrets
    assert (secret.var, secret.from_env, secret.port, secret.host, secret.upstream_port) == (
        "SANDBOX_SECRET_0", "ANTHROPIC_API_KEY", 0, "api.example.com", 443)
    config = compiled.proxy.config
    assert "http_port sandbox-proxy:3130" not in config and "accel" not in config   # no endpoint
    suffix = placeholder.removeprefix("sandbox-placeholder-")
    for line in ("http_access deny !keys_connect !keys_ok",
                 "acl key0_host dstdomain -n api.example.com",
                 "acl key0_port port 443",
                 f"acl key0_sent req_header Authorization ^Bearer[[:space:]]sandbox[-]placeholder[-]{suffix}$",
                 "request_header_access Authorization deny keys_https key0_host key0_port key0_sent",
                 'request_header_add Authorization "Bearer @SANDBOX_SECRET_0@" keys_https key0_host key0_port key0_sent'):
        assert line + "\n" in config, line
    assert config.index("http_access deny !keys_connect !keys_ok") < config.index("http_access allow")
    assert "%>ru %>{authorization} %>{proxy-authorization} %>{x-api-key}" in config
    assert compiled.proxy.keys.splitlines()[1] == (f"ANTHROPIC_API_KEY {placeholder} authorization "
                                                   f"Bearer%20{placeholder} api.example.com 443 /v1/")
    text = json.dumps(render.plan_to_dict(compiled)) + render.argv_text(compiled)
    assert "value-that-must-not-appear" not in text and "--env SANDBOX_SECRET_0 " in render.argv_text(compiled)


def test_each_launch_has_its_own_placeholder_and_a_file_for_another_tool_the_same_one():
    first, second = plan(nonce="aaaaaa"), plan(nonce="bbbbbb")
    assert dict(first.container.env)["ANTHROPIC_API_KEY"] != dict(second.container.env)["ANTHROPIC_API_KEY"]
    assert dict(plan(nonce="").container.env)["ANTHROPIC_API_KEY"] == dict(plan(nonce="").container.env)["ANTHROPIC_API_KEY"]


def test_a_percent_in_the_form_is_escaped_for_squid_and_kept_for_the_helper():
    config = plan(BASE.replace('"Authorization: Bearer {value}"', '"x-key: key+{value}"')).proxy.config
    assert 'request_header_add x-key "key+@SANDBOX_SECRET_0@"' in config and "^key[+]sandbox[-]placeholder" in config


# ---- the proxy's key helper, run as Squid runs it

PH = keybind.placeholder("seed", "anthropic")
OTHER = keybind.placeholder("seed", "other")
NAMES = keybind.seen_headers(["Authorization", "x-goog-api-key"])


def helper(lines: list[str]) -> list[str]:
    keys = keybind.keys_file(NAMES, [
        keybind.keys_line(KeyBinding(host="api.example.com", paths=("/v1/",), variable="ANTHROPIC_API_KEY"), PH,
                          "Authorization", f"Bearer {PH}"),
        keybind.keys_line(KeyBinding(host="g.example.com", port=8443, variable="GEMINI_API_KEY"), OTHER,
                          "x-goog-api-key", OTHER)])
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".keys") as file:
        file.write(keys)
        file.flush()
        return subprocess.run([sys.executable, str(HELPER), file.name], input="".join(lines), capture_output=True,
                              text=True, check=True).stdout.splitlines()


def lookup(url: str, **headers: str) -> str:
    """A line as Squid writes it: the URL, then each named header's value ("-" when absent), URL-escaped."""
    values = [quote(headers.get(name.replace("-", "_"), ""), safe="") or "-" for name in NAMES]
    return " ".join([quote(url, safe=""), *values, "-"]) + "\n"


CASES = [
    ("ok", lookup("https://api.example.com/v1/messages", authorization=f"Bearer {PH}"), "OK"),
    ("other key ok", lookup("https://g.example.com:8443/x", x_goog_api_key=OTHER), "OK"),
    ("no placeholder", lookup("https://anywhere.example.com/", authorization="Bearer sk-something"), "OK"),
    ("other host", lookup("https://evil.example.com/v1/", authorization=f"Bearer {PH}"),
     "placeholder of ANTHROPIC_API_KEY sent to https://evil.example.com:443: it goes only to "
     "https://api.example.com/v1/ in authorization"),
    ("plain http", lookup("http://api.example.com/v1/", authorization=f"Bearer {PH}"), "sent to http://api.example.com:80"),
    ("other port", lookup("https://api.example.com:8443/v1/", authorization=f"Bearer {PH}"), "sent to https://api.example.com:8443"),
    ("trailing dot", lookup("https://api.example.com./v1/", authorization=f"Bearer {PH}"), "sent to https://api.example.com.:443"),
    ("outside", lookup("https://api.example.com/v2/x", authorization=f"Bearer {PH}"), "sent to path /v2/x"),
    ("dots", lookup("https://api.example.com/v1/%2e%2e/v2", authorization=f"Bearer {PH}"), "sent to path /v2"),
    ("in the url", lookup(f"https://api.example.com/v1/?k={PH.upper()}", authorization=f"Bearer {PH}"), "in the URL"),
    ("another header", lookup("https://api.example.com/v1/", cookie=f"k={PH}"), "not exactly as authorization"),
    ("also another", lookup("https://api.example.com/v1/", authorization=f"Bearer {PH}", x_api_key=PH),
     "not exactly as authorization"),
    ("sent twice", lookup("https://api.example.com/v1/", authorization=f"Bearer {PH}, Bearer {PH}"), "not exactly"),
    ("no prefix", lookup("https://api.example.com/v1/", authorization=PH), "not exactly as authorization"),
    ("the other key here", lookup("https://api.example.com/v1/", authorization=f"Bearer {PH}", x_goog_api_key=OTHER),
     "placeholder of GEMINI_API_KEY sent to https://api.example.com:443"),
    ("malformed", "https%3A%2F%2Fapi.example.com%2F\n", "malformed key lookup"),
]


def test_the_key_helper_lets_the_placeholder_only_where_the_proxy_swaps_it():
    out = helper([line for _, line, _ in CASES])
    for (label, _, said), reply in zip(CASES, out):
        if said == "OK":
            assert reply == "OK", (label, reply)
        else:
            assert reply.startswith("ERR message=") and said in reply, (label, reply)
            assert 'log="refused: ' in reply or "malformed" in said, (label, reply)
    assert len(out) == len(CASES)
