"""Rules per request on a real engine (issue 42): the sandbox's own proxy terminates TLS for a host
with http: rules with a CA made for that sandbox, lets through only the allowed methods and paths
(after normalisation), refuses the rest with 403 and a one-line reason before the upstream sees a
byte, only logs them in audit mode, and verifies the upstream's certificate strictly. The upstream
is our own TLS container (certificates from a throwaway CA made in the test)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import script_upstream
from test_secrets_engine import LOG_REQUEST, SANDBOX, certs  # noqa: F401 - a fixture

pytestmark = pytest.mark.engine

# The recorder over TLS (443: api.test's certificate, 8443: wrong.test's) and plain (80): every
# request line it gets, then 200 "upstream ok".
UPSTREAM = r'''
import os, socket, ssl, tempfile, threading
''' + LOG_REQUEST + r'''
def context(name):
    folder = tempfile.mkdtemp()
    for part in ("CERT", "KEY"):
        with open(os.path.join(folder, part), "w") as out:
            out.write(os.environ[name + "_" + part])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(folder, "CERT"), os.path.join(folder, "KEY"))
    return ctx
def serve(conn, ctx, port):
    try:
        if ctx:
            conn = ctx.wrap_socket(conn, server_side=True)
        with conn:
            log_request(conn)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\nupstream ok\n")
    except (OSError, ssl.SSLError) as exc:
        print("TLS-FAIL %d %s" % (port, exc), flush=True)
def accept(sock, ctx, port):
    while True:
        threading.Thread(target=serve, args=(sock.accept()[0], ctx, port), daemon=True).start()
for port, name in ((443, "API"), (8443, "WRONG"), (80, "")):
    sock = socket.socket(); sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port)); sock.listen(16)
    threading.Thread(target=accept, args=(sock, context(name) if name else None, port), daemon=True).start()
print("READY", flush=True)
threading.Event().wait()
'''

POLICY = """version: 1
name: http-rules-test
description: rules per request against our own TLS upstream
image: sandbox/agent:bookworm-full
workspace: {access: read-write}
tmpfs: [{target: /tmp, size: 16m}]
limits: {timeout: 5m}
network:
  mode: proxy
  allow:
"""
# One curl per line of CALLS: "<label> <status> <first line of the body>".
CALLS = r"""
while read -r label args; do
  status=$(eval curl -s --max-time 20 -o /tmp/body -w '%{http_code}' $args)
  echo "$label $status $(head -n 1 /tmp/body | tr -d '\r')"
