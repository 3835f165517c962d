"""`up --port` without an engine: the pair in Docker's order, the ports taken before the sandbox
starts and given to keepers (stand-ins here, the real `sandbox port` in test_port_engine.py), the
sandbox removed again when one cannot start, `ls` listing them; and the old order's warnings."""

from __future__ import annotations

import json
import socket
import sys

import pytest
from click.testing import CliRunner

from fakes import Recorder, one_sandbox
from launcher import labels as label
from launcher.cli import main
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import Check, ProbeReport
from launcher.errors import EngineError, ExitCode, PolicyError
from launcher.launch import forward, launch, ports, session

PASSED = ProbeReport(checks=(Check(id="identity.uid", ok=True, expected="1000", observed="1000"),),
                     finished=True, verdict_ok=True)


def taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_the_label_says_each_pair_host_first_and_reads_back():
    specs = (ports.parse_spec("3000"), ports.parse_spec("18000:8000"))
    assert [str(s) for s in specs] == ["3000:3000", "18000:8000"]
    value = ports.label_value(specs)
    assert value == "3000:3000,18000:8000" and ports.labelled({label.PORTS: value}) == specs
    assert ports.labelled({}) == () and ports.labelled({label.PORTS: "x,3000"}) == (specs[0],)


def test_a_running_sandbox_keeps_its_ports_and_refuses_new_ones():
    labels = {label.PORTS: "3000:3000,18000:8000"}
    same = (ports.parse_spec("3000"), ports.parse_spec("0:8000"))
    assert ports.reuse_problem("box", labels, same) is None and ports.reuse_problem("box", labels, ()) is None
    problem = ports.reuse_problem("box", labels, (ports.parse_spec("3000"), ports.parse_spec("4000:8000")))
    assert problem.found == "4000:8000" and "(3000:3000, 18000:8000)" in problem.expected
    assert "`sandbox port box 4000:8000`" in problem.hint


@pytest.mark.parametrize("value, said", [("http", "found 'http'"), ("3000:", "found '3000:'"),
                                         ("70000", "PORT a number from 1 to 65535"),
                                         ("70000:80", "HOST_PORT a number from 0 to 65535"),
                                         ("127.0.0.1:80:80", "(host first, as docker run -p)")])
def test_up_refuses_a_malformed_port_with_exit_2_before_anything(value, said, tmp_path):
    result = CliRunner().invoke(main, ["up", str(tmp_path), "--port", "3000", "--port", value])
    assert result.exit_code == ExitCode.USAGE and said in result.output, result.output
    assert "Invalid value for '--port'" in result.output and "Traceback" not in result.output


def test_up_refuses_a_host_port_twice(tmp_path):
    result = CliRunner().invoke(main, ["up", str(tmp_path), "--port", "3000", "--port", "3000:8000"])
    assert result.exit_code == ExitCode.USAGE and "each host port once, found 3000" in result.output


@pytest.fixture
def starts(monkeypatch):
    """session.up with images ready and launch.up making the sandbox in the fake engine: its plans."""
    started = []

    def fake_up(engine, plan, listener):
        started.append(plan)
        engine.http.add_container(plan.container.name, dict(plan.container.labels))
        return PASSED

    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "up", fake_up)
    return started


def up(tmp_path, engine, *specs) -> session.UpResult:
    request = session.Request(policy="read-only", workspace=str(tmp_path), name="box",
                              ports=tuple(ports.parse_spec(s) for s in specs))
    return session.up(request, Recorder(), engine=engine)


def test_a_host_port_in_use_refuses_the_start_with_120_and_nothing_is_made(tmp_path, starts, monkeypatch):
    monkeypatch.setattr(ports, "keep", lambda *a: pytest.fail("no keeper for a refused start"))
    engine = FakeEngine()
    with taken_port() as taken:
        with pytest.raises(PolicyError, match=f"found {taken.getsockname()[1]} is in use") as refused:
            up(tmp_path, engine, "0:80", f"{taken.getsockname()[1]}:8000")
    assert refused.value.exit_code == ExitCode.POLICY_INVALID and "--port HOST_PORT:8000" in str(refused.value)
    assert starts == [] and engine.list() == []


