"""The model API in every preset (issue 25 part 1): `--agent NAME` with a key reaches that agent's
model endpoint through the proxy and nothing else, the default preset included; without a key
`untrusted` keeps no network; `network.model: false` in any layer forbids it, and a ceiling that
takes the key's way out is an error, never a silent "Not logged in". Through the real pipeline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher.errors import PolicyError
from launcher.pipeline import pipeline
from launcher.pipeline.pipeline import AgentChoice, LayerOptions
from launcher.policy.model import NetworkMode, WorkspaceMode

KEYED = LayerOptions(agent=AgentChoice(name="claude-code", key_env="MODEL_KEY"))


@pytest.fixture
def layers_here(tmp_path, monkeypatch):
    """Org and user layers of this test only; returns a function writing them."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(tmp_path / "org.yaml"))
    (tmp_path / "org.yaml").write_text("version: 1\n")
    (tmp_path / "config" / "sandbox").mkdir(parents=True)
    (tmp_path / "ws").mkdir()

    def write(org: str = "", user: str = "") -> str:
        (tmp_path / "org.yaml").write_text("version: 1\n" + org)
        (tmp_path / "config" / "sandbox" / "policy.yaml").write_text("version: 1\n" + user)
        return str(tmp_path / "ws")
    return write


def test_untrusted_with_a_key_reaches_the_model_api_alone_on_a_copy(layers_here):
    policy = pipeline.layered("untrusted", layers_here(), KEYED).effective.policy
    assert policy.network.mode is NetworkMode.PROXY and policy.network.allow == ()
    assert [(s.name, s.upstream, s.model) for s in policy.secrets] == [("model", "https://api.anthropic.com", True)]
    assert policy.workspace.mode is WorkspaceMode.COPY


def test_untrusted_without_a_key_keeps_no_network(layers_here):
    no_key = LayerOptions(agent=AgentChoice(name="claude-code"))
    policy = pipeline.layered("untrusted", layers_here(), no_key).effective.policy
    assert policy.network.mode is NetworkMode.NONE and policy.secrets == ()


@pytest.mark.parametrize("layer", ["org", "user"])
def test_network_model_false_in_a_ceiling_refuses_the_key_and_names_the_layer(layer, layers_here):
    ws = layers_here(**{layer: "network: {model: false}\n"})
    with pytest.raises(PolicyError) as caught:
        pipeline.layered("untrusted", ws, KEYED)
    problem = caught.value.problems[0]
    assert problem.path == "--model-key-env" and "network.model: false" in problem.found
    assert ("org.yaml" if layer == "org" else "policy.yaml") in problem.found
    assert pipeline.layered("untrusted", ws).effective.policy.network.model is False   # no key: fine


def test_an_org_without_network_takes_the_models_way_out_from_ci_too(layers_here):
    ws = layers_here(org="network: {mode: none}\n")
    with pytest.raises(PolicyError, match="network.mode: none"):
        pipeline.layered("ci", ws, KEYED)


def test_a_base_policy_that_forbids_the_model_api_refuses_the_key(tmp_path, layers_here):
    own = tmp_path / "own.yaml"
    own.write_text("version: 1\nname: own\ndescription: d\nextends: [untrusted]\nnetwork: {model: false}\n")
    with pytest.raises(PolicyError, match="sets network.model: false"):
        pipeline.layered(str(own), layers_here(), KEYED)


def test_allow_entries_still_need_a_proxy_mode_policy(layers_here):
    with pytest.raises(PolicyError, match="network mode proxy"):
        pipeline.layered("untrusted", layers_here(), LayerOptions(allow=("files.test",), agent=KEYED.agent))


def test_the_compiled_proxy_allows_nothing_but_the_model_endpoint(layers_here):
    planned = pipeline.plan("untrusted", layers_here(), ("true",), KEYED)
    proxy = planned.plan.proxy
    assert [s.name for s in proxy.secrets] == ["model"]
    rules = [line for line in proxy.config.splitlines() if line.startswith("http_access")]
    assert rules == ["http_access allow secret0_in", "http_access deny all"]
    assert dict(planned.plan.container.env)["SANDBOX_ENDPOINT_MODEL"].startswith("http://")


def run_cli(*argv: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "launcher", *argv], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_explain_and_check_show_the_model_api(layers_here):
    shown = run_cli("explain", "untrusted", "--json", "--agent", "claude-code", "--model-key-env", "MODEL_KEY",
                    "-w", layers_here())
    rows = {r["field"]: r for r in json.loads(shown.stdout)["fields"]}
    assert rows["network.mode"]["value"] == "proxy" and rows["network.model"]["value"] == "true"
    assert "model API" in rows["network.model"]["mechanism"]
    checked = run_cli("check", "untrusted", "-w", layers_here())
    assert checked.returncode == 0 and "network.model: with --agent NAME and a model key" in checked.stdout


def test_without_a_key_the_cli_says_how_to_add_one(layers_here):
    said = run_cli("compile", "--policy", "untrusted", "--agent", "claude-code", "-w", layers_here(), "--format", "json")
    assert said.returncode == 0, said.stderr
    assert ("the sandbox has no network, so its CLI cannot reach a model API; with --model-key-env "
            "ANTHROPIC_API_KEY it reaches api.anthropic.com alone") in said.stderr
