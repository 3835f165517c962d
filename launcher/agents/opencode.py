"""opencode (npm opencode-ai): a native binary; here wired to the Anthropic Messages API (its tool
for the shell is `bash`, input {command, description}).

Sources: https://opencode.ai/v1/docs/pl/config.md and https://learnopencode.com/en/appendix/config-ref
(config layers: ~/.config/opencode, the project's opencode.json and .opencode/, OPENCODE_CONFIG_CONTENT,
the managed /etc/opencode on top; provider options such as baseURL and apiKey); the 1.18.33 binary's
OPENCODE_DISABLE_* variables; observed in tests/test_agents_real.py."""

import json

from launcher.agents.profile import PLACEHOLDER_KEY, AgentProfile, ModelWiring, Package

# Inline config: the provider's base URL and a placeholder key in one variable whose name is not
# secret-shaped, so nothing here trips the probe's env.secrets check.
# Only that provider: otherwise its TUI starts on opencode's own hosted models (opencode.ai).
CONFIG = json.dumps({"enabled_providers": ["anthropic"],
                     "provider": {"anthropic": {"options": {"baseURL": "{endpoint}/v1", "apiKey": PLACEHOLDER_KEY}}}})

PROFILE = AgentProfile(
    name="opencode",
    summary="opencode, headless with `opencode run`; it runs its tools without asking in run mode",
    image="opencode",
    package=Package(registry="npm", name="opencode-ai", version="1.18.33"),
    command="opencode",
    headless=("opencode", "run", "{task}"),
    # The TUI unpacks its render library into $TMPDIR and loads it: on a noexec /tmp (Docker's
    # default for tmpfs) "failed to map segment from shared object". `opencode run` needs no TUI.
    interactive=("opencode",),
    exec_tmp=True,
    # XDG dirs under the home: config (~/.config/opencode, where it also tries an npm install of
    # @opencode-ai/plugin), data (~/.local/share/opencode: opencode.db, logs), state, cache.
    home_paths=(".config/opencode", ".local/share/opencode", ".local/state/opencode", ".cache/opencode"),
    workspace_config=("opencode.json", "opencode.jsonc", ".opencode"),   # plugins, MCP servers, providers
    env={},
    model=ModelWiring(
        api="anthropic-messages",
        upstream="https://api.anthropic.com",
        header="x-api-key: {value}",
        env={"OPENCODE_CONFIG_CONTENT": CONFIG},
    ),
    ca_env={"NODE_EXTRA_CA_CERTS": "extra", "SSL_CERT_FILE": "bundle"},
    hosts=(),
    # Its background install of @opencode-ai/plugin into ~/.config/opencode asks the npm registry
    # (fails, logged as a warning, no harm); everything else is off in the image.
    blocked=("registry.*",),   # the npm registry
    verified="1.18.33: a title request + one bash tool call + final answer against images/model-api, plain "
             "docker run (read-only root, tmpfs home), exit 0 (tests/test_agents_real.py)",
)