def test_the_ports_go_to_keepers_and_into_the_label(tmp_path, starts, monkeypatch):
    kept = []
    monkeypatch.setattr(ports, "keep", lambda name, specs, held: kept.append((name, specs, [s.getsockname() for s in held])))
    result = up(tmp_path, FakeEngine(), "0:8000")
    [(name, specs, sockets)] = kept
    picked = sockets[0][1]
    assert name == "box" and specs == result.ports == (ports.PortSpec(port=8000, host_port=picked),) and picked > 0
    assert dict(starts[0].container.labels)[label.PORTS] == f"{picked}:8000"
    assert free(picked)   # up's own socket is closed: the keeper holds the port


def test_a_keeper_that_cannot_start_takes_the_sandbox_with_it(tmp_path, starts, monkeypatch):
    def fails(name, specs, held):
        raise EngineError("forwarding did not start")

    monkeypatch.setattr(ports, "keep", fails)
    engine = FakeEngine()
    with pytest.raises(EngineError, match="did not start") as failed:
        up(tmp_path, engine, "0:8000")
    assert failed.value.exit_code == ExitCode.ENGINE and len(starts) == 1 and engine.list() == []


# A stand-in for the keeper `sandbox port … --listen-fd FD`: says it listens, answers "hi" until SIGINT.
KEEPER = ("import socket, sys\nsock = socket.socket(fileno=int(sys.argv[-1]))\n"
          "print('{\"state\": \"listening\"}', flush=True)\n"
          "try:\n    while True:\n        c, _ = sock.accept(); c.sendall(b'hi'); c.close()\n"
          "except KeyboardInterrupt:\n    pass\n")


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    monkeypatch.setattr(ports.host, "state_dir", lambda: str(tmp_path / "state"))
    monkeypatch.setattr(ports, "_argv", lambda name, spec: [sys.executable, "-c", KEEPER, name, str(spec)])
    monkeypatch.setattr(ports, "_is_keeper", lambda pid, name: ports.host.process_argv(pid)[1:3] == ["-c", KEEPER])
    monkeypatch.setattr(ports, "_kept_port", lambda pid: [ports.parse_spec(ports.host.process_argv(pid)[4]).host_port])


def test_a_keeper_holds_the_port_it_was_given_until_stopped(stand_in):
    specs = (ports.PortSpec(port=8000, host_port=0),)
    held = ports.hold(specs, "box")
    forwarded = ports.taken(specs, held)
    ports.keep("box", forwarded, held)
    for sock in held:
        sock.close()
    port = forwarded[0].host_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        assert client.recv(2) == b"hi"
    labels = {label.PORTS: ports.label_value(forwarded)}
    assert ports.published("box", labels) == (ports.Published(address="127.0.0.1", host_port=port, port=8000,
                                                               forwarded=True),)
    ports.stop("box")
    assert free(port) and ports.keepers("box") == [] and not ports.published("box", labels)[0].forwarded


def test_a_keeper_that_ends_at_once_is_an_error_that_says_why(stand_in, monkeypatch):
    said = "import sys; print('sandbox: error: no sandbox named box', file=sys.stderr); sys.exit(121)"
    monkeypatch.setattr(ports, "_argv", lambda name, spec: [sys.executable, "-c", said])
    specs = (ports.PortSpec(port=8000, host_port=0),)
    held = ports.hold(specs, "box")
    with pytest.raises(EngineError, match=r"did not start \(exit 121\): error: no sandbox named box"):
        ports.keep("box", ports.taken(specs, held), held)
    assert ports.keepers("box") == []
    for sock in held:
        sock.close()


def test_ls_lists_the_ports_and_says_which_stopped(monkeypatch):
    from launcher.engine import engine as engine_mod

    fake = one_sandbox()
    fake.http.container("box")["Config"]["Labels"][label.PORTS] = "3000:3000,18000:8000"
    monkeypatch.setattr(engine_mod, "connect", lambda **_: fake)
    monkeypatch.setattr(ports, "keepers", lambda name: [4242])
    monkeypatch.setattr(ports, "_kept_port", lambda pid: [3000])
    table = CliRunner().invoke(main, ["ls"])
    assert table.exit_code == 0, table.output
    assert "PORTS" in table.output.splitlines()[0] and "3000->3000,18000->8000(stopped)" in table.output
    listed = json.loads(CliRunner().invoke(main, ["ls", "--json"]).output)
    assert listed[0]["ports"] == [{"address": "127.0.0.1", "host_port": 3000, "port": 3000, "forwarded": True},
                                  {"address": "127.0.0.1", "host_port": 18000, "port": 8000, "forwarded": False}]


