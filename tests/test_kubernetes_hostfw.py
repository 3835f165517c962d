"""`compile --format kubernetes --host-firewall cilium|calico`: the plugins' objects that keep the
agent Pod off the nodes. No schema of Cilium's or Calico's CRDs can be had from a package registry
here and no cluster runs here, so these tests check the fields we emit (names, selectors, that every
rule denies and none allows), the golden files, where the objects go, and the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher import labels as label
from launcher import resources
from launcher.errors import PolicyError
from launcher.targets.kubernetes import KubeOptions, kubernetes_text, to_manifests
from launcher.targets.kubernetes import agentsandbox
from launcher.targets.kubernetes import hostfirewall as hf
from test_kubernetes import agent_pod, by_kind, preset_plan

GOLDEN = Path(__file__).parent / "golden" / "kubernetes" / "host-firewall"
SANDBOX = [sys.executable, "-m", "launcher"]
PRESETS = resources.preset_names()
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The fields each kind may carry, as the plugins' CRDs name them (Calico's read at v3.29.0 and at
# its main branch of 2026-08; Cilium's from its API types): one not in these is a typo or a guess.
SPEC_FIELDS = {
    "CiliumClusterwideNetworkPolicy": {"description", "nodeSelector", "enableDefaultDeny", "ingressDeny"},
    "Tier": {"order", "defaultAction"},
    "GlobalNetworkPolicy": {"tier", "order", "selector", "types", "applyOnForward", "ingress", "egress"},
}


def added(name: str, plugin: str, **options) -> list[dict]:
    """The objects --host-firewall adds to the preset's manifests."""
    plain = to_manifests(preset_plan(name), KubeOptions(**options))
    return [o for o in to_manifests(preset_plan(name), KubeOptions(host_firewall=plugin, **options)) if o not in plain]


def parse_calico_selector(expression: str) -> dict[str, str]:
    """Our own form only: `key == 'value'` terms joined by &&; anything else fails the test."""
    terms = [re.fullmatch(r"\s*([\w./-]+) == '([^']*)'\s*", term) for term in expression.split("&&")]
    assert all(terms), expression
    return {t.group(1): t.group(2) for t in terms}


def only_denies(objects: list[dict]) -> list[str]:
    """Every rule or default that is not a deny: the opt-in may take traffic away, never allow any,
    nor end the evaluation of anyone else's policies."""
    found = []
    for o in objects:
        name, spec = o["metadata"]["name"], o["spec"]
        if o["kind"] == "CiliumClusterwideNetworkPolicy":
            found += [f"{name}: {key}" for key in ("ingress", "egress") if spec.get(key)]
            if spec.get("enableDefaultDeny") != {"ingress": False, "egress": False}:
                found.append(f"{name}: default deny")   # the nodes would take only what some policy allows
        elif o["kind"] == "GlobalNetworkPolicy":
            found += [f"{name}: {rule['action']}" for rule in spec.get("ingress", []) + spec.get("egress", [])
                      if rule["action"] != "Deny"]
        elif o["kind"] == "Tier" and spec.get("defaultAction") != "Pass":
            found.append(f"tier {name}: {spec.get('defaultAction')}")   # would drop what the later tiers allow
    return found


