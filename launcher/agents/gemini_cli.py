"""Google Gemini CLI (npm @google/gemini-cli): a Node program (Node >= 20), Gemini API
streamGenerateContent over SSE.

Sources: https://geminicli.com/docs/reference/configuration (settings layers: /etc/gemini-cli/settings.json
overrides user and project files; GEMINI_CLI_TRUST_WORKSPACE; .env files are read from the workspace
upwards); https://github.com/google-gemini/gemini-cli/issues/6746 and pull/1814 (GOOGLE_GEMINI_BASE_URL);
the 0.61.0 bundle itself (validateBaseUrl only parses the URL: plain http to a non-localhost host is
accepted; the https-unless-localhost rule of a later proposal is not in this version); observed in
tests/test_agents_real.py."""

from launcher.agents.profile import PLACEHOLDER_KEY, AgentProfile, ModelWiring, Package

PROFILE = AgentProfile(
    name="gemini-cli",
    summary="Google's Gemini CLI, headless with -p; --yolo approves its tool calls (the container is the boundary)",
    image="gemini-cli",
    package=Package(registry="npm", name="@google/gemini-cli", version="0.61.0"),
    command="gemini",
    headless=("gemini", "-p", "{task}", "--yolo"),
    interactive=("gemini", "--yolo"),
    home_paths=(".gemini",),   # projects.json, history/, tmp/, settings, trustedFolders.json
    workspace_config=(".gemini", ".env"),   # settings.json, .gemini/.env; the first .env upwards
    env={
        # Headless --yolo in an untrusted folder is silently downgraded to "default" approval and the
        # shell tool is then refused; the sandbox is the trust decision.
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    },
    model=ModelWiring(
        api="gemini",
        upstream="https://generativelanguage.googleapis.com",
        header="x-goog-api-key: {value}",
        # The CLI appends /v1beta/models/<model>:streamGenerateContent?alt=sse. With this variable set
        # 0.61 picks an auth type "gateway" that its own check refuses ("Invalid auth method
        # selected."): the image's system settings select gemini-api-key instead.
        env={"GOOGLE_GEMINI_BASE_URL": "{endpoint}"},
        # Required by the gemini-api-key auth method; secret-shaped. The file alternative is the CLI's
        # own .env loading (~/.gemini/.env), but the first .env found from the workspace upwards wins:
        # a repository's .env or .gemini/.env shadows it (the run then fails for want of a key).
        key_env="GEMINI_API_KEY",
        key_files={".gemini/.env": f"GEMINI_API_KEY={PLACEHOLDER_KEY}\n"},
    ),
    ca_env={"NODE_EXTRA_CA_CERTS": "extra"},   # not SSL_CERT_FILE
    hosts=(),
    blocked=(),
    verified="0.61.0: a routing call (generateContent, JSON) + one run_shell_command call + final answer "
             "against images/model-api, plain docker run (read-only root, tmpfs home), exit 0, no other host tried",
)
