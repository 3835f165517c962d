"""The real agent CLIs (Claude Code, Codex, Gemini CLI, aider, opencode) from their registries, in
their agent images, each driven by our scripted stand-in model API (images/model-api) through one
shell tool call (aider: one file edit) and a final answer: headless, in a terminal (pty), and over TLS
trusting an extra CA through the profile's CA variables. Plain `docker run` with a read-only root and
a tmpfs home owned by the agent: this proves the CLIs and their profiles, not the sandbox (see
test_agents_launcher.py). Building the images needs the registries; the runs reach only our containers."""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import pty
import struct
import subprocess
import termios
import time
import uuid

import pytest

from conftest import read_until
from launcher import agents
from launcher.engine import images

pytestmark = [pytest.mark.engine, pytest.mark.slow]
MODEL_API = "model-api"             # the stand-in's alias on the test network
ENDPOINT = f"http://{MODEL_API}:80"  # stands in for SANDBOX_ENDPOINT_MODEL (the proxy's endpoint)
TLS_HOST = "model-tls"               # the same stand-in over TLS, its certificate from a private CA
LABEL = "dev.sandbox.test=agents-real"
TASK = "Create the marker file the task runner expects."

# Before the task: aider, a workspace that is not a repository. Codex 0.171 offers its own models
# (the default gpt-6.2-sol) only "code mode", one custom tool `exec` taking JavaScript that calls
# tools.exec_command; a model it does not know gets the classic function tools (exec_command): both.
EXTRA_ARGS = {"aider": ["--edit-format", "whole", "--no-git"]}
UNKNOWN_MODEL = ["--model", "stand-in"]
API_PATHS = {"claude-code": "/v1/messages", "codex": "/v1/responses", "gemini-cli": ":streamGenerateContent",
             "aider": "/v1/chat/completions", "opencode": "/v1/messages"}