@pytest.mark.parametrize("plugin", hf.PLUGINS)
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_gets_objects_that_select_its_agent_and_only_deny(name, plugin):
    objects = to_manifests(preset_plan(name), KubeOptions(host_firewall=plugin))
    new = added(name, plugin)
    agent = agent_pod(objects)["metadata"]["labels"]
    proxies = [p["metadata"]["labels"] for p in by_kind(objects, "Pod") if p["metadata"]["labels"][label.KIND] == "proxy"]
    assert new and only_denies(new) == []
    for o in new:
        assert set(o["spec"]) <= SPEC_FIELDS[o["kind"]], o["kind"]
        assert _SUBDOMAIN.match(o["metadata"]["name"]) and len(o["metadata"]["name"]) <= 253
        assert "namespace" not in o["metadata"]                 # cluster-scoped, all three kinds
    selectors = []
    if plugin == "cilium":
        (ccnp,) = new
        assert ccnp["apiVersion"] == "cilium.io/v2" and ccnp["spec"]["nodeSelector"] == {}   # every node
        (deny,) = ccnp["spec"]["ingressDeny"]
        selectors = [peer["matchLabels"] for peer in deny["fromEndpoints"]]
    else:
        tier, into, out = new
        assert {o["apiVersion"] for o in new} == {"projectcalico.org/v3"}
        tier_name = tier["metadata"]["name"]
        assert tier_name == agent[label.SANDBOX] and _DNS_LABEL.match(tier_name) and len(tier_name) <= 63
        assert tier["spec"]["order"] < 1000    # before the AdminNetworkPolicy and default tiers: the deny comes first
        for policy in (into, out):
            assert policy["spec"]["tier"] == tier_name
            assert policy["metadata"]["name"].startswith(f"{tier_name}.")   # Calico 3.29 wants the tier's prefix
        assert into["spec"]["selector"] == hf.CALICO_AUTO_HOST_ENDPOINTS and into["spec"]["types"] == ["Ingress"]
        assert into["spec"]["applyOnForward"] is False    # forwarded traffic (to Pods, the proxy) is not the node's
        selectors = [parse_calico_selector(r["source"]["selector"]) for r in into["spec"]["ingress"]]
        assert out["spec"]["types"] == ["Egress"]
        selectors.append(parse_calico_selector(out["spec"]["selector"]))
        assert [r["destination"] for r in out["spec"]["egress"]] == [{"selector": hf.CALICO_AUTO_HOST_ENDPOINTS}]
    for selector in selectors:
        assert selector and selector.items() <= agent.items()
        assert not any(selector.items() <= proxy.items() for proxy in proxies)   # the proxy Pod is not the agent


def test_the_checks_catch_an_allow_rule_and_a_default_deny():
    """The checks above can fail: each of these changes is named."""
    cilium, = added("ci", "cilium")
    tier, into, _ = added("ci", "calico")
    cilium["spec"]["ingress"] = [{"fromEntities": ["all"]}]
    into["spec"]["ingress"].append({"action": "Allow"})
    tier["spec"]["defaultAction"] = "Deny"
    assert len(only_denies([cilium, tier, into])) == 3
    del cilium["spec"]["enableDefaultDeny"]
    assert any("default deny" in f for f in only_denies([cilium]))
    with pytest.raises(AssertionError):
        parse_calico_selector("dev.sandbox.kind in {'kubernetes'}")


@pytest.mark.parametrize("plugin", hf.PLUGINS)
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_renders_its_golden_host_firewall(name, plugin):
    got = yaml.safe_dump_all(added(name, plugin), sort_keys=False, width=1000, explicit_start=True)
    path = GOLDEN / plugin / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN") and (not path.exists() or path.read_text() != got):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
        pytest.fail(f"rewrote {plugin}/{path.name}: review the diff, then run again without UPDATE_GOLDEN")
    assert got == path.read_text(), "host firewall changed: review, then UPDATE_GOLDEN=1 pytest"


@pytest.mark.parametrize("plugin", hf.PLUGINS)
def test_the_objects_come_after_the_network_policies_and_before_any_pod(plugin):
    plain = to_manifests(preset_plan("ci"))
    kinds = [o["kind"] for o in to_manifests(preset_plan("ci"), KubeOptions(host_firewall=plugin))]
    policies = sum(1 for o in plain if o["kind"] == "NetworkPolicy")
    extra = len(added("ci", plugin))
    assert kinds[:policies] == ["NetworkPolicy"] * policies
    assert kinds[policies + extra:] == [o["kind"] for o in plain[policies:]]
    assert "Pod" not in kinds[:policies + extra]


@pytest.mark.parametrize("plugin", hf.PLUGINS)
def test_the_loss_report_says_what_the_opt_in_adds_and_that_it_is_untested(plugin):
    plain = kubernetes_text(preset_plan("ci"))
    text = kubernetes_text(preset_plan("ci"), KubeOptions(host_firewall=plugin))
    assert "--host-firewall cilium|calico" in plain and f"host firewall ({plugin})" not in plain
    head = text[:text.index("\n---")]
    assert f"--host-firewall {plugin} adds {hf.WHAT_IT_ADDS[plugin]}" in head
    assert f"host firewall ({plugin}): its objects are untested" in head
    assert "pod.reach" in head and "NodePorts" in head     # what the probe proves of the node, and what not
    podman = kubernetes_text(preset_plan("ci"), KubeOptions(host_firewall=plugin, node="podman"))
    assert "podman kube play ignores NetworkPolicy objects and the host firewall's" in podman


