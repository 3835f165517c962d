"""Proxy-mode egress against real containers only: our own upstream and canary containers on an
internal Docker network stand in for the internet. Nothing here reaches any other address."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

from fakes import Recorder
from conftest import docker_sdk, launch_facts, preset
from launcher.plan.dialects.podman import NO_IPV6 as PODMAN_NO_IPV6
from launcher.engine import images
from launcher.errors import ExitCode, ProbeFailed
from launcher.launch import launch
from launcher.plan import checks
from launcher.plan.compiler import compile_policy
from launcher.policy.policy import with_allowed
from launcher.selftest.testnet import LABELS, Internet

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


@pytest.fixture(scope="module")
def internet(engine):
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    net = Internet(engine)
    yield net
    net.close()


def run_ci(internet, workspace, allow, script, *extra, timeout=120):
    args = ["run", "-p", "ci", "-w", str(workspace), "--egress-network", internet.network, "--report",
            str(workspace.parent / "report.json"), *extra]
    for host_ in allow:
        args += ["--allow-private", host_]   # our upstreams live on a private test network
    result = subprocess.run(SANDBOX + args + ["--", "bash", "-c", script], capture_output=True, text=True, timeout=timeout)
    return result, json.loads((workspace.parent / "report.json").read_text())


def leftovers(engine, workspace) -> list:
    label = f"dev.sandbox.workspace={os.path.realpath(workspace)}"
    return ["/" + c.name for c in engine.list(label)] + [n.name for n in engine.list_networks(label)]


CURL = 'curl -s -o /dev/null -w "%{http_code}" --max-time 10'


def test_allowed_host_works_denied_host_gets_403_and_the_canary_sees_nothing(engine, internet, workspace):
    result, report = run_ci(internet, workspace, ["allowed.test"],
                            f'curl -s --max-time 10 http://allowed.test/; echo "denied=$({CURL} http://denied.test/)"')
    assert result.returncode == 0, result.stderr
    assert "upstream allowed.test 80" in result.stdout and "denied=403" in result.stdout
    assert internet.seen_by_canary() == []
    assert any(b["host"] == "denied.test" and b["count"] == 1 for b in report["egress"]["blocked"])
    assert "egress blocked (1 requests)" in result.stderr and "GET denied.test:80" in result.stderr
    assert report["probe"]["ok"] and [c["id"] for c in report["probe"]["checks"]] == list(checks.for_mode("proxy"))
    assert leftovers(engine, workspace) == []


def test_wildcard_and_port_rules_behave_as_documented(engine, internet, workspace):
    script = "; ".join(f'echo "{u}=$({CURL} {u})"' for u in (
        "http://sub.allowed.test/", "http://allowed.test/", "http://allowed.test:8443/", "http://sub.allowed.test:8443/"))
    result, _ = run_ci(internet, workspace, ["*.allowed.test", "allowed.test:8443"], script)
    assert result.returncode == 0, result.stderr
    assert "http://sub.allowed.test/=200" in result.stdout           # wildcard covers a sub-name
    assert "http://allowed.test/=403" in result.stdout               # ... never the bare suffix
    assert "http://allowed.test:8443/=200" in result.stdout          # port rule
    assert "http://sub.allowed.test:8443/=403" in result.stdout      # wildcard only on 80/443
    assert internet.seen_by_canary() == []


def test_the_proxy_refuses_ip_literals_localhost_other_ports_and_lookalikes(engine, internet, workspace):
    urls = [f"http://{internet.canary_ip}/", "http://localhost/", "http://127.0.0.1:3128/", "http://allowed.test:8443/",
            "http://allowed.test.evil.test/", "http://denied.test/"]
    # NO_PROXY sends localhost to the sandbox's own loopback; ask the proxy explicitly instead.
    script = "; ".join(f'echo "{u}=$({CURL} -x "$HTTP_PROXY" --noproxy "" {u})"' for u in urls)
    script += f'; echo "connect=$({CURL} -p https://allowed.test:8443/)"'   # CONNECT to an allowed host, other port
    result, _ = run_ci(internet, workspace, ["allowed.test"], script)
    for url in urls:
        assert f"{url}=403" in result.stdout, result.stdout
    assert "connect=000" in result.stdout  # CONNECT refused with 403, so curl reports no HTTP code
    assert internet.seen_by_canary() == []


def test_direct_connections_and_dns_never_reach_the_canary(engine, internet, workspace):
    ip = internet.canary_ip
    script = (f'curl --noproxy "*" -s --max-time 3 http://{ip}/ && echo DIRECT-OK; '
              f'(echo x > /dev/udp/{ip}/53) 2>/dev/null; timeout 3 bash -c "echo > /dev/tcp/{ip}/80" 2>/dev/null && echo TCP-OK; '
              'getent hosts canary.test && echo DNS-OK; getent hosts allowed.test && echo DNS2-OK; echo done')
    result, _ = run_ci(internet, workspace, ["allowed.test"], script)
    assert result.returncode == 0 and "done" in result.stdout
    assert not any(word in result.stdout for word in ("DIRECT-OK", "TCP-OK", "DNS-OK", "DNS2-OK"))
    assert internet.seen_by_canary() == []


def test_killing_the_proxy_mid_run_cuts_egress(engine, internet, workspace):
    script = (f'echo "first=$({CURL} http://allowed.test/)"; for i in $(seq 100); do [ -e /tmp/go ] && break; '
              f'sleep 0.1; done; sleep 3; echo "second=$({CURL} http://allowed.test/)"; '
              f'echo "direct=$({CURL} --noproxy "*" http://{internet.canary_ip}/)"')
    proc = subprocess.Popen(SANDBOX + ["run", "-p", "ci", "-w", str(workspace), "--egress-network", internet.network,
                                       "--allow-private", "allowed.test", "--", "bash", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "first=200"
    proxies = [c for c in engine.list(f"dev.sandbox.workspace={workspace}") if c.labels["dev.sandbox.kind"] == "proxy"]
    docker_sdk().api.kill(proxies[0].id)
    out, _ = proc.communicate(timeout=120)
    assert "second=000" in out and "direct=000" in out
    assert internet.seen_by_canary() == []
    assert leftovers(engine, workspace) == []


def test_up_keeps_an_egress_log_and_down_removes_proxy_and_networks(engine, internet, workspace):
    name = "sandbox-test-proxy-up"
    result = subprocess.run(SANDBOX + ["up", str(workspace), "-p", "ci", "--name", name, "--no-shell", "--allow-private",
                                       "allowed.test", "--egress-network", internet.network], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    try:
        subprocess.run(SANDBOX + ["exec", name, "--", "sh", "-c", f"{CURL} http://denied.test/a; {CURL} http://allowed.test/"],
                       capture_output=True, text=True)
        logs = subprocess.run(SANDBOX + ["logs", name, "--egress", "--allowed"], capture_output=True, text=True)
        assert re.search(r"refused +GET +denied\.test:80 ", logs.stdout), logs.stdout
        assert re.search(r"allowed +GET +allowed\.test:80 ", logs.stdout), logs.stdout
        # the probe asked the proxy for its deny-test name before the agent started: not the agent's request
        learned = subprocess.run(SANDBOX + ["logs", name, "--suggest"], capture_output=True, text=True)
        assert learned.returncode == 0 and "    - denied.test" in learned.stdout, learned.stderr
        assert "sandbox-probe" not in learned.stdout + logs.stdout
    finally:
        subprocess.run(SANDBOX + ["down", name], capture_output=True)
    assert leftovers(engine, workspace) == []


@pytest.mark.exclusive
def test_gc_removes_proxy_and_networks_of_a_killed_launcher(engine, internet, workspace):
    proc = subprocess.Popen(SANDBOX + ["run", "-p", "ci", "-w", str(workspace), "--egress-network", internet.network,
                                       "--", "sleep", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "probe passed" in line:
            break
    proc.kill()
    proc.wait()
    assert len(leftovers(engine, workspace)) == 3   # sandbox, proxy, internal network
    subprocess.run(SANDBOX + ["gc"], capture_output=True, text=True, check=True)
    assert leftovers(engine, workspace) == []


# --- tamper tests for the proxy-mode probe checks -------------------------------------------

def _plan(engine, workspace, internet):
    policy = with_allowed(preset("ci"), ({"host": "allowed.test", "private": True},))
    facts = launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag)
    return compile_policy(policy, facts, egress_network=internet.network,
                          command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))


def _tamper_network(plan, **changes):
    nets = tuple(replace(n, **changes) if n.internal else n for n in plan.networks)
    return replace(plan, networks=nets)


PROXY_TAMPERS = {
    # the proxy listens elsewhere: nothing answers where the sandbox was told to go
    "egress.proxy": lambda p, net, podman: replace(p, proxy=replace(p.proxy, config=p.proxy.config.replace(
        ":3128 ssl-bump", ":3129 ssl-bump"))),
    # a proxy that allows everything
    "egress.denied": lambda p, net, podman: replace(p, proxy=replace(p.proxy, config=p.proxy.config.replace(
        "http_access deny all", "http_access allow all"))),
    # a plain internal network: its gateway is on the host, so the host answers (refuses)
    "egress.direct": lambda p, net, podman: _tamper_network(p, internal=False, options=()),
    # Docker: the sandbox sits on the internet network itself, where its resolver answers outside
    # names; podman: the sandbox's nameserver is no longer its own loopback (the host's resolvers)
    "egress.dns": lambda p, net, podman: replace(p, container=replace(p.container, dns=())) if podman else
    replace(p, container=replace(p.container, network_mode=net)),
    # IPv6 on the sandbox's interface (podman leaves it on unless the plan's sysctl turns it off;
    # Docker turns it off itself): a link-local address and route, beyond what proxy mode allows
    "net.routes": lambda p, net, podman: replace(p, container=replace(p.container, sysctls=tuple(
        (k, v) for k, v in p.container.sysctls if k != PODMAN_NO_IPV6[0]) + ((PODMAN_NO_IPV6[0], "0"),))),
}


@pytest.fixture
def probe_only(monkeypatch):
    monkeypatch.setattr(launch, "compare_inspect", lambda spec, attrs, image_env, podman=False: [])


def test_the_untampered_proxy_plan_passes(engine, internet, workspace):
    outcome = launch.run(engine, _plan(engine, workspace, internet), Recorder())
    assert outcome.probe.ok and (workspace / "AGENT-RAN").exists()


@pytest.mark.parametrize("check", list(PROXY_TAMPERS))
def test_tampered_proxy_mode_fails_its_check(engine, internet, workspace, check, probe_only):
    original = _plan(engine, workspace, internet)
    plan = PROXY_TAMPERS[check](original, internet.network, (engine.dialect.name == "podman"))
    assert plan != original, "the tamper changed nothing"
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    assert info.value.report is not None, str(info.value)
    assert check in {c.id for c in info.value.report.failed}
    assert not (workspace / "AGENT-RAN").exists() and leftovers(engine, workspace) == []


# A resolver that answers every query with an address, after a delay: a slow upstream.
SLOW_DNS = """
import socket, sys, threading, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 53))
def answer(q, peer):
    time.sleep(float(sys.argv[1])); end = 12
    while q[end]: end += q[end] + 1
    s.sendto(q[:2] + b"\\x81\\x80\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x00" + q[12:end + 5]
             + b"\\xc0\\x0c\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x3c\\x00\\x04\\xc0\\x00\\x02\\x01", peer)
