"""Claude Code (npm @anthropic-ai/claude-code): a native binary, Anthropic Messages API over SSE.

Sources: https://code.claude.com/docs/en/env-vars (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY sent as
x-api-key, DISABLE_AUTOUPDATER, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, apiKeyHelper);
https://developers.cloudflare.com/ai-gateway/integrations/coding-agents/claude-code/ (a gateway as
ANTHROPIC_BASE_URL, without /v1); observed in tests/test_agents_real.py."""

import json

from launcher.agents.profile import PLACEHOLDER_KEY, AgentProfile, ModelWiring, Package

# Interactive first start, verified through a pty: without these it shows the onboarding (whose
# connectivity check to api.anthropic.com then fails: "Unable to connect to Anthropic services"),
# asks whether to use the API key from the environment (approved by its last 20 characters), asks to
# trust /workspace (the policy's workspace.target), and asks to accept bypass-permissions mode.
STATE = {"hasCompletedOnboarding": True,
         "customApiKeyResponses": {"approved": [PLACEHOLDER_KEY[-20:]], "rejected": []},
         "projects": {"/workspace": {"hasTrustDialogAccepted": True}}}
SETTINGS = {"skipDangerousModePermissionPrompt": True}   # or "bypassPermissionsModeAccepted" in ~/.claude.json

PROFILE = AgentProfile(
    name="claude-code",
    summary="Anthropic's Claude Code CLI, headless with -p; its own permission prompts off (the container is the boundary)",
    image="claude-code",
    package=Package(registry="npm", name="@anthropic-ai/claude-code", version="2.1.332"),
    command="claude",
    headless=("claude", "-p", "{task}", "--dangerously-skip-permissions"),
    interactive=("claude", "--dangerously-skip-permissions"),
    # Sessions: ~/.claude/projects/-workspace/<id>.jsonl (the directory named after the working
    # directory); --continue takes the newest there and resends the whole conversation.
    resume=("claude", "--continue", "-p", "{task}", "--dangerously-skip-permissions"),
    # ~/.claude.json is replaced by temp file + rename: the home must be a directory mount, never a
    # bind-mounted single file (EBUSY). It also writes /tmp/claude-<uid>/ (needs a writable /tmp).
    home_paths=(".claude", ".claude.json"),
    seed_files={".claude.json": json.dumps(STATE) + "\n", ".claude/settings.json": json.dumps(SETTINGS) + "\n"},
    workspace_config=(".claude", ".mcp.json"),   # settings.json hooks, commands, MCP servers
    env={
        # Without these it CONNECTs to api.anthropic.com three times a run (telemetry, update check).
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    },
    model=ModelWiring(
        api="anthropic-messages",
        upstream="https://api.anthropic.com",
        header="x-api-key: {value}",
        env={"ANTHROPIC_BASE_URL": "{endpoint}"},   # Claude appends /v1/messages itself
        # Without a key it exits "Not logged in · Please run /login". ANTHROPIC_API_KEY is
        # secret-shaped. The file alternative (apiKeyHelper, a command printing the key) works, but
        # then Claude sends the placeholder as x-api-key AND as Authorization: Bearer, and the proxy
        # replaces only x-api-key: it would have to drop Authorization toward Anthropic too.
        key_env="ANTHROPIC_API_KEY",
        key_files={".claude/settings.json": json.dumps(SETTINGS | {"apiKeyHelper": f"echo {PLACEHOLDER_KEY}"}) + "\n"},
    ),
    ca_env={"NODE_EXTRA_CA_CERTS": "extra", "SSL_CERT_FILE": "bundle"},
    hosts=(),
    blocked=(),
    verified="2.1.332: one Bash tool call + final answer against images/model-api, plain docker run "
             "(read-only root, tmpfs home), exit 0, no other host tried (tests/test_agents_real.py); `resume` in a new "
             "sandbox with home.mode volume resends the first session and its tool call runs, through run and "
             "through up after down (tests/test_agents_state.py)",
)
