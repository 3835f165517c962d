"""--json on the real engine (issue 44): `up --no-shell --json`, `exec --json`, the `port --json`
stream and `down --json` on one `up` sandbox without a network, each in the envelope, and `logs`
saying that this sandbox has no egress instead of failing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from conftest import BIND
from launcher.errors import ExitCode

pytestmark = pytest.mark.engine
SANDBOX = [sys.executable, "-m", "launcher"]


def sandbox(*args, timeout=300):
    return subprocess.run(SANDBOX + list(args), capture_output=True, text=True, timeout=timeout)


def answer(done, command: str, name: str, code: int = 0) -> dict:
    data = json.loads(done.stdout)
    assert done.returncode == code, done.stderr
    assert (data["command"], data["ok"], data["exit_code"], data["sandbox"]) == (command, code == 0, code, name), data
    return data


def test_up_exec_port_logs_and_down_answer_in_the_envelope(engine, workspace):
    name = f"sandbox-test-json-{os.getpid()}"
    started = answer(sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--json"), "up", name)
    forwarder = None
    try:
        assert started["network"] == "none" and not started["reused"] and started["copy"] is None
        assert started["proven"]["checks"] > 10 and started["proven"]["how"] == "at its start"
        again = answer(sandbox("up", *BIND, str(workspace), "--name", name, "--no-shell", "--json"), "up", name)
        assert again["reused"] and again["proven"]["how"] == "on attach"

        done = sandbox("exec", name, "--json", "--", "sh", "-c", "echo out; exit 3")
        ran = answer(done, "exec", name, code=3)   # the command's own code, no error of the launcher
        assert ran["error"] == "" and ran["argv"] == ["sh", "-c", "echo out; exit 3"] and ran["proven"]["checks"] > 10
        assert "out\n" in done.stderr   # its output on stderr: stdout is the JSON alone
        missing = answer(sandbox("exec", f"{name}-nope", "--json", "--", "true"), "exec", f"{name}-nope",
                         code=ExitCode.NO_SANDBOX)
        assert "no sandbox named" in missing["error"]

        for args, said in (((), "no egress in this preset (network: none)\n"), (("--json",), "[]\n"),
                           (("--suggest",), "# no egress in this preset (network: none): nothing to allow\n")):
            shown = sandbox("logs", name, *args)
            assert shown.returncode == 0 and shown.stdout == said, shown.stderr

        forwarder = subprocess.Popen(SANDBOX + ["port", name, "0:8000", "--json"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        listening = json.loads(forwarder.stdout.readline())   # one line, as soon as it listens
        assert listening["state"] == "listening" and listening["ok"] and listening["port"] == 8000
        with pytest.raises((urllib.error.URLError, ConnectionError)):   # nothing listens inside: closed
            urllib.request.urlopen(f"http://127.0.0.1:{listening['host_port']}", timeout=30)
        forwarder.send_signal(signal.SIGINT)
        out, _ = forwarder.communicate(timeout=60)
        assert forwarder.returncode == 0
        stopped = json.loads(out)
        assert stopped == listening | {"state": "stopped", "served": 1}
    finally:
        if forwarder is not None and forwarder.poll() is None:
            forwarder.kill()
        down = sandbox("down", name, "--json")
    gone = answer(down, "down", name)
    assert gone["removed"][0] == name and gone["workspace_changes"] == []
