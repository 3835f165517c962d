"""Hostile inputs at compile time: each is a clear error (exit 120, file and place named, no
traceback) within a second; and any plan the compiler accepts stays inside the envelope."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import BIND, fake_facts, untrusted_bind
from launcher.cli import main
from launcher.errors import ExitCode, PolicyError
from launcher.host import hostfacts
from launcher.pipeline import stack
from launcher.plan import compiler
from launcher.policy.policy import policy_from_raw
from launcher.policy.secrets import secret_name, secret_value
from launcher.targets import argv as render

SANDBOX = [sys.executable, "-m", "launcher"]


def cli(*args: str):
    """The CLI in this process (a real process only where that is the point): an exception that
    escapes its error handler fails the test."""
    try:
        runner = CliRunner(mix_stderr=False)   # click 8.1; later versions keep stderr apart anyway
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


HEAD = "version: 1\nname: hostile\ndescription: hostile input\n"

CASES = {
    "malformed": (HEAD + "network: {mode: none\n", "line 5"),
    "tab indentation": (HEAD + "\tlimits: {pids: 1}\n", "line 4"),
    "wrong type": (HEAD + "limits: {pids: lots}\n", "limits.pids"),
    "huge integer": (HEAD + "limits: {pids: " + "9" * 40 + "}\n", "limits.pids"),
    "unknown key": (HEAD + "netwrok: {mode: none}\n", "did you mean"),
    "duplicate key": (HEAD + "name: again\n", "duplicate key"),
    "deep flow nesting": (HEAD + "env: {set: " + "[" * 5000 + "]" * 5000 + "}\n", "nested deeper"),
    "deep block nesting": (HEAD + "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n", "nesting deeper"),
    "alias bomb": (HEAD + "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                   "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\n", "aliases"),
    "not a mapping": ("- version: 1\n", "expected a mapping"),
    "empty file": ("", "version"),
    "NUL byte": (HEAD + "env: {set: {A: \"x\0y\"}}\n", "unacceptable character"),
    "env value with a newline": (HEAD + "env: {set: {A: \"one\\ntwo\"}}\n", "env.set.A"),
    "mount target with ..": (HEAD + "mounts: [{source: /tmp, target: /workspace/../etc}]\n", "mounts[0].target"),
    "relative tmpfs target": (HEAD + "tmpfs: [{target: tmp, size: 1m}]\n", "tmpfs[0].target"),
    "secret literal": (HEAD + "env: {set: {TOKEN_X: ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}}\n", "env.set"),
}
BINARY = {
    "not UTF-8": (HEAD.encode() + b"description: \xff\xfe\n", "UTF-8"),
    "huge file": (HEAD.encode() + b"# " + b"x" * (300 * 1024) + b"\n", "bytes"),
}


def _refused_quickly(path, workspace):
    start = time.perf_counter()
    with pytest.raises(PolicyError) as info:
        policy = stack.load_base(str(path)).policy
        compiler.compile_policy(policy, fake_facts(str(workspace)))
    assert time.perf_counter() - start < 1.0
    return str(info.value)


@pytest.mark.parametrize("name", list(CASES) + list(BINARY))
def test_hostile_policy_files_are_clear_errors_within_a_second(name, tmp_path):
    text, fragment = CASES[name] if name in CASES else BINARY[name]
    path = tmp_path / "hostile policy.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    message = _refused_quickly(path, tmp_path)
    assert str(path) in message and fragment in message, message
    result = cli("compile", "-p", str(path), "-w", str(tmp_path))
    assert result.exit_code == ExitCode.POLICY_INVALID and "Traceback" not in result.stderr
    assert fragment in result.stderr


@pytest.mark.parametrize("name", ["deep flow nesting", "deep block nesting"])
def test_a_real_process_refuses_deep_nesting_without_a_traceback(name, tmp_path):
    """As above, in a fresh process (its own stack and recursion limit, not the test runner's)."""
    text, fragment = CASES[name]
    path = tmp_path / "hostile policy.yaml"
    path.write_text(text)
    result = subprocess.run(SANDBOX + ["compile", "-p", str(path), "-w", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == ExitCode.POLICY_INVALID and "Traceback" not in result.stderr
    assert fragment in result.stderr


@pytest.mark.parametrize("dirname", ["with space", "co:lon", "com,ma", "new\nline", "back\\slash", "tab\there"])
def test_odd_workspace_names_compile_exactly_or_are_refused_clearly(dirname, tmp_path):
    ws = tmp_path / dirname
    ws.mkdir()
    result = cli("compile", *BIND, "-w", str(ws))
    assert "Traceback" not in result.stderr
    if result.exit_code == 0:
        import json

        plan = json.loads(result.stdout)
        binds = [m for m in plan["container"]["mounts"] if m["target"] == "/workspace"]
        assert [m["source"] for m in binds] == [str(ws)]
        argv = cli("compile", *BIND, "-w", str(ws), "--format", "argv")
        assert argv.exit_code == 0 and "Traceback" not in argv.stderr
    else:
        assert result.exit_code == ExitCode.POLICY_INVALID and "--workspace" in result.stderr


def test_a_workspace_path_through_dotdot_is_resolved(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "ws").mkdir()
    result = subprocess.run(SANDBOX + ["compile", "-w", str(tmp_path / "a" / ".." / "ws")], capture_output=True, text=True)
    assert result.returncode == 0 and f'"source": "{tmp_path / "ws"}"' in result.stdout


def test_a_workspace_that_is_a_symlink_to_root_is_refused_on_the_command_line(tmp_path):
    (tmp_path / "ws").symlink_to("/")
    result = subprocess.run(SANDBOX + ["run", *BIND, "-w", str(tmp_path / "ws"), "--", "true"], capture_output=True, text=True)
    assert result.returncode == ExitCode.POLICY_INVALID and "Traceback" not in result.stderr


def test_symlinks_into_the_host_inside_the_workspace_mount_nothing_extra(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "etc-link").symlink_to("/etc")
    (ws / "home-link").symlink_to(os.path.expanduser("~"))
    policy = untrusted_bind()
    plan = compiler.compile_policy(policy, hostfacts.gather(policy, str(ws), "probe-vol"))
    sources = {m.source for m in plan.container.mounts if m.kind.value == "bind"}
    assert all(s == str(ws) or s.startswith(str(ws) + "/") for s in sources), sources


# --- property: whatever the compiler accepts stays inside the envelope --------------------------

CAPS = ["CHOWN", "NET_BIND_SERVICE", "SETUID", "SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "NET_RAW", "DAC_READ_SEARCH",
        "SYS_MODULE", "MKNOD", "KILL", "ALL"]
NAMES = st.sampled_from(["LANG", "CI", "GITHUB_TOKEN", "MY_SECRET", "DOCKER_HOST", "AWS_REGION", "X", "api_key", "PATH"])
VALUES = st.sampled_from(["1", "true", "ghp_" + "a" * 36, "AKIAABCDEFGHIJKLMNOP", "plain", "sk-abc", "tcp://h:2375"])
# What hostpaths.path_fact would report for each source on a usual host (/var/run is a link to /run).
REAL = {"/var/run/docker.sock": ("/run/docker.sock", "socket"), "/run": ("/run", "dir"),
        "/var/lib/docker": ("/var/lib/docker", "dir"), "/home/dev/.ssh": ("/home/dev/.ssh", "dir"),
        "/srv/data": ("/srv/data", "dir"), "/": ("/", "dir"), "/home/dev": ("/home/dev", "dir"),
        "/var/run": ("/run", "dir"), "/run/containerd": ("/run/containerd", "dir")}
SOURCES = st.sampled_from(sorted(REAL))


def _documents():
    return st.fixed_dictionaries({
        "version": st.just(1), "name": st.just("prop"), "description": st.just("generated"),
        "capabilities": st.lists(st.sampled_from(CAPS), max_size=3, unique=True),
        "env": st.fixed_dictionaries({"pass": st.lists(NAMES, max_size=3, unique=True),
                                      "set": st.dictionaries(NAMES, VALUES, max_size=3)}),
        "mounts": st.lists(st.fixed_dictionaries({"source": SOURCES, "target": st.sampled_from(["/data", "/mnt/x"]),
                                                  "access": st.sampled_from(["read-only", "read-write"])}),
                           max_size=1),
        "network": st.sampled_from([{"mode": "none"}, {"mode": "proxy", "allow": ["api.example.com"]}]),
        "workspace": st.fixed_dictionaries({"access": st.sampled_from(["read-only", "read-write"])}),
    })


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_documents(), env=st.lists(st.tuples(NAMES, VALUES), max_size=3))
def test_any_accepted_plan_is_inside_the_envelope(doc, env):
    from launcher.host.hostpaths import PathFact

    try:
        policy = policy_from_raw(doc, "generated.yaml", None)
        passed = tuple((n, v) for n, v in dict(env).items() if n in policy.env.pass_names)
        mounts = tuple(PathFact(given=m["source"], real=REAL[m["source"]][0], kind=REAL[m["source"]][1])
                       for m in doc["mounts"])
        plan = compiler.compile_policy(policy, fake_facts(mounts=mounts, env=passed))
    except PolicyError:
        return
    spec = plan.container
    assert spec.pid_mode == "" and spec.devices == () and spec.group_add == ()
    assert spec.network_mode == "none" or spec.network_mode == plan.networks[0].name
    assert spec.cap_drop == ("ALL",) and set(spec.cap_add) <= set(doc["capabilities"]) and "ALL" not in spec.cap_add
    assert not {"SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "DAC_READ_SEARCH", "SYS_MODULE"} & set(spec.cap_add)
    assert spec.read_only_root and "no-new-privileges" in spec.security_opt
    argv = render.argv_text(plan)
    for flag in ("--privileged", "--pid=host", "--network=host", "--ipc=host", "--uts=host", "--userns=host", "--device"):
        assert flag not in argv
    assert {m.source for m in spec.mounts if m.kind.value == "bind"} <= {"/srv/data", "/home/dev/repo"} | {
        m.source for m in spec.mounts if m.source.startswith("/home/dev/repo/")}
    for name, value in spec.env:
        assert not secret_name(name) and not secret_value(value), name
