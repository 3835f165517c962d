"""Read-only registries (issue 42 item 2): `--registries pypi,npm,debian` on run, up, compile and
explain, the `registries` setting, `network.registries` in a policy. Each registry stands for GET/HEAD
rules enforced by the proxy; `untrusted` (network none) becomes proxy mode with those rules alone and
stays in copy mode; later layers narrow them like any allow rule; bad input is a clear error."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.errors import PolicyError
from launcher.pipeline import pipeline, stack
from launcher.policy import registries
from launcher.policy.layers import LayerKind, effective, full_layer
from launcher.policy.model import NetworkMode, WorkspaceMode
from launcher.policy.policy import parse_policy

READ_ONLY = ("GET", "HEAD")


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A workspace, and config, state and org locations of this test only."""
    for name in ("ws", "config/sandbox", "state"):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(tmp_path / "org.yaml"))
    for name in ("SANDBOX_REGISTRIES", "SANDBOX_POLICY", "CI"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "org.yaml").write_text("version: 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*argv: str):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(argv), catch_exceptions=False)


def hosts(policy) -> dict[str, tuple]:
    return {r.host: (r.http.methods if r.http else None, r.http.mode if r.http else None, r.registry)
            for r in policy.network.allow}


def layered(place, ref="untrusted", names=()):
    return pipeline.layered(ref, str(place / "ws"), pipeline.LayerOptions(registries=names)).effective.policy


# ---- the table and the switch

def test_one_table_names_each_registry_and_its_hosts():
    assert registries.REGISTRIES == {"pypi": ("pypi.org", "files.pythonhosted.org"), "npm": ("registry.npmjs.org",),
                                     "debian": ("deb.debian.org",)}
    (rule,) = registries.rules("npm")
    assert (rule.host, rule.ports, rule.private, rule.registry) == ("registry.npmjs.org", (80, 443), False, "npm")
    assert (rule.http.methods, rule.http.paths, rule.http.mode, rule.http.ca_file) == (READ_ONLY, ("/",), "enforce", "")


def test_untrusted_with_registries_is_proxy_mode_with_those_read_only_rules_alone_and_still_a_copy(place):
    plain = layered(place)
    policy = layered(place, names=("pypi", "debian"))
    assert plain.network.mode is NetworkMode.NONE
    assert policy.network.mode is NetworkMode.PROXY and policy.workspace.mode is WorkspaceMode.COPY
    assert hosts(policy) == {"pypi.org": (READ_ONLY, "enforce", "pypi"),
                             "files.pythonhosted.org": (READ_ONLY, "enforce", "pypi"),
                             "deb.debian.org": (READ_ONLY, "enforce", "debian")}
    # the rest of the policy is unchanged
    from dataclasses import replace
    assert replace(policy, network=plain.network, digest=plain.digest) == replace(plain, digest=plain.digest)


def test_a_preset_with_a_network_keeps_it_and_a_host_it_allows_more_widely_keeps_its_tunnel(place):
    ci = layered(place, "ci")
    with_npm = layered(place, "ci", ("npm",))
    assert hosts(with_npm) == {**hosts(ci), "registry.npmjs.org": (READ_ONLY, "enforce", "npm")}
    dev = layered(place, "devcontainer")
    assert layered(place, "devcontainer", ("pypi", "npm")).network.allow == dev.network.allow


def test_names_are_checked_and_an_unknown_one_lists_the_known_ones():
    assert registries.names(["pypi,npm", "pypi", " debian "]) == ("pypi", "npm", "debian")
    with pytest.raises(PolicyError) as caught:
        registries.names(("pypi,pipy",))
    (problem,) = caught.value.problems
    assert (problem.path, problem.found) == ("--registries", "'pipy'")
    assert problem.hint == "did you mean 'pypi'? known registries: pypi, npm, debian"


def test_compile_with_the_switch_plans_the_proxy_rules_and_the_tools_variables(place):
    result = invoke("compile", "-w", "ws", "--registries", "pypi,npm")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    env = plan["container"]["env"]
    assert plan["copy"] and plan["proxy"]["bump_names"] == ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org"]
    assert plan["proxy"]["http_rules"].splitlines() == ["enforce GET,HEAD /"] * 3
    assert env["HTTPS_PROXY"] == "http://sandbox-proxy:3128" and env["SSL_CERT_FILE"] == "/etc/sandbox-ca/bundle.pem"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/sandbox-ca/extra.pem" and env["REQUESTS_CA_BUNDLE"] == env["SSL_CERT_FILE"]
    assert env["PATH"].startswith("/home/agent/.local/bin:") and env["PIP_BREAK_SYSTEM_PACKAGES"] == "1"
    assert env["npm_config_prefix"] == "/home/agent/.local" and env["npm_config_audit"] == "false"
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in json.loads(invoke("compile", "-w", "ws", "-p", "ci").stdout)["container"]["env"]


def test_an_unknown_registry_on_the_command_line_is_a_usage_error_with_the_known_ones(place):
    result = invoke("compile", "-w", "ws", "--registries", "pypi,cargo")
    assert result.exit_code == 2
    assert "'cargo': known registries: pypi, npm, debian" in result.stderr and "Traceback" not in result.stderr


def test_explain_shows_each_registry_rule_and_its_enforcer(place):
    result = invoke("explain", "-w", "ws", "--registries", "npm", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["egress_rules"] == [{"rule": "registry.npmjs.org [GET/HEAD /] (registry npm)",
                                                          "enforcer": "proxy (intercepted)"}]
    text = invoke("explain", "-w", "ws", "--registries", "npm").stdout
    assert "egress rule registry.npmjs.org [GET/HEAD /] (registry npm): proxy (intercepted)" in text
    assert "egress rule" not in invoke("explain", "-w", "ws").stdout   # network none: no rule


# ---- the setting

def test_the_setting_from_the_user_file_the_environment_and_the_flag(place, monkeypatch):
    (place / "config" / "sandbox" / "config.yaml").write_text("registries: [debian]\n")
    bumped = lambda *argv: json.loads(invoke("compile", "-w", "ws", *argv).stdout)["proxy"]["bump_names"]  # noqa: E731
    assert bumped() == ["deb.debian.org"]
    monkeypatch.setenv("SANDBOX_REGISTRIES", "npm,pypi")
    assert bumped() == ["registry.npmjs.org", "pypi.org", "files.pythonhosted.org"]
    assert bumped("--registries", "debian") == ["deb.debian.org"]
    got = {s["key"]: s for s in json.loads(invoke("config", "--json").stdout)["settings"]}["registries"]
    assert (got["value"], got["source"], got["where"]) == (["npm", "pypi"], "env", "SANDBOX_REGISTRIES")
    assert got["options"] == "--registries of compile, explain, run, up"


def test_a_bad_setting_is_exit_120_naming_the_file_and_the_known_registries(place, monkeypatch):
    path = place / "config" / "sandbox" / "config.yaml"
    path.write_text("registries: [pypi, crates]\n")
    result = invoke("compile", "-w", "ws")
    assert result.exit_code == 120, result.stderr
    assert f"{path}: registries[1]: expected a package registry name" in result.stderr
    assert "known registries: pypi, npm, debian" in result.stderr
    path.write_text("")
    monkeypatch.setenv("SANDBOX_REGISTRIES", "pypi,nmp")
    result = invoke("compile", "-w", "ws")
    assert result.exit_code == 120 and "SANDBOX_REGISTRIES" in result.stderr and "did you mean 'npm'?" in result.stderr


# ---- the policy key

def _policy(text: str):
    return parse_policy(b"version: 1\nname: t\ndescription: t\n" + text.encode(), "/p/t.yaml")


def test_network_registries_without_a_mode_mean_proxy_mode_with_their_rules(place):
    policy = _policy("network: {registries: [pypi, {name: npm, private: true, ca_file: ca.pem}]}\n")
    assert policy.network.mode is NetworkMode.PROXY
    npm = next(r for r in policy.network.allow if r.registry == "npm")
    assert npm.private and npm.http.ca_file == "/p/ca.pem" and npm.http.methods == READ_ONLY
    both = _policy("network: {mode: proxy, allow: [github.com], registries: [debian]}\n")
    assert [str(r) for r in both.network.allow] == ["github.com", "deb.debian.org [GET/HEAD /] (registry debian)"]


def test_a_file_that_extends_untrusted_with_registries_is_proxy_mode_and_still_a_copy(place):
    (place / "p.yaml").write_text("version: 1\nname: p\ndescription: p\nextends: [untrusted]\n"
                                  "network: {registries: [npm]}\n")
    policy = stack.load_base(str(place / "p.yaml")).policy
    assert policy.network.mode is NetworkMode.PROXY and policy.workspace.mode is WorkspaceMode.COPY
    assert hosts(policy) == {"registry.npmjs.org": (READ_ONLY, "enforce", "npm")}
    # the switch does not add a registry the policy has (perhaps with its own CA file) a second time
    assert layered(place, str(place / "p.yaml"), ("npm", "debian")).network.allow[0] == policy.network.allow[0]


@pytest.mark.parametrize("text,path,fragment", [
    ("network: {mode: none, registries: [pypi]}\n", "network.registries", "no registries in mode none"),
    ("network: {registries: [cargo]}\n", "network.registries[0]", "known registries: pypi, npm, debian"),
    ("network: {registries: [{name: pipy}]}\n", "network.registries[0].name", "did you mean 'pypi'?"),
    ("network: {registries: [{name: pypi, ca: x}]}\n", "network.registries[0]", "unknown key 'ca'"),
    ("network: {registries: [{name: pypi, private: yes please}]}\n", "network.registries[0].private", "true or false"),
    ("network: {registries: pypi}\n", "network.registries", "expected a list"),
])
def test_bad_registries_in_a_policy_name_the_key(text, path, fragment):
    with pytest.raises(PolicyError) as caught:
        _policy(text)
    assert any(p.path == path for p in caught.value.problems), caught.value.problems
    assert fragment in str(caught.value), str(caught.value)


# ---- layers: a lower layer never widens what a ceiling narrowed

def test_an_org_ceiling_narrows_the_switch_like_any_allow_rule(place, monkeypatch):
    org = place / "org.yaml"
    org.write_text("version: 1\nnetwork: {mode: none}\n")
    assert layered(place, names=("pypi",)).network.mode is NetworkMode.NONE
    org.write_text("version: 1\nnetwork: {allow: [pypi.org]}\n")   # a tunnel to pypi.org alone
    policy = layered(place, names=("pypi", "npm"))
    assert hosts(policy) == {"pypi.org": (READ_ONLY, "enforce", "pypi")}
    org.write_text("version: 1\nnetwork: {registries: [npm]}\n")   # an org's registries are its allow ceiling
    assert hosts(layered(place, names=("pypi", "npm"))) == {"registry.npmjs.org": (READ_ONLY, "enforce", "npm")}
    monkeypatch.setenv("CI", "true")   # an explicit request a ceiling removed fails a pipeline
    with pytest.raises(PolicyError, match=r"pypi.org \[GET/HEAD /\] \(registry pypi\).*\(--registries\)"):
        layered(place, names=("pypi", "npm"))


def test_a_later_layers_registries_never_add_a_host_nor_turn_the_network_on():
    base = _policy("network: {mode: proxy, allow: [github.com]}\n")
    prior = effective(base, [full_layer(LayerKind.BASE, base)])
    layer = stack.parse_layer(b"version: 1\nnetwork: {registries: [pypi]}\n", "repo.yaml", LayerKind.REPO)
    assert effective(base, [layer], prior=prior).policy.network.allow == ()
    none = _policy("network: {mode: none}\n")
    prior = effective(none, [full_layer(LayerKind.BASE, none)])
    after = effective(none, [layer], prior=prior).policy
    assert after.network.mode is NetworkMode.NONE and after.network.allow == ()


def test_a_layer_narrows_a_registry_to_fewer_methods_and_keeps_its_name():
    base = _policy("network: {registries: [npm]}\n")
    prior = effective(base, [full_layer(LayerKind.BASE, base)])
    layer = stack.parse_layer(b"version: 1\nnetwork: {allow: [{host: registry.npmjs.org, http: {methods: [GET]}}]}\n",
                              "org.yaml", LayerKind.ORG)
    (rule,) = effective(base, [layer], prior=prior).policy.network.allow
    assert rule.http.methods == ("GET",) and rule.registry == "npm"


# ---- up stores the switch with the sandbox

def test_up_stores_the_registries_and_a_later_up_with_others_is_refused():
    from launcher.launch import upoptions

    options = upoptions.UpOptions(registries=("pypi", "npm"))
    assert upoptions.parse(upoptions.label_value(options)) == options
    assert "--registries pypi --registries npm" in upoptions.shown(options)
    assert upoptions._same("registries", ("npm", "pypi"), ("pypi", "npm"), ())


# ---- the download cache

def test_a_sandbox_with_registries_gets_a_download_cache_per_workspace_and_reach(place):
    plan = json.loads(invoke("compile", "-w", "ws", "--registries", "pypi,npm").stdout)
    cache, env = plan["cache"], plan["container"]["env"]
    labels = dict(plan["container"]["labels"])
    assert cache["volume"].startswith("sandbox-cache-") and cache["profile"] == "downloads"
    assert cache["trust"] == labels["dev.sandbox.trust"] and labels["dev.sandbox.cache"] == cache["volume"]
    assert dict(cache["labels"])["dev.sandbox.kind"] == "home"   # listed and purged with the home volumes
    assert any(m["target"] == "/var/cache/sandbox-downloads" and m["source"] == cache["volume"] and not m["read_only"]
               for m in plan["container"]["mounts"])
    assert "/var/cache/sandbox-downloads" in next(a for a in plan["container"]["command"] if a.startswith("writable="))
    assert (env["PIP_CACHE_DIR"], env["npm_config_cache"], env["UV_CACHE_DIR"]) == tuple(
        f"/var/cache/sandbox-downloads/{tool}" for tool in ("pip", "npm", "uv"))
    # another reach, another volume: what a sandbox of one reach downloaded never enters another's
    other = json.loads(invoke("compile", "-w", "ws", "-p", "ci", "--registries", "pypi,npm").stdout)["cache"]
    assert other["volume"] != cache["volume"] and other["trust"] != cache["trust"]
    (place / "ws2").mkdir()
    elsewhere = json.loads(invoke("compile", "-w", "ws2", "--registries", "pypi,npm").stdout)["cache"]
    assert elsewhere["volume"] != cache["volume"] and elsewhere["trust"] == cache["trust"]


def test_no_registry_no_cache_and_files_for_another_tool_keep_none(place):
    assert json.loads(invoke("compile", "-w", "ws").stdout)["cache"] is None
    assert json.loads(invoke("compile", "-w", "ws", "-p", "devcontainer", "--registries", "pypi").stdout)["cache"] is None
    from launcher.plan import downloads

    policy = layered(place, names=("pypi",))
    assert downloads.cache(policy, str(place / "ws"), "k", 1000, 1000, "external") == (None, (), {})


def test_a_cache_volume_written_under_another_reach_is_refused_and_purge_keeps_one_in_use():
    from launcher import labels as label
    from launcher.engine.enginefake import FakeEngine
    from launcher.launch import home
    from launcher.plan import downloads

    policy = parse_policy(b"version: 1\nname: t\ndescription: t\nnetwork: {registries: [pypi]}\n", "/p/t.yaml")
    spec = downloads.cache(policy, "/w/a", "key1", 1000, 1000, "run")[0]
    engine = FakeEngine()
    engine.create_volume(spec.volume, {**dict(spec.labels), label.TRUST: "key0"})   # a sandbox of another reach wrote it
    with pytest.raises(PolicyError, match="never shared between policies of different reach"):
        home.prepare(engine, spec, lambda line: None)
    engine.create_volume("sandbox-cache-other", dict(spec.labels))
    engine.http.add_container("s1", {label.MANAGED: "1", label.KIND: "up", label.CACHE: spec.volume})
    gone, kept = home.remove_unused(engine, "/w/a")   # down --purge; gc --volumes: every workspace
    assert gone == ["sandbox-cache-other"] and kept == [f"{spec.volume} (in use by s1)"]


def test_check_names_a_registry_entrys_missing_ca_file_by_its_registry(place):
    (place / "p.yaml").write_text("version: 1\nname: p\ndescription: p\nextends: [untrusted]\n"
                                  "network: {registries: [pypi, {name: npm, ca_file: missing.pem}]}\n")
    result = invoke("check", "-p", str(place / "p.yaml"), "-w", "ws")
    assert result.exit_code == 120
    assert "network.registries (npm).ca_file: expected a PEM file of CA certificates" in result.stdout + result.stderr
