"""Defaults set once (issue 43 item 4): the user's config.yaml, a repository's `defaults:` and the
SANDBOX_* variables; precedence flag > environment > repository (approved only) > user > built-in;
bad input names the file, the key, what was expected and a hint. `sandbox config` shows it all."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.errors import PolicyError
from launcher.policy import settings

PRESETS = ("ci", "devcontainer", "read-only", "untrusted", "untrusted-gvisor")
AGENTS = ("aider", "claude-code", "codex", "neo")
KNOWN = {"presets": PRESETS, "agents": AGENTS}


def parse(text: str, file: str = "/home/u/.config/sandbox/config.yaml") -> settings.Defaults:
    return settings.parse_file(text.encode(), file, home="/home/u", **KNOWN)


# ---- parsing


def test_a_user_file_gives_each_key_validated():
    got = parse("version: 1\npolicy: ci\nagent: neo\ntimeout: 20m\nsession: 8h\nidle: 90\n"
                "ports: [8080, \"3000:80\"]\nca_files: [~/corp.pem, certs/ca.pem, /etc/x.pem]\n")
    assert dict(got.values) == {"policy": "ci", "agent": "neo", "timeout": "20m", "session": "8h", "idle": "90",
                                "ports": ("8080", "3000:80"),
                                "ca_files": ("/home/u/corp.pem", "/home/u/.config/sandbox/certs/ca.pem", "/etc/x.pem")}


def test_a_policy_path_is_relative_to_the_file_and_tilde_is_home():
    assert parse("policy: mine.yaml\n").get("policy") == "/home/u/.config/sandbox/mine.yaml"
    assert parse("policy: ~/p/ci.yaml\n").get("policy") == "/home/u/p/ci.yaml"


def test_an_empty_file_sets_nothing():
    assert parse("").values == () and parse("# nothing\n").values == ()


BAD = [
    ("polcy: ci\n", "polcy", "one of the keys", "did you mean 'policy'?"),
    ("preset: ci\n", "preset", "one of the keys", "the preset is the key policy"),
    ("registries: [r.example]\n", "registries[0]", "a package registry name", "known registries: pypi, npm, debian"),
    ("registries: [pipy]\n", "registries[0]", "a package registry name", "did you mean 'pypi'?"),
    ("registries: 3\n", "registries", "a list of registries", "registries: [pypi, npm]"),
    ("registry: [pypi]\n", "registry", "one of the keys", "the key is registries"),
    ("policy: 3\n", "policy", "a preset name or a policy file path", "bundled presets"),
    ("policy: untrustd\n", "policy", "a preset name or a policy file path", "did you mean 'untrusted'?"),
    ("agent: claude\n", "agent", "an agent profile name", "did you mean 'claude-code'?"),
    ("timeout: 10 minutes\n", "timeout", "a duration above zero and at most 168h", "for example 90s"),
    ("session: 0\n", "session", "a duration above zero", "for example"),
    ("idle: 200h\n", "idle", "at most 168h", "for example"),
    ("ports: 8080\n", "ports", "a list", "ports: [8080"),
    ("ports: [\"80:70000\"]\n", "ports[0]", "[HOST_PORT:]PORT", "sandbox up --port"),
    ("ports: [true]\n", "ports[0]", "[HOST_PORT:]PORT", "sandbox up --port"),
    ("ca_files: x.pem\n", "ca_files", "a list", "ca_files: [~/corp-ca.pem]"),
    ("version: 2\n", "version", "1", "version: 1"),
]


@pytest.mark.parametrize("text,key,expected,hint", BAD)
def test_bad_input_names_file_key_expected_and_hint(text, key, expected, hint):
    with pytest.raises(PolicyError) as caught:
        parse(text, file="/c/config.yaml")
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == ("/c/config.yaml", key)
    assert expected in problem.expected and hint in problem.hint and problem.found


def test_not_a_mapping_and_every_problem_at_once():
    with pytest.raises(PolicyError) as caught:
        parse("- policy\n")
    assert caught.value.problems[0].expected == "a mapping of keys to values"
    with pytest.raises(PolicyError) as caught:
        parse("polcy: ci\nidle: soon\n")
    assert [p.path for p in caught.value.problems] == ["polcy", "idle"]


def test_yaml_that_is_not_safe_is_refused_with_the_file_named():
    with pytest.raises(PolicyError) as caught:
        parse("policy: ci\npolicy: untrusted\n", file="/c/config.yaml")
    assert caught.value.problems[0].file == "/c/config.yaml"


def test_the_environment_is_parsed_and_named_in_its_errors():
    env = settings.parse_environment({"SANDBOX_POLICY": "read-only", "SANDBOX_PORTS": "8080, 3000:80",
                                      "SANDBOX_CA_FILES": "~/a.pem:/b.pem", "SANDBOX_IDLE": ""}, home="/h", **KNOWN)
    assert dict(env.values) == {"policy": "read-only", "ports": ("8080", "3000:80"), "ca_files": ("/h/a.pem", "/b.pem")}
    with pytest.raises(PolicyError) as caught:
        settings.parse_environment({"SANDBOX_TIMEOUT": "later"}, home="/h", **KNOWN)
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == ("environment", "SANDBOX_TIMEOUT") and problem.hint


# ---- a repository's defaults


def split(text: str):
    from launcher.policy.yamlsafe import load_yaml

    return settings.split_repository(load_yaml(text.encode(), "/ws/.sandbox.yaml"), "/ws/.sandbox.yaml", **KNOWN)


def test_a_repository_file_is_split_into_its_layer_and_its_defaults():
    layer, defaults = split("version: 1\nlimits: {pids: 100}\ndefaults:\n  policy: ci\n  ports: [8080]\n")
    assert layer == {"version": 1, "limits": {"pids": 100}}
    assert dict(defaults.values) == {"policy": "ci", "ports": ("8080",)}


@pytest.mark.parametrize("text,key,hint", [
    ("defaults:\n  policy: ./wide.yaml\n", "defaults.policy", "not be covered by the approval"),
    ("defaults:\n  ca_files: [ca.pem]\n", "defaults.ca_files", "a repository cannot name CA files"),
    ("defaults:\n  polcy: ci\n", "defaults.polcy", "did you mean 'policy'?"),
    ("defaults: ci\n", "defaults", "for example policy: ci"),
])
def test_a_repository_may_not_name_a_file(text, key, hint):
    with pytest.raises(PolicyError) as caught:
        split("version: 1\n" + text)
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == ("/ws/.sandbox.yaml", key) and hint in problem.hint


# ---- precedence


USER = settings.Defaults(file="/u/config.yaml", values=(("policy", "ci"), ("idle", "30m"), ("agent", "neo")))
REPO = settings.Defaults(file="/ws/.sandbox.yaml", values=(("policy", "read-only"), ("idle", "20m")))


def test_flag_beats_environment_beats_repository_beats_user_beats_builtin():
    env = settings.Defaults(file="environment", values=(("idle", "10m"),))
    got = settings.resolve(flags={"idle": ("--idle", "5m")}, env=env,
                           repository=settings.Repository(defaults=REPO, approved=True), user=USER)
    assert [(u[0]) for u in got.get("idle").unused] == ["env", "repository", "user"]
    assert (got.get("idle").source, got.get("idle").value) == ("flag", "5m")
    assert (got.get("policy").source, got.get("policy").value, got.get("policy").where) == ("repository", "read-only",
                                                                                           "/ws/.sandbox.yaml")
    assert (got.get("agent").source, got.get("agent").value) == ("user", "neo")
    assert (got.get("timeout").source, got.get("timeout").value) == ("built-in", None)
    assert settings.shown(got.get("timeout")) == "the policy's limits.timeout"
    without_flag = settings.resolve(flags={}, env=env, repository=None, user=USER)
    assert (without_flag.get("idle").source, without_flag.get("idle").where) == ("env", "SANDBOX_IDLE")


def test_an_unapproved_repository_sets_nothing_and_says_what_and_why():
    got = settings.resolve(flags={}, env=settings.Defaults(), user=USER,
                           repository=settings.Repository(defaults=REPO, approved=False, why="not approved (sha256 x)"))
    assert (got.get("policy").source, got.get("policy").value) == ("user", "ci")
    assert (got.get("idle").source, got.get("idle").value) == ("user", "30m")
    assert got.ignored == ("/ws/.sandbox.yaml: defaults.policy: read-only is not applied: not approved (sha256 x)",
                           "/ws/.sandbox.yaml: defaults.idle: 20m is not applied: not approved (sha256 x)")


# ---- the CLI: `sandbox config`, and a command that takes the default


@pytest.fixture
def place(tmp_path, monkeypatch):
    (tmp_path / "ws").mkdir()
    (tmp_path / "config" / "sandbox").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*argv: str):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(argv), catch_exceptions=False)


def user_file(place, text: str) -> str:
    path = place / "config" / "sandbox" / "config.yaml"
    path.write_text(text)
    return str(path)


def config_json(*argv: str) -> dict:
    result = invoke("config", "-w", "ws", "--json", *argv)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_sandbox_config_shows_each_key_its_value_and_its_source(place, monkeypatch):
    path = user_file(place, "version: 1\npolicy: ci\nidle: 30m\nports: [8080]\n")
    monkeypatch.setenv("SANDBOX_IDLE", "10m")
    got = config_json()
    assert [got[k] for k in ("command", "ok", "exit_code", "error")] == ["config", True, 0, ""]
    by_key = {s["key"]: s for s in got["settings"]}
    assert set(by_key) == {k.name for k in settings.KEYS}
    assert (by_key["policy"]["value"], by_key["policy"]["source"], by_key["policy"]["where"]) == ("ci", "user", path)
    assert (by_key["idle"]["value"], by_key["idle"]["source"], by_key["idle"]["where"]) == ("10m", "env", "SANDBOX_IDLE")
    assert by_key["idle"]["unused"] == [{"source": "user", "where": path, "value": "30m"}]
    assert (by_key["agent"]["value"], by_key["agent"]["source"]) == (None, "built-in")
    assert by_key["policy"]["options"] == "--policy of check, compile, explain, run, up"
    assert by_key["session"]["options"] == "--timeout of up" and by_key["timeout"]["options"] == "--timeout of run"
    assert by_key["ca_files"]["options"] == "--ca-bundle of images build; the agent image run and up build when it is missing"
    text = invoke("config", "-w", "ws")
    assert text.exit_code == 0
    assert any(line.split()[:3] == ["policy", "ci", "user"] for line in text.stdout.splitlines()), text.stdout
    assert any(line.split()[:3] == ["idle", "10m", "env"] for line in text.stdout.splitlines()), text.stdout


def test_a_bad_config_file_is_exit_120_with_file_key_expected_hint_and_no_traceback(place):
    path = user_file(place, "polcy: ci\n")
    for argv in (("config",), ("compile", "-w", "ws")):
        result = invoke(*argv)
        assert result.exit_code == 120, result.stderr
        assert f"{path}: polcy: expected one of the keys" in result.stderr and "hint: did you mean 'policy'?" in result.stderr
        assert "Traceback" not in result.stderr
    got = json.loads(invoke("config", "--json").stdout)
    assert got["exit_code"] == 120 and got["problems"][0]["path"] == "polcy" and got["problems"][0]["file"] == path


def test_compile_takes_the_user_files_preset_and_a_flag_beats_it(place):
    user_file(place, "policy: read-only\n")
    result = invoke("compile", "-w", "ws")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["policy_name"] == "read-only"
    assert f"defaults: policy read-only (user {place}/config/sandbox/config.yaml)" in result.stderr
    flagged = invoke("compile", "-w", "ws", "--policy", "ci")
    assert json.loads(flagged.stdout)["policy_name"] == "ci" and "defaults:" not in flagged.stderr


def test_the_environment_beats_the_user_file(place, monkeypatch):
    user_file(place, "policy: read-only\n")
    monkeypatch.setenv("SANDBOX_POLICY", "ci")
    assert json.loads(invoke("compile", "-w", "ws").stdout)["policy_name"] == "ci"


def test_a_repository_default_applies_only_once_approved(place):
    user_file(place, "policy: read-only\n")
    (place / "ws" / ".sandbox.yaml").write_text("version: 1\ndefaults:\n  policy: ci\n")
    unapproved = invoke("compile", "-w", "ws", "--ignore-repo-policy")
    assert json.loads(unapproved.stdout)["policy_name"] == "read-only"
    refused = invoke("compile", "-w", "ws")   # not approved, no terminal: refused as before
    assert refused.exit_code == 120
    assert "defaults.policy: ci is not applied: the file is not approved" in refused.stderr
    by_key = {s["key"]: s for s in config_json()["settings"]}
    assert (by_key["policy"]["value"], by_key["policy"]["source"]) == ("read-only", "user")
    assert invoke("trust", "approve", "-w", "ws", "--yes").exit_code == 0
    approved = invoke("compile", "-w", "ws")
    assert approved.exit_code == 0, approved.stderr
    assert json.loads(approved.stdout)["policy_name"] == "ci"
    by_key = {s["key"]: s for s in config_json()["settings"]}
    assert (by_key["policy"]["value"], by_key["policy"]["source"]) == ("ci", "repository")
    (place / "ws" / ".sandbox.yaml").write_text("version: 1\ndefaults:\n  policy: devcontainer\n")   # changed
    by_key = {s["key"]: s for s in config_json()["settings"]}
    assert (by_key["policy"]["value"], by_key["policy"]["source"]) == ("read-only", "user")


def test_a_pinned_repository_applies_its_defaults_and_an_ignored_one_does_not(place):
    import hashlib

    data = b"version: 1\ndefaults:\n  policy: ci\n"
    (place / "ws" / ".sandbox.yaml").write_bytes(data)
    pin = hashlib.sha256(data).hexdigest()
    assert json.loads(invoke("compile", "-w", "ws", "--trust-repo-policy", pin).stdout)["policy_name"] == "ci"
    by_key = {s["key"]: s for s in config_json("--ignore-repo-policy")["settings"]}
    assert (by_key["policy"]["value"], by_key["policy"]["source"]) == (None, "built-in")


def test_run_takes_the_user_files_defaults_into_its_request(place, monkeypatch):
    """No engine: the session's run is replaced by one that keeps the request it was given."""
    from launcher.cli import launch

    asked = []

    class Stop(Exception):
        pass

    class Library:
        def run(self, request, console, timings=None):
            asked.append(request)
            raise Stop

    monkeypatch.setattr(launch, "session", lambda timings=None: Library())
    path = user_file(place, "policy: read-only\ntimeout: 2h\nagent: neo\nca_files: [corp.pem]\n")
    assert invoke("run", "-w", "ws", "--", "true").exit_code == 125   # Stop: an internal error to the CLI
    (request,) = asked
    assert (request.policy, request.options.timeout, request.options.agent.name) == ("read-only", "2h", "neo")
    assert request.options.origins == (("timeout", "user", path),)
    assert request.options.agent.ca_files == (f"{place}/config/sandbox/corp.pem",)   # for a build of its image
    invoke("run", "-w", "ws", "--timeout", "5m", "-p", "ci", "--", "true")
    assert (asked[1].policy, asked[1].options.timeout, asked[1].options.origins) == ("ci", "5m", ())


