"""The resident helper (issue 45; launcher/cli/helper.py, launcher/resident.py, the client in
launcher/__main__.py): a command through it gets the client's descriptors, directory, environment
and exit code; a helper answered by another uid, in a directory not the user's alone, or of another
build is not used (the command runs in-process); the helper answers no other uid. Its engine
tests (a signal relayed, a tampered probe refused through it): test_resident_engine.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from launcher import __main__ as client
from launcher import resident
from launcher.__version__ import __version__
from launcher.cli import helper as served
from launcher.doctor import doctor

BAD = "version: 1\nnetwork: {mode: bogus}\n"


def _cli(*args, stdin=None, cwd="/", **env) -> subprocess.CompletedProcess:
    """`python -m launcher` as installed (never the checkout's tree, where the helper would be of
    another build: its package files are others)."""
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=120,
                          stdin=stdin, cwd=cwd, env={**os.environ, **env})


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """XDG_RUNTIME_DIR of this test (the helper's socket is in its `sandbox` directory)."""
    where = tmp_path / "run"
    where.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(where))
    return where


@pytest.fixture
def helper(runtime):
    started = _cli("helper", "start")
    assert started.returncode == 0 and "helper started (pid" in started.stderr, started.stderr
    yield runtime / "sandbox"
    assert _cli("helper", "stop").returncode == 0


def _state(where) -> resident.State:
    return resident.state(str(where), os.geteuid(), __version__)


def test_a_command_runs_in_the_helper_with_the_client_s_descriptors_directory_environment_and_exit_code(helper, tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD)
    outcomes = {}
    for way in ("on", "off"):   # SANDBOX_TIMINGS only in the client's environment: the helper has none
        with open(tmp_path / "bad.yaml") as stdin:
            outcomes[way] = _cli("run", "--json", "--policy", "/dev/stdin", "--workspace-mode", "bind", "--", "true",
                                 stdin=stdin, cwd=tmp_path, SANDBOX_TIMINGS="1", SANDBOX_HELPER=way)
    through, alone = outcomes["on"], outcomes["off"]
    assert through.returncode == alone.returncode == 120
    assert "\n  helper " in through.stderr and "\n  imports " not in through.stderr     # it ran in the helper
    assert "\n  imports " in alone.stderr
    said, expected = json.loads(through.stdout), json.loads(alone.stdout)   # stdout: the client's
    assert said["exit_code"] == 120 and [p["file"] for p in said["problems"]] == ["/dev/stdin"] * 3   # stdin: the client's
    assert {k: v for k, v in said.items() if k != "duration_seconds"} == \
        {k: v for k, v in expected.items() if k != "duration_seconds"}
    assert through.stderr.split("sandbox: timings")[0] == alone.stderr.split("sandbox: timings")[0]   # stderr: the client's
    relative = _cli("run", "--policy", "bad.yaml", "--workspace-mode", "bind", "--", "true", cwd=tmp_path)
    assert relative.returncode == 120 and "bad.yaml: network.mode" in relative.stderr   # its working directory


def test_status_says_running_and_stop_ends_it(helper, monkeypatch):
    said = json.loads(_cli("helper", "status", "--json").stdout)
    assert said["running"] and not said["stale"] and said["build"] == said["current"]
    assert os.path.exists(f"/proc/{said['pid']}")
    # this test's own copy of the launcher may be the checkout (another build): take the installed one's
    monkeypatch.setattr(resident, "build", lambda version: said["current"])
    row = doctor.helper_finding(_state(helper))
    assert row.status is doctor.Status.OK and f"pid {said['pid']}" in row.detail
    assert _cli("helper", "stop").returncode == 0
    assert not os.path.exists(helper / resident.SOCKET)
    assert "no helper is running" in _state(helper).problem
    assert _cli("helper", "start").returncode == 0   # for the fixture's stop


def test_a_stale_helper_is_not_used_and_doctor_says_so(helper, monkeypatch):
    monkeypatch.setattr(resident, "build", lambda version: "another+build")
    assert client._through_helper(["--version"]) is None   # the client runs it in-process
    found = _state(helper)
    assert found.running and found.stale
    row = doctor.helper_finding(found)
    assert row.status is doctor.Status.WARN and "STALE" in row.detail and "helper start" in row.fix


