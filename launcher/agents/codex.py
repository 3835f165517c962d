"""OpenAI Codex CLI (npm @openai/codex): a static musl binary, OpenAI Responses API over SSE.

Sources: https://developers.openai.com/codex/config-sample (config.toml keys, CODEX_HOME,
model_providers.<id>.base_url/env_key/wire_api); https://github.com/openai/codex/issues/11698 (the
built-in openai provider ignores overrides: define an own provider); https://github.com/github/gh-aw/pull/57004
(features.plugins=false stops the plugin catalogue sync of API-key runs); https://github.com/openai/codex/issues/8350
(analytics.enabled); observed in tests/test_agents_real.py."""

from launcher.agents.profile import AgentProfile, ModelWiring, Package

# Codex 0.171 reads no base URL from the environment (OPENAI_BASE_URL is ignored: it went on to
# api.openai.com), so the provider is a config.toml in $CODEX_HOME. env_key may be any name: this one
# is not secret-shaped, so the probe's env.secrets check lets the placeholder in.
CONFIG = """\
model_provider = "sandbox"

[model_providers.sandbox]
name = "sandbox proxy"
base_url = "{endpoint}/v1"
env_key = "SANDBOX_MODEL_PLACEHOLDER"
wire_api = "responses"
"""

PROFILE = AgentProfile(
    name="codex",
    summary="OpenAI's Codex CLI, headless with `codex exec`; its bubblewrap sandbox off (it cannot run under Docker's seccomp)",
    image="codex",
    package=Package(registry="npm", name="@openai/codex", version="0.171.0"),
    command="codex",
    # --sandbox danger-full-access: bubblewrap cannot create user namespaces under Docker's seccomp
    # profile; approval is "never" in exec mode already. --skip-git-repo-check: a workspace need not be a repo.
    headless=("codex", "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "{task}"),
    # The TUI otherwise starts a background app-server from a copy of itself in ~/.codex/packages:
    # on a noexec home "Permission denied", on an exec one it then wants `ps` (not in the image).
    interactive=("codex", "--no-daemon", "--sandbox", "danger-full-access"),
    # Sessions: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl; --last takes the newest whose cwd is
    # this one. `exec resume` has no --sandbox flag and resumes read-only (its tool calls then fail
    # quietly): the config override restores what `headless` runs with.
    resume=("codex", "exec", "resume", "--last", "--skip-git-repo-check", "-c", 'sandbox_mode="danger-full-access"', "{task}"),
    # $CODEX_HOME (default ~/.codex): sqlite state, sessions, logs, installation_id. If CODEX_HOME is
    # set it must already exist ("CODEX_HOME points to ... but that path does not exist"), so the
    # profile leaves it unset and lets Codex create ~/.codex.
    home_paths=(".codex",),
    workspace_config=(".codex",),   # config.toml of a trusted project
    env={"SANDBOX_MODEL_PLACEHOLDER": "sandbox-placeholder-key"},
    model=ModelWiring(
        api="openai-responses",
        upstream="https://api.openai.com",
        header="Authorization: Bearer {value}",
        home_files={".codex/config.toml": CONFIG},
    ),
    ca_env={"SSL_CERT_FILE": "bundle"},   # not NODE_EXTRA_CA_CERTS or REQUESTS_CA_BUNDLE
    hosts=(),
    # The image's /etc/codex/config.toml (no update check, analytics or plugins) stops github.com,
    # api.github.com, chatgpt.com and ab.chatgpt.com; nothing else was tried.
    blocked=(),
    verified="0.171.0: one exec_command tool call + final answer against images/model-api, plain docker run "
             "(read-only root, tmpfs home), exit 0, no other host tried (tests/test_agents_real.py); `resume` in a new "
             "sandbox with home.mode volume resends the first session and its tool call runs, through run and "
             "through up after down (tests/test_agents_state.py)",
)
