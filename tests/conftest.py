"""Shared fixtures. Engine-backed tests fail (never skip) when CI=true and no engine answers."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import time
import shutil
import tempfile
from pathlib import Path

import pytest

from launcher.host import cafiles
from launcher.host.hostfacts import HostFacts
from launcher.host.hostpaths import PathFact
from launcher.policy.model import BUILTIN_PROTECTED

ROOT = Path(__file__).resolve().parent.parent

# Under CI=true a skip not listed in tests/allowed_skips.txt fails the run (hooks of tests/skiplist.py).
from skiplist import pytest_runtest_logreport, pytest_sessionfinish, pytest_sessionstart, pytest_terminal_summary  # noqa: E402,F401
# The engine marker and the engine fixtures agree (tests/markers.py).
from markers import pytest_collection_modifyitems, turn  # noqa: E402,F401


def fake_facts(workspace: str = "/home/dev/repo", *, protected_kind: str = "missing", mounts=(), env=(),
               owner=(1000, 1000), ca_files=(), ca_certs=(), protect=None, **more) -> HostFacts:
    """Host facts for a pure compiler test: nothing is read from this machine. ca_files and
    ca_certs: (PathFact, its bytes) pairs, checked as cafiles.ca_file checks what it read."""
    def checked(pairs):
        return tuple(cafiles.checked(fact.given, fact.real, fact.kind, data) for fact, data in pairs)

    return HostFacts(
        home="/home/dev", env=tuple(env),
        workspace=PathFact(given=workspace, real=workspace, kind="dir", owner=owner),
        protected=tuple(_anchor(workspace, p, protected_kind) for p in protect or (".git",) + BUILTIN_PROTECTED),
        mounts=tuple(mounts),
        runtime_sockets=("/run/docker.sock", "/run/containerd", "/var/lib/docker"),
        credential_paths=("/home/dev/.ssh", "/home/dev/.aws", "/home/dev/.docker"),
        probe_volume="sandbox-probe-test", proxy_image="sandbox/proxy:test", nonce="abc123", owner_pid=4242,
        ca_files=checked(ca_files), ca_certs=checked(ca_certs), **more,
    )


def _anchor(workspace: str, rel: str, kind: str) -> PathFact:
    # A missing path is protected at its first component (.git for .git/hooks), as hostpaths.protected_anchor does.
    given = rel.split("/")[0] if kind == "missing" else rel
    return PathFact(given=given, real=f"{workspace}/{given}", kind=kind)


@pytest.fixture(autouse=True)
def isolated_host(tmp_path_factory, monkeypatch):
    """Every test (and every launcher it starts) sees a host without the developer's own layers,
    trust store or CI summary: an org layer that sets nothing (so /etc/sandbox/policy.yaml of this
    machine is never read), no user policy, a fresh state directory."""
    home = tmp_path_factory.mktemp("host")
    org = home / "org-policy.yaml"
    org.write_text("version: 1\n")
    monkeypatch.setenv("SANDBOX_ORG_POLICY", str(org))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    for name in ("GITHUB_STEP_SUMMARY", "NO_COLOR", "SANDBOX_TIMINGS", "SANDBOX_POLICY", "SANDBOX_AGENT", "SANDBOX_TIMEOUT",
                 "SANDBOX_SESSION", "SANDBOX_IDLE", "SANDBOX_PORTS", "SANDBOX_CA_FILES",
                 "COLUMNS", "LINES"):   # pytest-xdist's workers set these two: a pipe gets whole lines
        monkeypatch.delenv(name, raising=False)
    # The shared probe volume, as before the launcher's own copy on this host (probedir.py): the
    # tests written for it keep proving it; tests of the copy on this host unset this.
    monkeypatch.setenv("SANDBOX_PROBE_VOLUME", "1")
    # No resident helper but a test's own (launcher/cli/helper.py): its socket would be under here
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))



@pytest.fixture(autouse=True)
def engine_turn(request):
    """An engine test of the beside group waits while an exclusive one runs (tests/markers.py)."""
    with turn(request.node):
        yield


def external_tool(command: str, install_hint: str) -> str:
    """Path of a tool some tests drive; such a test fails under CI=true (.ci/run installs it) and
    skips elsewhere with the hint."""
    found = shutil.which(command)
    if not found:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI=true and no {command}: .ci/run installs it")
        pytest.skip(f"no {command}: {install_hint}")
    return found


@pytest.fixture
def trusted_runsc(tmp_path, monkeypatch) -> str:
    """A runsc path that registration.untrusted finds safe for root's dockerd to run (root's, in
    root's directories), whatever this host has: a unit test never looks at the host's own runsc.
    Every other path is judged as usual."""
    from launcher.doctor import registration

    path, real = str(tmp_path / "runsc"), registration.untrusted
    monkeypatch.setattr(registration, "untrusted", lambda at: "" if at == path else real(at))
    return path


@pytest.fixture
def podman_default_seccomp(monkeypatch) -> str:
    """podman's default seccomp profile as tests/data/podman/seccomp.json has it, read by the
    pipeline instead of this host's /usr/share/containers/seccomp.json; returns its text."""
    from launcher.pipeline import pipeline
    from launcher.plan.dialects import podman as podman_dialect

    text, real = (ROOT / "tests" / "data" / "podman" / "seccomp.json").read_text(), pipeline.host.seccomp_profile_text
    monkeypatch.setattr(pipeline.host, "seccomp_profile_text",
                        lambda path: text if path == podman_dialect.PODMAN_DEFAULT else real(path))
    return text