print("READY", flush=True)
while True:
    q, peer = s.recvfrom(512); print("DNS", flush=True)
    threading.Thread(target=answer, args=(q, peer), daemon=True).start()
"""


@contextmanager
def slow_resolver(internet, delay: float, suffix: str = "slowdns"):
    """A resolver of our own on the upstream network that answers every query after `delay` s:
    (its address, its container)."""
    api = docker_sdk().api
    ref = api.create_container(internet.image, command=["python3", "-u", "-c", SLOW_DNS, str(delay)],
                               name=f"{internet.network}-{suffix}", labels=LABELS,
                               host_config=api.create_host_config(network_mode=internet.network))["Id"]
    try:
        api.start(ref)
        deadline = time.monotonic() + 30
        while b"READY" not in api.logs(ref) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield api.inspect_container(ref)["NetworkSettings"]["Networks"][internet.network]["IPAddress"], ref
    finally:
        api.remove_container(ref, force=True)


@pytest.mark.parametrize("delay", [1.0, 3.0])
def test_a_resolver_that_answers_late_fails_egress_dns(engine, internet, workspace, probe_only, delay):
    """Docker's embedded resolver relays a slow upstream's answer (up to its own 4 s): a late answer
    is an answer. podman's plan has no relaying resolver (resolv.conf's own 127.0.0.1)."""
    if engine.dialect.name == "podman":
        pytest.skip("podman: the sandbox's nameserver is its loopback, no resolver relays (egress.dns's tamper above)")
    with slow_resolver(internet, delay) as (address, ref):
        # slow.test is no alias on that network: only the slow resolver answers it
        policy = with_allowed(preset("ci"), ({"host": "slow.test", "private": True},))
        plan = compile_policy(policy, launch_facts(engine, policy, workspace, proxy_image=images.proxy_image().tag),
                              egress_network=internet.network,
                              command=("/.sandbox/probe/busybox", "touch", "/workspace/AGENT-RAN"))
        assert plan.probe.dnsname == "slow.test"
        plan = replace(plan, container=replace(plan.container, network_mode=internet.network, dns=(address,)))
        with pytest.raises(ProbeFailed) as info:
            launch.run(engine, plan, Recorder())
        failed = {c.id: c for c in info.value.report.failed}
        assert "egress.dns" in failed and "slow.test:answered" in failed["egress.dns"].observed
        assert b"DNS" in docker_sdk().api.logs(ref) and not (workspace / "AGENT-RAN").exists()


def test_default_egress_network_is_created_and_removed(engine, workspace):
    # No request leaves: the probe asks only for a .invalid name, which the proxy refuses unresolved.
    result = subprocess.run(SANDBOX + ["run", "-p", "ci", "-w", str(workspace), "--allow", "api.example.invalid", "--",
                                       "true"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "probe passed" in result.stderr and leftovers(engine, workspace) == []
    if engine.dialect.plan.shared_egress:   # Docker: the shared egress network stays, ICC off (not the sandbox's)
        shared = engine.network_info("sandbox-egress")
        assert shared is not None and shared.options.get("com.docker.network.bridge.enable_icc") == "false"


def test_tls_sni_must_be_allowed_too(engine, internet, workspace):
    """Squid peeks at the TLS client hello inside a CONNECT tunnel: an SNI that no rule allows cuts
    the tunnel before anything reaches the upstream; an allowed one is spliced through untouched."""
    before = docker_sdk().api.logs(internet.upstream).decode().count("CONN 443")
    script = ('curl -s --max-time 5 --connect-to denied.test:443:allowed.test:443 https://denied.test/ -o /dev/null; '
              'echo "mismatch=$?"')
    result, report = run_ci(internet, workspace, ["allowed.test"], script)
    assert "mismatch=0" not in result.stdout
    assert docker_sdk().api.logs(internet.upstream).decode().count("CONN 443") == before
    assert any(e["sni"] == "denied.test" and e["tls"] == "terminate" and e["denied"] for e in report["egress"]["requests"])
    result, _ = run_ci(internet, workspace, ["allowed.test"], "curl -s --max-time 3 https://allowed.test/ -o /dev/null; true")
    assert docker_sdk().api.logs(internet.upstream).decode().count("CONN 443") == before + 1


@pytest.mark.parametrize("gateway", ["first", "last"])
def test_a_plain_internal_network_fails_egress_direct(engine, internet, workspace, probe_only, monkeypatch, gateway):
    # The compat create's internal network alone (Docker: without inhibit_ipv4; podman: its compat
    # create, not its own), so the host's bridge holds the gateway address, the subnet's first or
    # its last: podman gives it no default route, so only a look at the whole subnet finds the last.
    plan = _plan(engine, workspace, internet)
    monkeypatch.setattr(engine, "create_network", lambda spec, subnet="": _compat_network(spec, subnet, gateway))
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    assert info.value.report is not None, str(info.value)
    assert [c.id for c in info.value.report.failed] == ["egress.direct"]
    assert not (workspace / "AGENT-RAN").exists() and leftovers(engine, workspace) == []


def _compat_network(spec, subnet="", gateway="first"):
    import ipaddress

    import docker

    at = str(ipaddress.IPv4Network(subnet)[-2]) if subnet and gateway == "last" else None
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet, gateway=at)]) if subnet else None
    docker_sdk().api.create_network(spec.name, driver="bridge", internal=spec.internal, labels=dict(spec.labels), ipam=ipam)
    return subnet


def test_up_never_reuses_a_sandbox_of_another_policy(internet, workspace):
    """`up --policy untrusted --name X` next to a running `ci` sandbox X used to open a shell in
    the ci one, with its network: now it is refused, naming both."""
    name = f"sandbox-test-reuse-{os.getpid()}"
    first = subprocess.run(SANDBOX + ["up", "-p", "ci", "--egress-network", internet.network, "--name", name,
                                      "--no-shell", str(workspace)], capture_output=True, text=True, timeout=120)
    try:
        assert first.returncode == 0, first.stderr
        other = subprocess.run(SANDBOX + ["up", "-p", "untrusted", "--name", name, "--no-shell", str(workspace)],
                               capture_output=True, text=True, timeout=120)
        assert other.returncode == ExitCode.POLICY_INVALID, other.stderr
        assert "found --policy untrusted" in other.stderr and f"{name} was started with: --policy ci" in other.stderr
        assert f"sandbox down {name}" in other.stderr and "opening a shell" not in other.stderr
        same = subprocess.run(SANDBOX + ["up", "-p", "ci", "--egress-network", internet.network, "--name", name,
                                         "--no-shell", str(workspace)], capture_output=True, text=True, timeout=120)
        assert same.returncode == 0 and "already running" in same.stderr, same.stderr
    finally:
        subprocess.run(SANDBOX + ["down", name], capture_output=True, timeout=120)


def test_an_allowed_name_that_resolves_to_a_private_address_is_refused_unless_its_rule_opts_in(engine, internet,
                                                                                             workspace):
    """The canary answers for canary.test on our private test network: allowing the name is not
    enough for the proxy to connect there (plain and CONNECT alike); the canary sees nothing."""
    args = ["run", "-p", "ci", "-w", str(workspace), "--egress-network", internet.network, "--allow", "canary.test",
            "--", "bash", "-c", f'echo "plain=$({CURL} http://canary.test/)"; curl -s --max-time 10 https://canary.test/ '
            '|| echo "tunnel failed"']
    result = subprocess.run(SANDBOX + args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # a refused CONNECT on the peeking port is accepted, then cut before a byte goes anywhere
    assert "plain=403" in result.stdout and "tunnel failed" in result.stdout, result.stdout
    assert "GET canary.test:80" in result.stderr and "CONNECT canary.test:443" in result.stderr   # both blocked
    assert internet.seen_by_canary() == []
    opted = subprocess.run(SANDBOX + ["run", "-p", "ci", "-w", str(workspace), "--egress-network", internet.network,
                                      "--allow-private", "allowed.test", "--", "bash", "-c",
                                      f'echo "plain=$({CURL} http://allowed.test/)"'], capture_output=True, text=True,
                           timeout=120)
    assert opted.returncode == 0 and "plain=200" in opted.stdout, opted.stdout + opted.stderr


HELLO = r'''
import socket, struct, sys
name = b"evil\x1b]52;c;cHduZWQ=\x07\n    - private.test\n  private: true\n\x1b[2K\rsandbox: applied 0 changes"
sni = struct.pack(">HBH", len(name) + 3, 0, len(name)) + name
ext = struct.pack(">HH", 0, len(sni)) + sni
body = b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x00\x2f" + b"\x01\x00" + struct.pack(">H", len(ext)) + ext
hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
'''


def test_a_hostile_tls_server_name_reaches_no_terminal_and_no_suggestion_raw(engine, internet, workspace):
    """Issue 24 case 9: the SNI is the agent's bytes. Squid logs it URL-encoded, the audit decodes
    it, every line shown escapes it and learn mode suggests only host names."""
    script = HELLO + r'''
import os, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
print(s.recv(4096)[:12])
s.sendall(b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs)
try:
    print(s.recv(4096)[:5])
except OSError as exc:
    print(exc)
'''
    result, report = run_ci(internet, workspace, ["allowed.test"], f"python3 -c '{script}'")
    assert result.returncode == 0, result.stderr
    snis = [e["sni"] for e in report["egress"]["requests"]]
    assert any(s.startswith("evil\x1b]52") for s in snis), snis
    shown = subprocess.run(SANDBOX + ["logs", "--egress", "--report", str(workspace.parent / "report.json")],
                           capture_output=True, text=True)
    learned = subprocess.run(SANDBOX + ["logs", "--egress", "--suggest", "--report",
                                        str(workspace.parent / "report.json")], capture_output=True, text=True)
    for out in (result.stderr, shown.stderr, shown.stdout, learned.stdout, learned.stderr):
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "private" not in "\n".join(line for line in learned.stdout.splitlines() if not line.startswith("#"))
    assert "not a host name" in learned.stdout


def test_egress_direct_with_no_address_left_to_try_fails(engine, internet, workspace, probe_only, monkeypatch):
    """Every address of the sandbox's subnet listed as the proxy's in /etc/hosts: egress.direct has
    nothing left to try, which is no observation, so it fails (it used to pass). podman only: Docker's
    plans always have a default route, through the gateway the plan's ARP settings leave ownerless."""
    if engine.dialect.name != "podman":
        pytest.skip("Docker gives the sandbox a default route: egress.direct always has the gateway to try")
    import ipaddress
    import random

    subnet = ipaddress.IPv4Network(f"198.19.{random.randrange(256)}.{16 * random.randrange(16)}/28")
    create = engine.create_network
    monkeypatch.setattr(engine, "create_network", lambda spec, subnet="", mine=str(subnet): create(spec, mine))
    plan = _plan(engine, workspace, internet)
    hosts = tuple(f"sandbox-proxy:{address}" for address in subnet.hosts())
    plan = replace(plan, container=replace(plan.container, extra_hosts=plan.container.extra_hosts + hosts))
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    failed = {c.id: c for c in info.value.report.failed}
    assert "egress.direct" in failed and "nothing to try" in failed["egress.direct"].observed
    assert not (workspace / "AGENT-RAN").exists() and leftovers(engine, workspace) == []