done < /workspace/calls
"""


@pytest.fixture(scope="module")
def tls_upstream(engine, certs):  # noqa: F811
    env = {"API_CERT": certs["api.test.crt"], "API_KEY": certs["api.test.key"],
           "WRONG_CERT": certs["wrong.test.crt"], "WRONG_KEY": certs["wrong.test.key"]}
    with script_upstream(engine, "http-rules", "api.test", UPSTREAM, env) as upstream:
        yield upstream


def run_calls(tls_upstream, workspace, tmp_path, certs, rules: list[str], calls: dict[str, str],  # noqa: F811
              script: str = CALLS) -> tuple[dict[str, str], str, dict, subprocess.CompletedProcess]:
    network, upstream_log, _ = tls_upstream
    (tmp_path / "good.pem").write_text(certs["good.pem"])
    (tmp_path / "other.pem").write_text(certs["other.pem"])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY + "".join(f"    - {r}\n" for r in rules))
    (workspace / "calls").write_text("".join(f"{k} {v}\n" for k, v in calls.items()))
    report = tmp_path / "report.json"
    done = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                     "--report", str(report), "--", "bash", "-c", script],
                          capture_output=True, text=True, timeout=300)
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    return seen, upstream_log(), json.loads(report.read_text()) if report.exists() else {}, done


ENFORCED = "{host: api.test, private: true, http: {methods: [GET, HEAD], paths: [/repos/acme/], ca_file: good.pem}}"
BYPASSES = {
    "post": "-X POST https://api.test/repos/acme/post",
    "lowerpost": "-X post https://api.test/repos/acme/lowerpost",
    "delete": "-X DELETE https://api.test/repos/acme/delete",
    "outside": "https://api.test/repos/other/outside",
    "prefixlike": "https://api.test/repos/acmeprefixlike",
    "dots": "--path-as-is https://api.test/repos/acme/../dots",
    "encdots": "--path-as-is https://api.test/repos/acme/%2e%2e/encdots",
    "doubleenc": "--path-as-is https://api.test/repos/acme/%252e%252e/doubleenc",
    "encslash": "--path-as-is https://api.test/repos/acme%2f..%2f..%2fencslash",
    "params": "--path-as-is 'https://api.test/repos/acme;x/../../params'",
    "plainpost": "-X POST http://api.test/repos/acme/plainpost",
}


def test_allowed_requests_pass_and_every_way_around_the_rule_gets_403_from_the_proxy(tls_upstream, workspace, tmp_path,
                                                                                    certs):  # noqa: F811
    calls = {"get": "https://api.test/repos/acme/get", "head": "-I https://api.test/repos/acme/head",
             "slashes": "--path-as-is https://api.test//repos///acme/./slashes", "plainget": "http://api.test/repos/acme/plainget",
             **BYPASSES}
    seen, log, report, done = run_calls(tls_upstream, workspace, tmp_path, certs, [ENFORCED], calls)
    assert done.returncode == 0, done.stderr
    for label in ("get", "head", "slashes", "plainget"):
        assert seen[label].startswith("200"), (label, seen)
        assert label in log, (label, log)
    for label in BYPASSES:
        status, _, body = seen[label].partition(" ")
        assert status == "403" and body.startswith("sandbox: refused by the egress policy: "), (label, seen[label])
        assert label not in log, f"{label} reached the upstream:\n{log}"
    assert seen["post"].endswith("method POST not allowed (allowed: GET, HEAD)")
    assert seen["encdots"].endswith("path /repos/encdots is outside /repos/acme/")
    reasons = [r["reason"] for r in report["egress"]["requests"] if r["reason"] != "-"]
    assert len(reasons) == len(BYPASSES) and all(r.startswith("refused: ") for r in reasons), reasons


def test_audit_mode_lets_requests_through_and_logs_what_it_would_refuse(tls_upstream, workspace, tmp_path,
                                                                       certs):  # noqa: F811
    rule = ENFORCED.replace("ca_file: good.pem", "ca_file: good.pem, mode: audit")
    seen, log, report, done = run_calls(tls_upstream, workspace, tmp_path, certs, [rule],
                                        {"get": "https://api.test/repos/acme/get", "post": BYPASSES["post"],
                                         "encdots": BYPASSES["encdots"]})
    assert done.returncode == 0, done.stderr
    assert all(seen[k].startswith("200") for k in ("get", "post", "encdots")), seen
    assert "REQ POST /repos/acme/post" in log
    reasons = sorted(r["reason"] for r in report["egress"]["requests"] if r["reason"] != "-")
    assert reasons == ["would refuse: method POST not allowed (allowed: GET, HEAD)",
                       "would refuse: path /repos/encdots is outside /repos/acme/"], reasons


def test_the_upstream_is_verified_strictly(tls_upstream, workspace, tmp_path, certs):  # noqa: F811
    """Another CA, the system CAs, or a certificate for another name: 503 from the proxy, no request."""
    rules = ["{host: api.test, private: true, http: {methods: [GET], ca_file: other.pem}}",
             "{host: 'api.test:8443', private: true, http: {methods: [GET], ca_file: good.pem}}"]
    seen, log, _, done = run_calls(tls_upstream, workspace, tmp_path, certs, rules,
                                   {"otherca": "https://api.test/otherca", "wrongname": "https://api.test:8443/wrongname"})
    assert done.returncode == 0, done.stderr
    assert seen["otherca"].startswith("503") and seen["wrongname"].startswith("503"), seen
    assert "otherca" not in log and "wrongname" not in log, log
    rules = ["{host: api.test, private: true, http: {methods: [GET]}}"]
    seen, log, _, done = run_calls(tls_upstream, workspace, tmp_path, certs, rules, {"sysca": "https://api.test/sysca"})
    assert seen["sysca"].startswith("503") and "sysca" not in log, (seen, log)


INSIDE = CALLS + r"""
echo "cafiles $(grep -c 'BEGIN CERTIFICATE' /etc/sandbox-ca/extra.pem) $(grep -l 'PRIVATE KEY' -r /etc/sandbox-ca /workspace /tmp 2>/dev/null | wc -l)"
echo "issuer $(curl -sv https://api.test/repos/acme/x -o /dev/null 2>&1 | sed -n 's/^\*  issuer: //p')"
echo "env $(env | grep -c -i 'BEGIN\|SANDBOX_HTTP\|BUMP')"
"""


def test_the_sandbox_trusts_its_own_ca_whose_key_stays_in_the_proxy(tls_upstream, workspace, tmp_path,
                                                                     certs):  # noqa: F811
    seen, log, _, done = run_calls(tls_upstream, workspace, tmp_path, certs, [ENFORCED],
                                   {"get": "https://api.test/repos/acme/get"}, script=INSIDE)
    assert done.returncode == 0, done.stderr
    assert seen["get"].startswith("200"), seen
    assert seen["cafiles"] == "1 0", seen   # the proxy's CA alone (no ca_certificates), no key anywhere inside
    assert seen["issuer"].startswith("O=sandbox; CN=sandbox egress CA "), seen
    assert seen["env"] == "0", seen
    from launcher.host import host

    left = [f for f in os.listdir(os.path.join(host.state_dir(), "cas")) if f.startswith("bump-")]
    assert not left, left   # removed with the sandbox


# ---- the probe proves it (issue 42 item 4): each check, and a tamper that removes its protection

TUNNEL = "{host: 'api.test:8443', private: true}"   # no http: rules: spliced to the upstream's own certificate


def test_the_probe_proves_interception_refusal_and_the_tunnel(tls_upstream, workspace, tmp_path, certs):  # noqa: F811
    seen, log, report, done = run_calls(tls_upstream, workspace, tmp_path, certs, [ENFORCED, TUNNEL],
                                        {"get": "https://api.test/repos/acme/get"})
    assert done.returncode == 0, done.stderr
    results = {c["id"]: c for c in report["probe"]["checks"]}
    for check in ("egress.bump_ca", "egress.http_refused", "egress.tunnel"):
        assert results[check]["verdict"] == "pass", results[check]
    assert "sandbox egress CA " in results["egress.bump_ca"]["observed"]
    assert "sandbox-probe" not in log, log   # the probe's refused requests: refused by the proxy itself


def test_a_forged_host_header_in_an_intercepted_tunnel_does_not_lift_its_rules(tls_upstream, workspace, tmp_path,
                                                                                      certs):  # noqa: F811
    """Inside the intercepted tunnel to api.test:443 (GET and HEAD only), a Host header naming
    another allowed port (api.test:8443, a plain tunnel rule) is judged by that port's rule, so it
    must go there and only there: never to the tunnel's upstream, where its rule would be lifted.
    (api.test:8443's certificate fails the proxy's verification: nothing reaches any upstream.)"""
    calls = {"forged": "-X POST -H 'Host: api.test:8443' https://api.test/repos/acme/forged",
             "forgedget": "-H 'Host: api.test:8443' https://api.test/repos/acme/forgedget",
             "get": "https://api.test/repos/acme/get"}
    seen, log, _, done = run_calls(tls_upstream, workspace, tmp_path, certs, [ENFORCED, TUNNEL], calls)
    assert done.returncode == 0, done.stderr
    assert seen["get"].startswith("200"), seen
    for label in ("forged", "forgedget"):
        assert not seen[label].startswith("200"), (label, seen)
        assert label not in log, f"{label} reached the upstream:\n{log}"


def _plan(engine, workspace, tmp_path, certs, network):  # noqa: F811
    from dataclasses import replace

    from conftest import launch_facts
    from launcher.engine import images
    from launcher.host import statefiles
    from launcher.plan import trustfiles
    from launcher.plan.compiler import compile_policy
    from launcher.policy.policy import parse_policy

    (tmp_path / "good.pem").write_text(certs["good.pem"])
    text = POLICY.replace("image: sandbox/agent:bookworm-full\n", "") + f"    - {ENFORCED}\n    - {TUNNEL}\n"
    policy = parse_policy(text.encode(), str(tmp_path / "policy.yaml"))
    facts = launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag, launched=True)
    files = trustfiles.store_files("", launch=facts.nonce)
    statefiles.write(files)
    facts = replace(facts, bump_store=(files[0].path, files[1].path))
    return compile_policy(policy, facts, egress_network=network,
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))


def _config(plan, old: str, new: str):
    from dataclasses import replace

    assert old in plan.proxy.config, old
    return replace(plan, proxy=replace(plan.proxy, config=plan.proxy.config.replace(old, new)))


HTTP_TAMPERS = {
    # no bump: the tunnel to api.test is spliced, and the upstream's own certificate comes back
    "egress.bump_ca": lambda p: _config(p, "ssl_bump bump tls_step1 allow1_host allow1_port\n", ""),
    # the rule's deny line gone: the refused method and path reach the upstream
    "egress.http_refused": lambda p: _config(p, "http_access deny allow1_host allow1_port !CONNECT !http1_rule\n", ""),
    # the tunnel host bumped too
    "egress.tunnel": lambda p: _config(p, "ssl_bump peek tls_step1\n",
                                       "ssl_bump bump tls_step1 allow2_host allow2_port\nssl_bump peek tls_step1\n"),
}


@pytest.mark.parametrize("check", [None, *HTTP_TAMPERS])
def test_a_removed_protection_fails_its_check_and_the_agent_never_runs(engine, tls_upstream, workspace, tmp_path,
                                                                      certs, check, monkeypatch):  # noqa: F811
    from fakes import Recorder
    from launcher.launch import launch
    from launcher.errors import ProbeFailed

    network = tls_upstream[0]
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    plan = _plan(engine, workspace, tmp_path, certs, network)
    if check is None:   # the control: untampered, every check passes and the agent runs
        outcome = launch.run(engine, plan, Recorder())
        assert outcome.probe.ok and (workspace / "AGENT-RAN").exists()
        assert {"egress.bump_ca", "egress.http_refused", "egress.tunnel"} <= {c.id for c in outcome.probe.checks}
        return
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, HTTP_TAMPERS[check](plan), Recorder())
    assert info.value.report is not None, str(info.value)
    failed = {c.id for c in info.value.report.failed}
    assert check in failed, f"{check} passed although its protection was removed; failed: {failed}"
    assert not (workspace / "AGENT-RAN").exists()
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []
