"""Rules per request (network.allow[].http, issue 42): parsing, the errors `check` gives for bad
input, the path normalisation the proxy's rule helper uses, and how layers narrow them."""

from __future__ import annotations

import pytest

from launcher.policy.allowlist import parse_rule
from launcher.policy.httprules import HttpRule, meet, normalise, refusal
from test_cli_inputs import place, policy_file, run_process  # noqa: F401 - a fixture

RULE = HttpRule(methods=("GET", "HEAD"), paths=("/repos/acme/",))


def test_an_entry_with_http_parses_into_a_rule():
    rule = parse_rule({"host": "api.example.com", "http": {"methods": ["get", "HEAD"], "paths": ["/repos/acme/"]}})
    assert rule.http == HttpRule(methods=("GET", "HEAD"), paths=("/repos/acme/",), mode="enforce")
    assert str(rule) == "api.example.com [GET/HEAD /repos/acme/]"
    assert parse_rule({"host": "api.example.com"}).http is None   # a tunnel, as before


@pytest.mark.parametrize("path, normal", [
    ("/repos/acme/x", "/repos/acme/x"),
    ("/repos/acme/../other", "/repos/other"),
    ("/repos/acme/%2e%2e/other", "/repos/other"),
    ("/repos/acme/%252e%252e/other", "/repos/other"),   # decoded twice: a server that decodes twice
    ("/repos/acme%2f..%2f..%2fother", "/other"),
    ("//repos///acme/./x", "/repos/acme/x"),
    ("/repos/acme;x=1/../../other", "/other"),
    ("/repos/acme/..;/..;/other", "/other"),
    ("/repos\\acme\\..\\..\\other", "/other"),
    ("/repos/acme/x?y=/../..", "/repos/acme/x"),
    ("/../etc", None),
    ("/a%00b", None),
])
def test_paths_are_normalised_the_most_permissive_way(path, normal):
    assert normalise(path) == normal


@pytest.mark.parametrize("method, path, reason", [
    ("GET", "/repos/acme/x", ""),
    ("get", "/repos/acme/x", ""),
    ("head", "/repos/acme", ""),
    ("POST", "/repos/acme/x", "method POST not allowed (allowed: GET, HEAD)"),
    ("GET", "/repos/acmex", "path /repos/acmex is outside /repos/acme/"),
    ("GET", "/repos/acme/%2e%2e/other", "path /repos/other is outside /repos/acme/"),
    ("GET", "/repos//acme/./x", ""),
    ("GET", "/repos/acme/..%2f..%2fx", "path /x is outside /repos/acme/"),
    ("GET", "/../x", "path climbs above / or holds a control character"),
])
def test_a_request_is_refused_with_a_one_line_reason(method, path, reason):
    assert refusal(RULE, method, path) == reason


@pytest.mark.parametrize("body, said", [
    ("{host: git.example.com:22, http: {methods: [GET]}}", "network.allow[0].http: expected an HTTP port"),
    ("{host: api.example.com, http: {methods: [GET, FETCH]}}", "network.allow[0].http.methods[1]: expected an HTTP method"),
    ("{host: api.example.com, http: {paths: [repos/acme/]}}", "network.allow[0].http.paths[0]: expected a path prefix "
                                                              "starting with /"),
    ("{host: api.example.com, http: {paths: ['/a/../b']}}", "network.allow[0].http.paths[0]: expected a plain path prefix"),
    ("{host: api.example.com, http: {mode: block}}", "network.allow[0].http.mode: expected mode enforce"),
    ("{host: api.example.com, http: {method: [GET]}}", "network.allow[0].http: expected {methods"),
])
def test_check_names_file_key_expected_and_hint(body, said, place):  # noqa: F811
    done = policy_file(place, f"network: {{mode: proxy, allow: [{body}]}}\n")
    assert done.exit_code == 120 and said in done.stdout, done.stdout
    assert "p.yaml" in done.stdout and "hint: for example" in done.stdout and "Traceback" not in done.stdout