def docker(*argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def model_api(engine):
    """The stand-in model API alone on an internal network (no way out), expecting a random key;
    yields (network, key, its request log as a function, a function emptying that log)."""
    from conftest import model_api_network

    images.build(engine, images.model_api_image(), lambda line: None)
    key = "test-" + uuid.uuid4().hex
    network = f"sandbox-test-agents-{os.getpid()}"
    with model_api_network(network, MODEL_API, LABEL, key) as (log, reset):
        yield network, key, log, reset


def docker_run(profile: agents.AgentProfile, image: str, network: str, key: str, workspace, argv: list[str],
               key_in_file: bool = False, tty: bool = False, endpoint: str = ENDPOINT,
               options: list[str] = ()) -> list[str]:
    """`docker run` of argv in the agent image, locked down as the sandbox will be (minus the probe and
    the proxy): read-only root, tmpfs home of uid 1000, all capabilities dropped, internal network.
    HTTPS_PROXY points at the stand-in, which logs and refuses every CONNECT: any host a CLI tries
    besides its model API shows up in its log. The profile's placeholder key is replaced by the test
    key (the proxy's job in a sandbox); with key_in_file it is in a home file, not in a variable."""
    def keyed(text: str) -> str:   # Claude Code approves a key by its last 20 characters
        return text.replace(agents.PLACEHOLDER_KEY, key).replace(agents.PLACEHOLDER_KEY[-20:], key[-20:])

    env = {name: keyed(value) for name, value in profile.environment(endpoint, key_in_file).items()}
    env |= {"HTTPS_PROXY": ENDPOINT, "HTTP_PROXY": ENDPOINT, "NO_PROXY": f"{MODEL_API},{TLS_HOST}"}
    assert key in "".join(env.values()) or key_in_file, "the profile wires no key"
    files = {path: keyed(text) for path, text in profile.home_files(endpoint, key_in_file).items()}
    if files:   # the home is a fresh tmpfs: write the profile's files into it, then exec the CLI unchanged
        seed = "".join(f'mkdir -p "$HOME/$(dirname {path})" && printf %s "$SEED_{i}" > "$HOME/{path}" && '
                       for i, path in enumerate(files))
        env |= {f"SEED_{i}": text for i, text in enumerate(files.values())}
        argv = ["sh", "-c", seed + 'exec "$@"', "seed", *argv]
    options = [*options, "--rm", "--name", f"{network}-{profile.name}", "--label", LABEL, "--network", network,
               "-u", "1000:1000", "--read-only", "--tmpfs", "/tmp",
               "--tmpfs", "/home/agent:uid=1000,gid=1000,mode=0700",
               "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
               "-v", f"{workspace}:/workspace", "-w", "/workspace", *(["-it", "-e", "TERM=xterm-256color"] if tty else [])]
    for name, value in env.items():
        options += ["-e", f"{name}={value}"]
    return ["docker", "run", *options, image, *argv]


def run_cli(profile: agents.AgentProfile, image: str, network: str, key: str, workspace,
            key_in_file: bool = False, extra: list[str] = (), timeout: float = 300, **more) -> subprocess.CompletedProcess:
    """The profile's headless command (extra flags before the task) in docker_run."""
    at = profile.headless.index("{task}")
    at -= profile.headless[at - 1].startswith("-")   # before `--message {task}`, not between them
    argv = [*profile.headless[:at], *EXTRA_ARGS.get(profile.name, []), *extra, *profile.headless[at:]]
    argv = [a.replace("{task}", TASK).replace("openai/MODEL", "openai/stand-in") for a in argv]
    command = docker_run(profile, image, network, key, workspace, argv, key_in_file, **more)
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:   # some CLIs retry an untrusted certificate for minutes
        docker("rm", "-f", f"{network}-{profile.name}", check=False)
        return subprocess.CompletedProcess(command, 124, exc.stdout or "", exc.stderr or "")


@pytest.mark.parametrize("name, key_in_file, extra", [
    ("claude-code", False, []), ("codex", False, []), ("gemini-cli", False, []), ("aider", False, []),
    ("opencode", False, []), ("codex", False, UNKNOWN_MODEL), ("claude-code", True, []), ("gemini-cli", True, []),
    ("aider", True, []),
], ids=["claude-code", "codex", "gemini-cli", "aider", "opencode", "codex-unknown-model",
        "claude-code-key-file", "gemini-cli-key-file", "aider-key-file"])
def test_real_cli_makes_one_tool_call_and_answers(name, key_in_file, extra, engine, model_api, tmp_path):
    network, key, log, reset = model_api
    profile = agents.get(name)
    image = images.build_agent(engine, profile.image, lambda line: None, images.extra_ca_files())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    reset()

    done = run_cli(profile, image.tag, network, key, workspace, key_in_file, extra)

    requests = log()
    summary = "\n".join(f"{r['method']} {r['path']} -> {r['status']} {r['answer']}" for r in requests)
    said = f"{name} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{summary}"
    assert done.returncode == 0, said
    marker = workspace / f"marker-{name}.txt"
    assert marker.is_file() and marker.read_text() == "done\n", said
    assert (marker.stat().st_uid, marker.stat().st_gid) == (1000, 1000)
    api = [r for r in requests if API_PATHS[name] in r["path"]]
    # The sandbox gives a CLI the profile's placeholder and the proxy puts the real header on; here
    # the CLI talks to the stand-in directly, holding the test key in the placeholder's place.
    header, _, template = profile.model.header.partition(": ")
    assert api and all(r["headers"].get(header.lower()) == template.format(value=key) for r in api), summary
    if key_in_file and name == "claude-code":   # apiKeyHelper's key goes out in both headers
        assert all(r["headers"].get("authorization") == f"Bearer {key}" for r in api)
    # A request offering no tools gets plain "text" (opencode asks for a session title beside the
    # task, sometimes between the tool call and the final answer): not part of the sequence.
    answers = [r["answer"] for r in api if r["answer"] != "text"]
    # aider edits through its whole-file format in one answer; the others call the shell tool, then get
    # asked again with its result.
    assert answers[-2:] == (["edit"] if name == "aider" else ["tool_call", "final"])[-2:], summary
    tried = sorted({r["path"] for r in requests if r["method"] == "CONNECT"})
    assert len(tried) == len(profile.blocked) and all(fnmatch.filter(tried, f"{p}:443") for p in profile.blocked), tried
    assert not [r for r in requests if r["status"] >= 400 and r["method"] != "CONNECT"], summary


# What each TUI shows once its prompt is ready (a single word: escape codes sit between words).
READY = {"claude-code": b"agents", "codex": b"shortcuts", "gemini-cli": b"YOLO", "opencode": b"commands"}


@pytest.mark.parametrize("name", sorted(READY))
def test_the_cli_in_a_terminal_starts_without_dialogs_and_works(name, engine, model_api, tmp_path):
    """The profile's interactive command in a pty (what `sandbox up --agent NAME` gives): no first-run
    dialog stands in the way (Claude Code's seed files skip onboarding, the key question, the folder
    trust and the bypass-permissions warning), so a task typed at once gets done."""
    network, key, log, reset = model_api
    profile = agents.get(name)
    image = images.build_agent(engine, profile.image, lambda line: None, images.extra_ca_files())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    reset()
    command = docker_run(profile, image.tag, network, key, workspace, list(profile.interactive), tty=True)
    if profile.exec_tmp:
        command[command.index("/tmp")] = "/tmp:exec"
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(command[0], command)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    try:
        shown = read_until(fd, READY[name], 60)
        assert READY[name] in shown, shown[-3000:].decode(errors="replace")
        time.sleep(1)
        os.write(fd, TASK.encode())
        time.sleep(1)
        os.write(fd, b"\r")
        marker = workspace / f"marker-{name}.txt"
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            shown += read_until(fd, b"\x00never", 1)
        assert marker.is_file(), shown[-3000:].decode(errors="replace")
        def answered() -> list[str]:   # the model's answers, from its first tool call on
            answers = [r["answer"] for r in log() if API_PATHS[name] in r["path"]]
            return answers[answers.index("tool_call"):] if "tool_call" in answers else []

        # The marker appears before the CLI sends the tool's result back: wait for that request too.
        # (Codex's TUI also prewarms a request of its own at start: the first answer may be repeated.)
        while "final" not in answered() and time.monotonic() < deadline + 30:
            shown += read_until(fd, b"\x00never", 1)
        assert "final" in answered(), shown[-3000:].decode(errors="replace")
    finally:
        docker("rm", "-f", f"{network}-{name}", check=False)
        os.waitpid(pid, 0)
        os.close(fd)


# A private CA and the stand-in's certificate, made with the agent image's openssl; extra.pem is the
# CA alone, bundle.pem the image's system CAs plus it (for variables that replace the system store).
MAKE_CA = f"""set -e; cd /tls
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out extra.pem -days 1 -subj "/CN=sandbox test CA" \\
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN={TLS_HOST} 2>/dev/null
printf 'subjectAltName=DNS:{TLS_HOST}\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
openssl x509 -req -in server.csr -CA extra.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile ext.cnf 2>/dev/null
cat /etc/ssl/certs/ca-certificates.crt extra.pem > bundle.pem; rm ca.key; chmod 644 *"""


@pytest.fixture(scope="module")
def tls_model_api(engine, model_api, tmp_path_factory):
    """The stand-in over TLS as model-tls on the test network; yields (endpoint, CA directory, log)."""
    network, key, _, _ = model_api
    tls = tmp_path_factory.mktemp("tls")
    os.chmod(tls, 0o755)
    docker("run", "--rm", "-u", "0", "--network", "none", "-v", f"{tls}:/tls", images.AGENT_IMAGE, "sh", "-c", MAKE_CA)
    name = f"{network}-model-tls"
    try:
        docker("run", "-d", "--name", name, "--label", LABEL, "--network", network, "--network-alias", TLS_HOST,
               "-v", f"{tls}:/tls:ro", "-e", "MODEL_API_TLS_CERT=/tls/server.pem", "-e", "MODEL_API_TLS_KEY=/tls/server.key",
               "-e", f"MODEL_API_EXPECTED_KEY={key}", images.model_api_image().tag)
        deadline = time.monotonic() + 30
        while "READY" not in docker("logs", name).stdout and time.monotonic() < deadline:
            time.sleep(0.2)
        yield f"https://{TLS_HOST}", tls, lambda: [json.loads(line) for line in docker(
            "exec", name, "cat", "/tmp/requests.jsonl", check=False).stdout.splitlines()]
    finally:
        docker("rm", "-f", name, check=False)


def run_against_tls(name, ca_env, engine, model_api, tls_model_api, tmp_path, timeout=300):
    network, key, _, _ = model_api
    endpoint, tls, _ = tls_model_api
    profile = agents.get(name)
    image = images.build_agent(engine, profile.image, lambda line: None, images.extra_ca_files())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    options = ["-v", f"{tls}:/etc/sandbox-ca:ro"]
    for var, kind in ca_env.items():
        options += ["-e", f"{var}=/etc/sandbox-ca/{'extra' if kind == 'extra' else 'bundle'}.pem"]
    done = run_cli(profile, image.tag, network, key, workspace, endpoint=endpoint, options=options, timeout=timeout)
    return done, workspace / f"marker-{name}.txt"


@pytest.mark.parametrize("name", sorted(n for n, p in agents.PROFILES.items() if p.ca_env))
def test_the_cli_trusts_an_extra_ca_through_the_profiles_ca_variables(name, engine, model_api, tls_model_api, tmp_path):
    """What a policy's CA field must set for each CLI (issue 10 part 3): its ca_env, and nothing else,
    gets it through TLS to a stand-in whose certificate only the extra CA vouches for."""
    done, marker = run_against_tls(name, agents.get(name).ca_env, engine, model_api, tls_model_api, tmp_path)
    assert done.returncode == 0 and marker.is_file(), done.stdout[-2000:] + done.stderr[-2000:]
    assert any(r["method"] == "POST" and r["status"] == 200 for r in tls_model_api[2]())   # it spoke TLS to model-tls


def test_without_a_ca_variable_the_stand_ins_certificate_is_refused(engine, model_api, tls_model_api, tmp_path):
    done, marker = run_against_tls("claude-code", {}, engine, model_api, tls_model_api, tmp_path, timeout=60)
    assert done.returncode != 0 and not marker.exists()


@pytest.mark.parametrize("placeholder", ["directory", "file"])
def test_aider_needs_a_protected_missing_config_to_be_a_file(placeholder, engine, model_api, tmp_path):
    """What the launcher's protection of a missing .aider.conf.yml must look like for aider to start:
    today's empty read-only directory makes it fail (IsADirectoryError: it opens every
    .aider.conf.yml on its path); a read-only file holding `{}` (an empty YAML mapping) works."""
    network, key, _, reset = model_api
    profile = agents.get("aider")
    image = images.build_agent(engine, profile.image, lambda line: None, images.extra_ca_files())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    os.chmod(tmp_path, 0o755)
    stand_in = tmp_path / "protect"
    if placeholder == "file":
        stand_in.write_text("{}\n")
    else:
        stand_in.mkdir()
    reset()
    done = run_cli(profile, image.tag, network, key, workspace,
                   options=["-v", f"{stand_in}:/workspace/.aider.conf.yml:ro"], timeout=120)
    if placeholder == "file":
        assert done.returncode == 0 and (workspace / "marker-aider.txt").is_file(), done.stdout[-2000:] + done.stderr[-2000:]
    else:
        assert done.returncode != 0 and "IsADirectoryError" in done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(n for n, p in agents.PROFILES.items() if p.image))
def test_the_build_ca_is_in_no_layer_history_or_trust_store_of_the_image(name, engine):
    """The CA the build trusted for its downloads (the host's extra CAs) stays out of the image: not in
    its history (build args of a stage that uses them are recorded there), not in its CA bundle."""
    image = images.build_agent(engine, agents.get(name).image, lambda line: None, images.extra_ca_files())
    history = docker("history", "--no-trunc", image.tag).stdout
    assert "BEGIN CERTIFICATE" not in history and "CA_BUNDLE" not in history
    trusted = docker("run", "--rm", "--network", "none", "--entrypoint", "cat", image.tag,
                     "/etc/ssl/certs/ca-certificates.crt").stdout
    for path in images.extra_ca_files():
        body = path.read_text().split("-----BEGIN CERTIFICATE-----")[1].split()[0]   # a line of each CA
        assert body not in trusted, path