@functools.cache
def docker_sdk():
    """The docker SDK's client, for what a test does to the engine behind the launcher's back (kill
    a container, build or remove an image, make an upstream): the launcher's Engine is not reached
    through. Connected on first use, to the engine the environment points at."""
    import docker

    return docker.from_env(timeout=300)


@contextlib.contextmanager
def script_upstream(engine, prefix: str, alias: str | tuple[str, ...], script: str, environment: dict | None = None):
    """A Python `script` (printing READY once it listens) in the upstream image, reachable as
    `alias` (or each of several names) on a fresh internal network; yields (network, function
    returning its log, container)."""
    from launcher.engine import images
    from launcher.selftest import testnet

    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, proxy=True)
    upstream_image = testnet.ensure_upstream(engine)
    api, network = docker_sdk().api, f"sandbox-test-{prefix}-{os.getpid()}"
    api.create_network(network, driver="bridge", internal=True)
    host_config = api.create_host_config(network_mode=network, ulimits=testnet.tool_ulimits(engine))
    ref = api.create_container(upstream_image, name=f"{network}-upstream", command=["python3", "-u", "-c", script],
                               environment=environment or {}, host_config=host_config,
                               networking_config=api.create_networking_config(
                                   {network: api.create_endpoint_config(aliases=[alias] if isinstance(alias, str) else list(alias))}))["Id"]
    try:
        api.start(ref)
        deadline = time.monotonic() + 30
        while b"READY" not in api.logs(ref) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield network, lambda: api.logs(ref).decode(), ref
    finally:
        api.remove_container(ref, force=True)
        api.remove_network(network)


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """A connected Engine with the bundled images built; fails in CI when there is none. At the
    end, the copies that copy-mode runs kept of this session's workspaces go (a user keeps them)."""
    from launcher.copies import store
    from launcher.engine import engine as engine_mod
    from launcher.engine import images
    from launcher.errors import EngineError

    from launcher.host import engineid

    wanted = os.environ.get("SANDBOX_TEST_ENGINE", engineid.DOCKER)
    try:
        eng = engine_mod.connect()
    except EngineError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI=true and no {wanted} engine: {exc}")
        pytest.skip(f"no {wanted} engine: {exc}")
    # The engine the run claims to test is the one it reached (DOCKER_HOST names the socket): a
    # podman run that reached Docker would pass for the wrong engine.
    reached = engineid.identify(eng.version(), {}).kind
    if reached != wanted:
        pytest.fail(f"SANDBOX_TEST_ENGINE={wanted} but the engine at DOCKER_HOST={os.environ.get('DOCKER_HOST', '')!r} "
                    f"is {reached}")
    # The full agent image builds on the slim one: both are there for every engine test (the
    # untrusted and devcontainer presets run the full one, ci and read-only the slim one).
    with turn(None):   # each xdist worker's session builds and fills alone
        images.ensure_for(eng, images.FULL_IMAGE, lambda line: None)
    yield eng
    ours = str(tmp_path_factory.getbasetemp())
    for copy in store.all_copies(eng):
        if copy.workspace.startswith(ours + "/") and not copy.users:
            store.drop(eng, copy.name)


def launch_facts(engine, policy, workspace, engine_facts=None, **more) -> HostFacts:
    """The host facts of a launch on `engine`, as the session has them after it connected: the
    engine's own facts (or `engine_facts`, a test's claim), and on podman its seccomp profile's
    state file (written). `more`: hostfacts.gather's further facts (proxy_image, …)."""
    from dataclasses import replace

    from launcher.engine import images
    from launcher.host import engineid, hostfacts, statefiles
    from launcher.pipeline import pipeline

    facts = replace(hostfacts.gather(policy, str(workspace), images.probe_volume_name(), **more),
                    engine=engine_facts or engineid.asked(engine))
    files = pipeline.engine_seccomp(facts)
    statefiles.write(files)
    return replace(facts, seccomp_profile=files[0].path) if files else facts


@pytest.fixture
def workspace(tmp_path):
    """A copy of the bundled example repository, owned by uid 1000 like a developer's checkout."""
    return make_workspace(tmp_path)