def test_a_real_process_gives_the_error_without_a_traceback(place):  # noqa: F811
    (place / "p.yaml").write_text("version: 1\nname: x\ndescription: d\n"
                                  "network: {mode: proxy, allow: [{host: a.example.com, http: {methods: [YEET]}}]}\n")
    done = run_process("check", "./p.yaml", cwd=place)
    assert done.returncode == 120 and "network.allow[0].http.methods[0]" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_layers_narrow_rules_per_request():
    tunnel, get = None, HttpRule(methods=("GET", "HEAD"), paths=("/repos/",))
    assert meet(tunnel, get) == get
    narrowed = meet(get, HttpRule(methods=("GET", "POST"), paths=("/repos/acme/",), mode="audit"))
    assert narrowed == HttpRule(methods=("GET",), paths=("/repos/acme/",), mode="enforce")
    assert meet(get, HttpRule(methods=("POST",))) is False



def test_check_accepts_a_rule_and_a_file_for_another_tool_refuses_it(place):  # noqa: F811
    done = policy_file(place, "network: {mode: proxy, allow: [{host: api.example.com, http: {methods: [GET]}}]}\n")
    assert done.exit_code == 0, done.stdout
    from test_cli_inputs import run

    done = run("compile", "-p", "./p.yaml", "-w", "ws", "--format", "argv", cwd=place)
    assert done.exit_code == 120 and "network.allow[0].http" in done.stderr and "sandbox up" in done.stderr, done.stderr


HELPER = __import__("pathlib").Path(__file__).parent.parent / "images" / "proxy" / "sandbox-http-rules"


def test_the_proxys_rule_helper_judges_as_the_launcher_does(tmp_path):
    """images/proxy/sandbox-http-rules (what Squid asks) and launcher/httprules.py (what the docs
    and tests reason with) give the same verdict and reason, Squid's URL-escaping included."""
    import subprocess
    import sys
    from urllib.parse import quote

    from launcher.plan.squidconf import http_rules_file
    from launcher.policy.allowlist import AllowRule

    audit = HttpRule(methods=("GET",), paths=("/",), mode="audit")
    rules = (AllowRule(host="a.test", wildcard=False, ports=(443,), http=RULE),
             AllowRule(host="b.test", wildcard=False, ports=(443,), http=audit))
    (tmp_path / "rules").write_text(http_rules_file(rules))
    cases = [(m, p) for m, p, _ in [("GET", "/repos/acme/x", ""), ("post", "/repos/acme/x", ""),
                                    ("GET", "/repos/acme/%252e%252e/x", ""), ("GET", "/repos/acme;a/../../b", ""),
                                    ("DELETE", "/repos/acme", ""), ("GET", "/../x", "")]]
    lines = "".join(f"{quote(m)} {quote('https://a.test' + p, safe='')} {i}\n" for m, p in cases for i in (0, 1))
    out = subprocess.run([sys.executable, str(HELPER), str(tmp_path / "rules")], input=lines, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    for (method, path), (enforced, audited) in zip(cases, zip(out[0::2], out[1::2])):
        reason = refusal(RULE, method, path)
        assert enforced == (f'ERR message="{reason}" log="refused: {reason}"' if reason else "OK"), (method, path)
        other = refusal(audit, method, path)
        assert audited == (f'OK log="would refuse: {other}"' if other else "OK"), (method, path)
    bad = subprocess.run([sys.executable, str(HELPER), str(tmp_path / "rules")], input="GET /x 7\n",
                         capture_output=True, text=True).stdout
    assert bad.startswith("ERR "), bad   # a lookup it cannot read is refused, never passed


def test_check_warns_about_audit_mode(place):  # noqa: F811
    done = policy_file(place, "network: {mode: proxy, allow: [{host: api.example.com, http: {mode: audit}}]}\n")
    assert done.exit_code == 0 and "warning: network.allow[0].http.mode: " in done.stdout, done.stdout
    assert "audit mode enforces nothing" in done.stdout