def test_egress_direct_with_nothing_to_try_fails_under_podmans_cli(engine, tmp_path):
    """The same without a podman engine under test: the probe alone, run by podman's CLI on an
    internal network of its own without gateway or DNS (no default route, a /29), every other
    address of it listed as the proxy's. Its only traffic: the proxy's request and the tries, to
    addresses of that closed network. It used to pass with nothing observed."""
    from conftest import external_tool
    from podman_node import Node

    node = Node(external_tool("podman", "apt-get install podman"), tmp_path / "node")
    images.ensure_for(engine, images.probe_image().tag, lambda line: None)
    node.load(images.probe_image().tag)
    probe = compile_policy(with_allowed(preset("ci"), ({"host": "allowed.test", "private": True},)),
                           launch_facts(engine, preset("ci"), tmp_path)).probe
    # gate=-: no launcher watches here (none would give its word that the proxy is ready, nor start the agent)
    args = replace(probe, resolver="127.0.0.1", dnsname="-", checks=("egress.direct",), na=(), gate="-").to_args()
    image, out, net = f"localhost/{images.probe_image().tag}", tmp_path / "probe", f"sandbox-test-nothing-{os.getpid()}"
    out.mkdir()
    node.run("run", "--rm", "-v", f"{out}:/out", "--entrypoint", "/probe/busybox", image, "cp", "/probe/busybox",
             "/probe/probe.sh", "/out/")
    # a /29 of its own: .ci/podman runs this test too, at the same time as the Docker run's
    first = 8 * (os.getpid() % 32)
    node.run("network", "create", "--internal", "--disable-dns", "--subnet", f"10.89.231.{first}/29", net)
    try:
        hosts = [f"--add-host=sandbox-proxy:10.89.231.{first + i}" for i in range(1, 7)]
        result = node.run("run", "--rm", "--network", net, "--dns", "127.0.0.1", *hosts, "--user", "1000:1000",
                          "-v", f"{out}:/.sandbox/probe:ro", "--entrypoint", "/.sandbox/probe/busybox", image,
                          "sh", "/.sandbox/probe/probe.sh", *args, "--", "true", check=False)
    finally:
        node.run("network", "rm", "-f", net, check=False)
    assert "PROBE\tegress.direct\tfail\tno path to the host\tnothing to try" in result.stdout, result.stdout + result.stderr