def owned_workspace(tmp_path: Path) -> Path:
    """An empty workspace of uid 1000 (the agent's, as a developer's checkout would be)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    return workspace


def make_workspace(tmp_path: Path) -> Path:
    """tmp_path/repo as the `workspace` fixture makes it (for fixtures of a wider scope too)."""
    ws = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "untrusted-repo", ws, symlinks=True)
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    for path in [ws, *ws.rglob("*")]:
        os.lchown(path, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    return ws


def read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    """What a pty (or pipe) says until `needle` shows, it closes, or `timeout` seconds pass."""
    import select

    seen, deadline = b"", time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


# The bind envelope's tests (protected paths, placeholders, the surface report) run `untrusted` on
# the host directory itself; the preset's own default, copy mode, has tests/test_copy.py.
BIND = ("--workspace-mode", "bind")


def preset(ref: str, workspace: str | None = None):
    """The effective policy a user gets for `ref` (a preset or a file): the pipeline's own loader
    (with `extends`) and layers, on `workspace` (default: an empty directory), org and user
    policies being the empty ones the autouse fixture points at."""
    from launcher.pipeline import pipeline

    return pipeline.layered(ref, workspace or _empty_workspace()).effective.policy


@functools.cache
def _empty_workspace() -> str:
    path = tempfile.mkdtemp(prefix="sandbox-preset-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def untrusted_bind():
    from dataclasses import replace

    from launcher.policy.model import WorkspaceMode

    policy = preset("untrusted")
    return replace(policy, workspace=replace(policy.workspace, mode=WorkspaceMode.BIND))



@contextlib.contextmanager
def model_api_network(network: str, alias: str, label: str, expected: str, extra_env: dict[str, str] | None = None):
    """The stand-in model API (images/model-api, built) as `alias` on a new internal network with no
    way out (nor to the host), accepting only `expected`; yields (its request log as a function, a
    function emptying that log). Both go at the end."""
    import json
    import subprocess

    from launcher.engine import images

    def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=check)

    docker("network", "create", "--internal", "--label", label, "-o", "com.docker.network.bridge.inhibit_ipv4=true",
           network)
    name = f"{network}-model-api"
    env = [f"--env={k}={v}" for k, v in {"MODEL_API_EXPECTED_KEY": expected, **(extra_env or {})}.items()]
    try:
        docker("run", "-d", "--name", name, "--label", label, "--network", network, "--network-alias", alias, *env,
               images.model_api_image().tag)
        deadline = time.monotonic() + 30
        while "READY" not in docker("logs", name).stdout and time.monotonic() < deadline:
            time.sleep(0.2)

        def log() -> list[dict]:
            out = docker("exec", name, "cat", "/tmp/requests.jsonl", check=False).stdout
            return [json.loads(line) for line in out.splitlines()]

        yield log, lambda: docker("exec", name, "sh", "-c", ": > /tmp/requests.jsonl")
    finally:
        docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)


@contextlib.contextmanager
def up_in_a_pty(command: list[str], env: dict[str, str]):
    """`sandbox up …` (with `env` added) on a 120x40 pty, once its probe passed and its shell is
    there; yields (the pty's fd, what it showed); killed at the end."""
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(env)
        os.execvp(command[0], command)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        shown = read_until(fd, b"is up until", 300)
        assert b"probe passed" in shown, shown[-3000:].decode(errors="replace")
        yield fd, shown
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)


def claude_tui_task(fd: int, workspace: Path, shown: bytes, marked=None, started: bool = False) -> bytes:
    """In an `up` shell on `fd`: start Claude's TUI (`started`: `up --agent` opened it already), type
    the stand-in's task, wait for its marker (in `workspace`, or until `marked()` says it is there: a
    copy's marker is in the sandbox)."""
    time.sleep(2)
    if not started:
        os.write(fd, b"claude --dangerously-skip-permissions\r")
    shown += read_until(fd, b"agents", 60)
    assert b"agents" in shown, shown[-3000:].decode(errors="replace")
    time.sleep(1)
    os.write(fd, b"Create the marker file.")
    time.sleep(1)
    os.write(fd, b"\r")
    marked = marked or (workspace / "marker-claude-code.txt").is_file
    deadline = time.monotonic() + 90
    while not marked() and time.monotonic() < deadline:
        shown += read_until(fd, b"\x00never", 1)
    assert marked(), shown[-3000:].decode(errors="replace")
    return shown


@pytest.fixture
def private_tempdir(tmp_path_factory, monkeypatch):
    """tempfile's directory in pytest's own (beside tmp_path, which tests may hold empty): exports a
    unit test reads and never closes (their spools, sandbox-export-*) go with it, not into /tmp."""
    root = tmp_path_factory.mktemp("tempdir")
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root
