"""The stand-in agent `neo` (examples/agent/neo, a 40-line bash script): it posts the task to
$SANDBOX_ENDPOINT_MODEL/v1/complete and applies the returned patch. Runs on the plain agent image
from the workspace; see examples/agent/README.md."""

from launcher.agents.profile import AgentProfile, ModelWiring

PROFILE = AgentProfile(
    name="neo",
    summary="the stand-in agent of the examples and CI tests (not the real neo)",
    image=None,
    package=None,
    command="examples/agent/neo",
    headless=("examples/agent/neo", "run", "{task}"),
    home_paths=(),
    workspace_config=(".neo",),
    model=ModelWiring(
        api="neo-complete",
        upstream="https://api.example.com",
        header="Authorization: Bearer {value}",
        env={},   # it reads SANDBOX_ENDPOINT_MODEL itself
    ),
    verified="tests/test_ci_example.py (through the launcher and the proxy)",
)
