"""aider (PyPI aider-chat): Python, OpenAI chat completions through litellm; it edits files through
its edit formats (no shell tool needed).

Sources: https://aider.chat/docs/llms/openai-compat.html (OPENAI_API_BASE, OPENAI_API_KEY, model
prefix openai/); https://aider.chat/docs/config/options.html (--yes-always, --no-auto-commits,
--chat-history-file, --input-history-file, --no-show-model-warnings); https://aider.chat/docs/config/dotenv.html
(.env from home, repo root and cwd: a hostile repository's .env is read); observed in tests/test_agents_real.py."""

from launcher.agents.profile import PLACEHOLDER_KEY, AgentProfile, ModelWiring, Package

PROFILE = AgentProfile(
    name="aider",
    summary="aider, headless with --message; --yes-always answers its confirmations (the container is the boundary)",
    image="aider",
    package=Package(registry="pypi", name="aider-chat", version="0.86.2"),
    command="aider",
    headless=("aider", "--model", "openai/MODEL", "--message", "{task}", "--yes-always", "--no-auto-commits",
              "--no-show-model-warnings"),
    interactive=("aider", "--model", "openai/MODEL", "--no-auto-commits"),   # it asks before it creates files
    # ~/.aider/ (analytics.json, installs.json, caches/); the chat and input histories would land in
    # the workspace (.aider.chat.history.md, .aider.input.history) unless moved into the home.
    home_paths=(".aider", ".aider.conf.yml"),
    workspace_config=(".aider.conf.yml", ".env", ".aider.model.settings.yml", ".aider.model.metadata.json"),
    # In a workspace that is not a git repository, --yes-always makes aider `git init` it; in one that
    # is, it appends `.aider*` to .gitignore unless told not to. Its repo-map cache
    # (.aider.tags.cache.v4/) is still written into the repository root (no option moves it).
    env={
        "AIDER_CHAT_HISTORY_FILE": "/home/agent/.aider/chat.history.md",
        "AIDER_INPUT_HISTORY_FILE": "/home/agent/.aider/input.history",
        "AIDER_GITIGNORE": "false",
    },
    model=ModelWiring(
        api="openai-chat",
        upstream="https://api.openai.com",
        header="Authorization: Bearer {value}",
        env={"OPENAI_API_BASE": "{endpoint}/v1"},
        # litellm refuses to call without a key. Secret-shaped; the file alternative is aider's own
        # config file in the home (a repository's .aider.conf.yml is read after it and may override).
        key_env="OPENAI_API_KEY",
        key_files={".aider.conf.yml": f"openai-api-key: {PLACEHOLDER_KEY}\n"},
    ),
    ca_env={"SSL_CERT_FILE": "bundle"},   # httpx under litellm: not REQUESTS_CA_BUNDLE
    hosts=(),
    # aider's own model-price cache (~/.aider/caches) is fetched from raw.githubusercontent.com once
    # per fresh home (one line of output, harmless when blocked); litellm's copy is off in the image.
    blocked=("raw.githubusercontent.com",),
    verified="0.86.2: one whole-file edit (stream) against images/model-api, plain docker run "
             "(read-only root, tmpfs home), exit 0 (tests/test_agents_real.py)",
)