def test_a_limit_from_a_settings_file_is_that_files_ceiling_not_the_command_lines_request(place):
    """Under --strict (or CI=true) a --timeout a ceiling shortened is refused; the same value from the
    user's file is a user ceiling like the user's policy layer: noted, never a failure."""
    from launcher.pipeline import pipeline

    with pytest.raises(PolicyError) as caught:
        pipeline.layered("untrusted", "ws", pipeline.LayerOptions(timeout="2h", strict=True))
    assert caught.value.problems[0].file == "command line --timeout"
    result = pipeline.layered("untrusted", "ws", pipeline.LayerOptions(
        timeout="2h", strict=True, origins=(("timeout", "user", "/u/config.yaml"),)))
    assert result.effective.policy.limits.timeout_seconds == 30 * 60
    shorter = pipeline.layered("untrusted", "ws", pipeline.LayerOptions(
        timeout="5m", strict=True, origins=(("timeout", "user", "/u/config.yaml"),)))
    decided = {d.field: d.decided_by for d in shorter.effective.decisions}
    assert shorter.effective.policy.limits.timeout_seconds == 300 and decided["limits.timeout"] == "user /u/config.yaml"


def test_a_ca_file_that_is_missing_is_named_with_its_file_and_key_before_the_engine_is_asked(place, monkeypatch):
    path = user_file(place, "ca_files: [corp.pem]\n")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")   # never reached
    result = invoke("images", "build")
    assert result.exit_code == 120, result.stderr
    assert f"{path}: ca_files: expected a value --ca-bundle takes" in result.stderr
    assert "corp.pem' does not exist" in result.stderr and "Traceback" not in result.stderr


