"""The resident helper on the real engine: a launch through it runs the whole pipeline and the
probe (the agent's exit code comes back), SIGINT sent to the client is relayed and ends the
launch as in-process (130, nothing left), and probe files changed on the host are refused through
the helper exactly as in-process (122, the agent never ran)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from launcher import labels as label

pytestmark = pytest.mark.engine
MARKER = "AGENT-RAN"


def _cli(*args, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "launcher", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd="/", env={**os.environ, "SANDBOX_TIMINGS": "1", **env})


def _done(*args, **env) -> tuple[int, str]:
    proc = _cli(*args, **env)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


@pytest.fixture
def helper(engine, tmp_path, monkeypatch):
    where = tmp_path / "run"
    where.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(where))
    assert _done("helper", "start")[0] == 0
    yield where
    assert _done("helper", "stop")[0] == 0


def _run(workspace, *command, name: str = ""):
    return ("run", "--policy", "untrusted", "--workspace-mode", "bind", *(("--name", name) if name else ()),
            "-w", str(workspace), "--", *command)


def test_a_launch_through_the_helper_runs_the_probe_and_returns_the_agent_s_exit_code(helper, workspace):
    code, err = _done(*_run(workspace, "sh", "-c", f"touch /workspace/{MARKER}; exit 7"))
    assert code == 7, err
    assert "probe passed" in err and "\n  helper " in err and "\n  probe " in err and (workspace / MARKER).exists()


def test_sigint_to_the_client_is_relayed_and_the_launch_ends_as_in_process(helper, workspace, engine):
    name = f"sandbox-test-relay-{os.urandom(2).hex()}"
    proc = _cli(*_run(workspace, "sleep", "60", name=name))
    said = []
    for line in proc.stderr:
        said.append(line)
        if "probe passed" in line:
            break
    assert engine.list(label.selector(label.SANDBOX, name)), "".join(said)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(said) + rest
    assert "\n  helper " in rest   # it ran in the helper
    assert engine.list(label.selector(label.SANDBOX, name)) == []   # removed, as in-process


def test_changed_probe_files_are_refused_through_the_helper_as_in_process(helper, workspace, monkeypatch):
    monkeypatch.delenv("SANDBOX_PROBE_VOLUME")   # the launcher's own directory on this host (probedir.py)
    code, err = _done(*_run(workspace, "true"))
    assert code == 0 and "\n  helper " in err, err
    probe = os.path.join(os.environ["XDG_STATE_HOME"], "sandbox", "probe")
    (where,) = [os.path.join(probe, d) for d in os.listdir(probe)]
    os.chmod(where, 0o755)
    os.chmod(os.path.join(where, "busybox"), 0o755)
    with open(os.path.join(where, "busybox"), "wb") as out:
        out.write(b"#!/bin/sh\ntouch /workspace/PROBE-RAN\nexec /bin/sh \"$@\"\n")
    os.chmod(os.path.join(where, "busybox"), 0o555)
    os.chmod(where, 0o555)
    found = {}
    for way in ("on", "off"):
        found[way] = _done(*_run(workspace, "touch", f"/workspace/{MARKER}"), SANDBOX_HELPER=way)
    for code, err in found.values():
        assert code == 122, err
        assert f"the probe's files are not the launcher's; the agent was not started:\n  probe directory {where}: " \
               "probe file busybox has sha256" in err
    assert "\n  helper " in found["on"][1] and "\n  imports " in found["off"][1]
    assert not (workspace / MARKER).exists() and not (workspace / "PROBE-RAN").exists()