TCP = (b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
       b"   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1\n"
       b"   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 2\n")


def test_a_pair_written_the_old_way_round_is_said_to_look_swapped():
    """Something listens on 18080 inside (hex 46A0), 8000 only has a connection: `18080:8000`, the
    old way round for port 18080 inside on the host's 8000, looks swapped."""
    engine = FakeEngine(execs=lambda argv: (((TCP, b""),), 0))
    engine.http.add_container("box", {label.MANAGED: "1", label.KIND: "up"})
    where = forward.Target(name="box", ref="box", user="")
    assert forward.listening_inside(engine, where) == {18080}
    assert forward.swapped(engine, where, ports.parse_spec("18080:8000"))
    assert not forward.swapped(engine, where, ports.parse_spec("8000:18080"))
    assert not forward.swapped(engine, where, ports.parse_spec("18080"))
    assert "for port 8000 inside, 18080:8000" in forward.order_hint(ports.parse_spec("8000:18080"))
    assert forward.order_hint(ports.parse_spec("8000")) == ""


def test_sandbox_port_warns_of_a_swapped_pair(monkeypatch):
    from launcher.engine import engine as engine_mod

    engine = FakeEngine(execs=lambda argv: (((TCP, b""),), 0))
    engine.http.add_container("box", {label.MANAGED: "1", label.KIND: "up"})
    monkeypatch.setattr(engine_mod, "connect", lambda **_: engine)
    monkeypatch.setattr(forward.Forwarder, "serve", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the host port is free on the host, and listened on inside: PORT was meant
    monkeypatch.setattr(forward, "listening_inside", lambda engine, where: {port})
    result = CliRunner().invoke(main, ["port", "box", f"{port}:8000"])
    assert result.exit_code == 0, result.output
    assert f"nothing listens on port 8000 inside box, but something does on {port}" in result.output, result.output
    assert f"`sandbox port box 8000:{port}`" in result.output


def a_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_run_forwards_its_ports_while_the_agent_runs_and_not_after(tmp_path, monkeypatch):
    from launcher.launch.launch import Outcome

    engine, port, seen = FakeEngine(), a_free_port(), []
    ref = engine.http.add_container("agent", {label.MANAGED: "1", label.KIND: "run"}, user="1000:1000")

    def fake_run(engine, plan, listener, forwarding=None):
        with forwarding(ref):
            seen.append(free(port))
        seen.append(free(port))
        return Outcome(container=plan.container.name, probe=PASSED, exit_code=0, timed_out=False)

    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "run", fake_run)
    request = session.Request(policy="read-only", workspace=str(tmp_path), command=("true",),
                              ports=(ports.parse_spec(f"{port}:8000"),))
    result = session.run(request, Recorder(), engine=engine)
    assert result.exit_code == 0, result.report
    assert seen == [False, True]   # listening while the agent ran; free once it ended


def test_run_with_a_host_port_in_use_is_refused_with_120_before_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(session, "ready", lambda engine, planned, agent, listener: None)
    monkeypatch.setattr(launch, "run", lambda *a, **k: pytest.fail("nothing may start"))
    with taken_port() as taken:
        request = session.Request(policy="read-only", workspace=str(tmp_path), command=("true",),
                                  ports=(ports.parse_spec(f"{taken.getsockname()[1]}:8000"),))
        result = session.run(request, Recorder(), engine=FakeEngine())
    assert (result.status, result.exit_code) == ("policy-invalid", ExitCode.POLICY_INVALID)
    assert "is in use" in result.report["error"]


def test_run_refuses_a_malformed_port_with_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["run", "-w", str(tmp_path), "--port", "8000:", "--", "true"])
    assert result.exit_code == ExitCode.USAGE and "found '8000:'" in result.output and "Traceback" not in result.output