def test_the_agent_image_a_run_builds_trusts_the_settings_ca_files(monkeypatch):
    """session.ready builds a missing agent image with the AgentChoice's CA files, else the host's."""
    from types import SimpleNamespace

    from launcher.engine import images
    from launcher.launch import session
    from launcher.pipeline import pipeline

    built = []
    monkeypatch.setattr(images, "build_agent", lambda engine, name, status, cas: built.append([str(p) for p in cas]))
    monkeypatch.setattr(images, "ensure_for", lambda *a, **k: None)
    monkeypatch.setattr(images, "extra_ca_files", lambda: ["host.crt"])
    planned = SimpleNamespace(plan=SimpleNamespace(container=SimpleNamespace(image="img", mounts=()), proxy=None, copy=None, home=None,
                                                  image_build=None))
    listener = SimpleNamespace(status=lambda message: None)
    session.ready(None, planned, pipeline.AgentChoice(name="claude-code", ca_files=("/corp.pem",)), listener)
    session.ready(None, planned, pipeline.AgentChoice(name="claude-code"), listener)
    assert built == [["/corp.pem"], ["host.crt"]]


def test_ports_reach_a_port_option_once_a_command_has_one(place):
    """`up --port` (another branch) is `--port`, named `ports`, repeatable: the key fills it as given."""
    import click

    from launcher.cli.options import Defaulted

    seen = []

    @click.command(cls=Defaulted, defaults={"ports": "--port", "idle": "--idle"})
    @click.option("--workspace", "-w", default=".")
    @click.option("--port", "ports", multiple=True)
    def up(workspace, ports):
        seen.append(ports)

    user_file(place, "ports: [8080, \"3000:80\"]\nidle: 5m\n")   # idle: this command has no --idle, skipped
    assert CliRunner().invoke(up, ["-w", "ws"], catch_exceptions=False).exit_code == 0
    assert CliRunner().invoke(up, ["-w", "ws", "--port", "9000"], catch_exceptions=False).exit_code == 0
    assert seen == [("8080", "3000:80"), ("9000",)]