@pytest.mark.parametrize("plugin", hf.PLUGINS)
def test_an_agent_sandbox_template_gets_the_same_objects_for_the_pods_its_controller_makes(plugin):
    """The controller copies the template's labels to its Pods: the same selectors pick them."""
    options = KubeOptions(host_firewall=plugin)
    objects = agentsandbox.to_manifests(preset_plan("ci"), options)
    assert [o for o in objects if o["kind"] in SPEC_FIELDS] == added("ci", plugin)
    (template,) = by_kind(objects, "SandboxTemplate")
    pods = template["spec"]["podTemplate"]["metadata"]["labels"]
    assert agent_pod(to_manifests(preset_plan("ci"), options))["metadata"]["labels"].items() <= pods.items()
    lost = agentsandbox.losses(preset_plan("ci"), host_firewall=plugin)
    assert f"host firewall ({plugin})" in dict(lost)


def test_an_unknown_plugin_is_refused_by_the_library_too():
    with pytest.raises(PolicyError, match="--host-firewall"):
        to_manifests(preset_plan("ci"), KubeOptions(host_firewall="weave"))


def _compile(tmp_path, *more):
    return subprocess.run(SANDBOX + ["compile", "-p", "ci", "-w", str(tmp_path), *more], capture_output=True,
                          text=True)


def test_the_cli_writes_the_objects_and_refuses_a_bad_flag(tmp_path):
    ok = _compile(tmp_path, "--format", "kubernetes", "--host-firewall", "cilium")
    assert ok.returncode == 0, ok.stderr
    assert "CiliumClusterwideNetworkPolicy" in [o["kind"] for o in yaml.safe_load_all(ok.stdout)]
    assert "kubernetes does not enforce host firewall (cilium): its objects are untested" in ok.stderr
    before = sorted(p.name for p in tmp_path.iterdir())
    bad = _compile(tmp_path, "--format", "kubernetes", "--host-firewall", "weave")
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert "Invalid value for '--host-firewall': 'weave' is not one of 'cilium', 'calico'" in bad.stderr
    wrong = _compile(tmp_path, "--format", "compose", "--host-firewall", "calico")
    assert wrong.returncode == 2 and wrong.stdout == "" and "Traceback" not in wrong.stderr
    assert "--host-firewall is for --format kubernetes, agent-sandbox, not compose" in wrong.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before      # nothing left behind


def test_the_cli_offers_the_plugins_the_renderer_has():
    from launcher.cli.policy import compile as command

    (option,) = [p for p in command.params if p.name == "host_firewall"]
    assert tuple(option.type.choices) == hf.PLUGINS


def test_explain_for_kubernetes_says_what_the_opt_in_adds(tmp_path):
    text = subprocess.run(SANDBOX + ["explain", "-p", "ci", "-w", str(tmp_path), "--target", "kubernetes"],
                          capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "opt-in for kubernetes: --host-firewall cilium|calico adds" in text.stdout
    data = json.loads(subprocess.run(SANDBOX + ["explain", "-p", "ci", "-w", str(tmp_path), "--target", "kubernetes",
                                                "--json"], capture_output=True, text=True).stdout)
    (opt_in,) = data["opt_ins"]
    assert opt_in["flag"] == "--host-firewall cilium|calico" and "untested" in opt_in["adds"]
    pods = json.loads(subprocess.run(SANDBOX + ["explain", "-p", "ci", "-w", str(tmp_path), "--target", "agent-sandbox",
                                                "--json"], capture_output=True, text=True).stdout)
    assert pods["opt_ins"] == data["opt_ins"]
    run = json.loads(subprocess.run(SANDBOX + ["explain", "-p", "ci", "-w", str(tmp_path), "--json"],
                                    capture_output=True, text=True).stdout)
    assert run["opt_ins"] == []