def test_a_socket_answered_by_another_uid_is_not_used(runtime, tmp_path):
    """A helper socket whose listener is not the user (root here makes one of uid 65534's; as
    another user the peer check is shown the same way, by a listener it is told is someone else's)."""
    where = runtime / "sandbox"
    where.mkdir(mode=0o700)
    path = where / resident.SOCKET
    listener = subprocess.Popen([sys.executable, "-c", f"""
import os, socket, time
s = socket.socket(socket.AF_UNIX)
s.bind({str(path)!r})            # the file is the user's ...
if os.geteuid() == 0:
    os.setuid(65534)           # ... its listener (SO_PEERCRED: the credentials at listen) is not
s.listen(1)
print("listening", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "listening"
        if os.geteuid() == 0:
            said = _cli("--version")
            assert said.returncode == 0 and said.stdout.startswith("sandbox ")   # in-process
            assert f"not using the helper: {path} is answered by uid 65534, not 0" in said.stderr
        with pytest.raises(resident.Unusable, match="is answered by uid"):
            resident.connect(str(where), os.geteuid() + 1 if os.geteuid() else 0) if os.geteuid() \
                else resident.connect(str(where), 0)
    finally:
        listener.kill()
        listener.wait()


@pytest.mark.parametrize("make", ["mode 755", "a symlink", "another uid's"])
def test_a_socket_directory_not_the_user_s_alone_is_not_used(runtime, tmp_path, make):
    where = runtime / "sandbox"
    if make == "a symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        where.symlink_to(tmp_path / "elsewhere")
    else:
        where.mkdir(mode=0o755 if make == "mode 755" else 0o700)
        if make == "another uid's":
            os.chown(where, 65534 if os.geteuid() == 0 else os.geteuid(), -1)
            if os.geteuid() != 0:
                os.chmod(where, 0o750)
    with pytest.raises(resident.Unusable, match="is not a directory of uid"):
        resident.connect(str(where), os.geteuid())
    said = _cli("--version")
    assert said.returncode == 0 and "not using the helper" in said.stderr and "is not a directory of uid" in said.stderr


def test_the_helper_answers_no_other_uid(helper, monkeypatch):
    """Its own check (its directory keeps others out as well): a peer of another uid gets no hello."""
    one, other = socket.socketpair()
    with one, other:
        assert served.admitted(one)
        monkeypatch.setattr(served.os, "geteuid", lambda: 65534 if os.getuid() == 0 else 0)
        assert not served.admitted(one)
    if os.geteuid() == 0:   # the real thing: uid 65534 through a directory and socket opened to it
        monkeypatch.undo()
        os.chmod(helper, 0o711)
        os.chmod(helper / resident.SOCKET, 0o666)
        try:
            said = subprocess.run([sys.executable, "-c", f"""
import os, socket
os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.connect({str(helper / resident.SOCKET)!r})
s.settimeout(10)
print(repr(s.recv(100)))
"""], capture_output=True, text=True, timeout=30)
            assert said.stdout.strip() == "b''", said   # closed at once: no hello, no fork
        finally:
            os.chmod(helper, 0o700)
            os.chmod(helper / resident.SOCKET, 0o600)


def test_commands_that_attach_a_terminal_stay_in_process():
    assert {"up", "shell", "exec", "helper"} <= client.TERMINAL
    assert client._command(["--debug", "shell", "x"]) == "shell"
    assert client._command(["run", "--", "up"]) == "run"


def test_without_a_helper_the_client_runs_the_cli_in_process(runtime):
    said = _cli("--version")
    assert said.returncode == 0 and said.stdout.startswith("sandbox ") and said.stderr == ""
    assert "does not exist" in _state(runtime / "sandbox").problem


def test_the_request_goes_over_whole_with_undecodable_bytes_and_empty_fields():
    request = {"argv": ["run", "", "a=b", "--", "sh", "-c", "echo \udcff"], "cwd": "/tmp/d\udce9 x",
               "env": {"A": "1=2", "EMPTY": "", "RAW": "\udcff\udcfe", "PATH": "/bin"}, "started": 1234.5678901,
               "umask": 0o077, "gid": 1000, "groups": [4, 1000], "limits": {"RLIMIT_NOFILE": [1024, 4096],
                                                                          "RLIMIT_CORE": [-1, -1]}}
    assert resident.decode_request(resident.encode_request(request)) == request
    bare = {**request, "argv": [], "env": {}, "groups": [], "limits": {}}
    assert resident.decode_request(resident.encode_request(bare)) == bare


@pytest.mark.parametrize("data", [
    b'{"argv": ["--version"], "cwd": "/"}',                                   # an older client's JSON
    resident.FORM.encode() + b"\x001.0\x0018\x000\x00\x00\x00/\x002\x00--version",   # one argument of two
    resident.FORM.encode() + b"\x001.0\x0018\x000\x00\x00\x00/\x00-1",
    resident.FORM.encode() + b"\x00soon\x0018\x000\x00\x00\x00/\x000",
    resident.FORM.encode() + b"\x001.0\x0018\x000\x00\x00RLIMIT_CORE=1\x00/\x000",
    resident.FORM.encode() + b"\x001.0\x0018\x000\x00\x00\x00/\x000\x00NOEQUALS",
])
def test_a_request_of_another_form_or_malformed_is_refused(data):
    with pytest.raises(resident.Unusable):
        resident.decode_request(data)


def test_an_older_helper_s_hello_says_another_build():
    one, other = socket.socketpair()
    with one, other:
        other.sendall(b'H{"pid": 7, "build": "0.1.0+abc"}\n' + resident.hello_line(8, "0.1.0+def"))
        buffer = bytearray()
        assert resident.hello(one, buffer) == {"pid": 0, "build": "(an older build)"}
        assert resident.hello(one, buffer) == {"pid": 8, "build": "0.1.0+def"}


def test_an_older_client_s_request_is_refused_and_it_runs_in_process(helper):
    sock, _ = resident.connect(str(helper), os.geteuid())
    try:
        buffer = bytearray()
        assert resident.hello(sock, buffer)["pid"] > 0
        data = json.dumps({"argv": ["--version"], "cwd": "/", "env": {}}).encode()
        socket.send_fds(socket.socket(fileno=os.dup(sock.fileno())), [len(data).to_bytes(4, "big") + data], [0, 1, 2])
        assert resident.read_line(sock, buffer).startswith(b"Ra request of another form")
    finally:
        sock.close()


def test_the_client_imports_only_modules_written_in_c_on_its_way_to_the_helper(helper):
    """What every command through the helper pays before it is handed over: no `socket` (7 ms here),
    `json` and `re` (8 ms), `hashlib` (3 ms) or `signal` (enum)."""
    said = subprocess.run([sys.executable, "-c", "import sys; from launcher import __main__ as c; "
                           "code = c._through_helper(['--version']); print(code, *sorted(sys.modules))"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    code, *modules = said.stdout.splitlines()[-1].split()
    assert code == "0" and said.stdout.startswith("sandbox "), said   # it ran in the helper
    assert not {"socket", "json", "re", "hashlib", "signal", "enum", "selectors"} & set(modules)
