"""Agent profiles as data (launcher/agents): the registry, each profile's image recipe pins the same
version, and a profile never carries a secret or widens anything (no engine needed)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from launcher import agents
from launcher.engine import images
from launcher.policy import secrets
from launcher.policy import inject

ENDPOINT = "http://proxy:3130"


def test_the_registry_has_the_agents_of_issue_10():
    assert set(agents.PROFILES) == {"claude-code", "codex", "gemini-cli", "aider", "opencode", "neo"}
    with pytest.raises(KeyError, match="known: aider, claude-code"):
        agents.get("cursor")


@pytest.mark.parametrize("name", sorted(n for n, p in agents.PROFILES.items() if p.image))
def test_the_image_recipe_pins_the_profiles_version(name):
    profile = agents.get(name)
    dockerfile = (images.agent_profile_image(profile.image).context / "Dockerfile").read_text()
    assert re.search(rf"^ARG [A-Z_]+_VERSION={re.escape(profile.package.version)}$", dockerfile, re.M), name
    assert profile.package.name in dockerfile
    assert dockerfile.rstrip().endswith("USER 1000:1000")
    # The base image's checks again (no file capabilities, no setuid/setgid files): the shared
    # fetch image's hardening step (tests/test_agent_images.py reads where and when it runs).
    assert "ARG BASE=sandbox/agent:bookworm" in dockerfile
    assert "COPY --from=fetch /usr/local/sbin/sandbox-harden" in dockerfile and re.search(r"^\s*(RUN .*)?sandbox-harden", dockerfile, re.M)


@pytest.mark.parametrize("profile", agents.PROFILES.values(), ids=lambda p: p.name)
def test_a_profile_adds_only_harmless_environment_and_home_files(profile):
    env = profile.environment(ENDPOINT)
    key_env = profile.model.key_env if profile.model else None
    for name, value in env.items():
        if name == key_env:   # the one secret-shaped name a CLI insists on holds only the placeholder
            assert value == agents.PLACEHOLDER_KEY
            continue
        assert not secrets.secret_name(name) and not secrets.secret_value(value), name
    for name, template in (profile.model.env.items() if profile.model else ()):
        assert env[name] == template.replace("{endpoint}", ENDPOINT)
    for path, text in profile.home_files(ENDPOINT).items():
        assert not path.startswith("/") and ".." not in path and "{endpoint}" not in text
        assert any(path == p or path.startswith(p + "/") for p in profile.home_paths), path


@pytest.mark.parametrize("profile", [p for p in agents.PROFILES.values() if p.model], ids=lambda p: p.name)
def test_the_model_secret_entry_is_one_the_policy_accepts(profile):
    entry = profile.secret_entry("MODEL_KEY") | {"file": "", "ca_file": ""}
    assert inject.problems([entry], {"mode": "proxy", "allow_ip_literals": False}) == []
    assert profile.endpoint_var() == "SANDBOX_ENDPOINT_MODEL"


def test_key_variables_the_clis_insist_on_are_secret_shaped_for_the_probe():
    """Why key_env is apart from env: the probe refuses these names today, placeholder or not; Codex
    avoids it (its env_key can be any name), the others need the launcher to decide (see profiles)."""
    shaped = {p.name: secrets.secret_name(p.model.key_env) for p in agents.PROFILES.values() if p.model and p.model.key_env}
    assert shaped == {"claude-code": True, "gemini-cli": True, "aider": True}


def test_a_profile_that_carries_a_secret_is_refused():
    bad = agents.AgentProfile(name="bad", summary="", image=None, package=None, command="x", headless=("x",),
                              home_paths=(), env={"SERVICE_TOKEN": "abc"})
    with pytest.raises(ValueError, match="looks like a secret"):
        agents.check(bad)


def test_what_each_cli_reads_from_the_workspace_is_protected_or_reported():
    """opencode.json or .opencode adds a plugin or MCP server that runs on the host, aider's model
    settings a base URL: protected. A planted .env redirects aider's or Gemini CLI's base URL too,
    but so many projects keep one, and opencode writes .opencode at every start, that those two are
    reported (and shown by `sandbox diff`), not protected."""
    from launcher.policy.surfaces import BY_NAME, PROTECTED

    unprotected = {path for p in agents.PROFILES.values() for path in p.workspace_config if path not in PROTECTED}
    assert unprotected == {".env", ".opencode"} and not any(BY_NAME[p].protect for p in unprotected)


def test_ca_variables_say_whether_they_take_the_extra_cas_or_a_whole_bundle():
    kinds = {kind for p in agents.PROFILES.values() for kind in p.ca_env.values()}
    assert kinds <= {"extra", "bundle"}
    assert all(p.ca_env for p in agents.PROFILES.values() if p.image)   # every real CLI says how


def test_agent_flag_sets_image_and_variables_and_the_key_only_as_a_proxy_secret():
    from launcher.agents.wiring import with_agent, wrapped
    from launcher.errors import PolicyError
    from conftest import preset

    profile = agents.get("claude-code")
    ci = with_agent(preset("ci"), profile, "sandbox/agent-claude-code:x", key_env="MODEL_KEY")
    assert ci.image == "sandbox/agent-claude-code:x" and dict(ci.env.set_values)["DISABLE_AUTOUPDATER"] == "1"
    secret = ci.secrets[-1]
    assert (secret.name, secret.env, secret.upstream) == ("model", "MODEL_KEY", "https://api.anthropic.com")
    assert not any("KEY" in name for name, _ in ci.env.set_values)     # no secret-shaped variable goes in
    with pytest.raises(PolicyError, match="an agent with a model API"):
        with_agent(preset("ci"), replace(profile, model=None), "img", key_env="MODEL_KEY")
    _, argv = wrapped(profile, ("claude", "-p", "hi"), keyed=True)
    assert argv[-3:] == ("claude", "-p", "hi") and argv[3].endswith('exec "$@"')
    assert "$SANDBOX_ENDPOINT_MODEL" in argv[3] and "apiKeyHelper" in argv[3]


def test_sandbox_agents_lists_every_profile(tmp_path):
    import json
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "launcher", "agents", "--json"], capture_output=True, text=True)
    assert {r["name"] for r in json.loads(listed.stdout)} == set(agents.PROFILES)
    rows = {r["name"]: r for r in json.loads(listed.stdout)}   # what `sandbox up --agent NAME` opens
    assert rows["claude-code"]["interactive"] == "claude --dangerously-skip-permissions" and rows["neo"]["interactive"] == ""
    text = subprocess.run([sys.executable, "-m", "launcher", "agents"], capture_output=True, text=True).stdout
    assert "  up      codex --no-daemon --sandbox danger-full-access (sandbox up --agent codex)" in text
    assert "  up      - (sandbox up --agent neo opens a shell)" in text
    wrong = subprocess.run([sys.executable, "-m", "launcher", "compile", "--agent", "nope", "-w", str(tmp_path)],
                           capture_output=True, text=True)
    assert wrong.returncode == 120 and "no agent profile 'nope'" in wrong.stderr
