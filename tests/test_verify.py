"""Probe report parsing and the host-side `docker inspect` comparison, with the launch stage on a
fake engine: a failed probe or a mismatch means no agent and no container left."""

from __future__ import annotations

import pytest

from conftest import fake_facts, untrusted_bind
from fakes import Recorder
from launcher.engine.enginefake import FakeEngine
from launcher.engine.verify import compare_inspect, parse_probe
from launcher.errors import ProbeFailed
from launcher.launch import launch
from launcher.plan.compiler import compile_policy

PLAN = compile_policy(untrusted_bind(), fake_facts())


@pytest.fixture
def plan(tmp_path):
    """A plan whose workspace exists: bind sources are re-checked on this host just before start."""
    return compile_policy(untrusted_bind(), fake_facts(workspace=str(tmp_path)))
PASS = "PROBE\tidentity.uid\tpass\t1000\t1000\n"
FAIL = "PROBE\tfs.root_ro\tfail\tro\trw\n"



def test_parse_complete_report():
    report = parse_probe((PASS + "PROBE-END\tok\t1\n").splitlines())
    assert report.ok and report.checks[0].id == "identity.uid"


@pytest.mark.parametrize("text", [
    PASS,                                   # cut off: no PROBE-END
    PASS + FAIL + "PROBE-END\tfail\t2\n",   # one failed check
    FAIL + "PROBE-END\tok\t1\n",            # a lying verdict line
    "PROBE-END\tok\t0\n",                   # no checks at all
    "garbage\n",
])
def test_anything_but_a_clean_report_fails(text):
    assert not parse_probe(text.splitlines()).ok


def differences(change=lambda attrs: None) -> list[str]:
    """compare_inspect of the plan's container as the fake engine creates and inspects it, `change`d."""
    engine = FakeEngine(tamper=change)
    ref = engine.create(PLAN.container)
    return compare_inspect(PLAN.container, engine.inspect(ref), engine.image_env(PLAN.container.image))


def test_inspect_of_a_faithful_container_matches():
    assert differences() == []


@pytest.mark.parametrize("field, change, says", [
    ("Privileged", lambda a: a["HostConfig"].update(Privileged=True), "the plan says False, the container has True"),
    ("CapAdd", lambda a: a["HostConfig"].update(CapAdd=["SYS_ADMIN"]), "SYS_ADMIN added (the plan says none"),
    ("CapDrop", lambda a: a["HostConfig"].update(CapDrop=[]), "ALL missing (the plan says ALL, the container has none)"),
    ("ReadonlyRootfs", lambda a: a["HostConfig"].update(ReadonlyRootfs=False), "the plan says True, the container has False"),
    ("SecurityOpt", lambda a: a["HostConfig"].update(SecurityOpt=["no-new-privileges", "seccomp=unconfined"]),
     "seccomp=unconfined added"),
    ("NetworkMode", lambda a: a["HostConfig"].update(NetworkMode="host"), "the plan says 'none', the container has 'host'"),
    ("PidMode", lambda a: a["HostConfig"].update(PidMode="host"), "the plan says '', the container has 'host'"),
    ("IpcMode", lambda a: a["HostConfig"].update(IpcMode="host"), "the container has 'host'"),
    ("Devices", lambda a: a["HostConfig"].update(Devices=[{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda"}]),
     "/dev/sda:/dev/sda added"),
    ("GroupAdd", lambda a: a["HostConfig"].update(GroupAdd=["0"]), "0 added"),
    ("PortBindings", lambda a: a["HostConfig"].update(PortBindings={"22/tcp": [{}]}), "the container has 22/tcp=[{}]"),
    ("User", lambda a: a["Config"].update(User="0:0"), "the plan says '1000:1000', the container has '0:0'"),
    ("Env names", lambda a: a["Config"]["Env"].append("DOCKER_HOST=tcp://x"), "DOCKER_HOST added"),
    ("Mounts", lambda a: a["Mounts"].append({"Type": "bind", "Destination": "/var/run/docker.sock", "RW": False,
                                             "Source": "/run/docker.sock"}),
     "/var/run/docker.sock is mounted (bind /run/docker.sock, read-only) but not planned"),
    ("Mounts", lambda a: a["Mounts"][0].update(RW=False), "/workspace is bind /home/dev/repo, read-only; the plan says "
                                                         "bind /home/dev/repo, writable"),
    ("Mounts", lambda a: a["Mounts"].extend([{"Type": "volume", "Destination": d, "RW": True, "Name": "f00"}
                                             for d in ("/home/agent", "/etc/cron.d")]),
     "Mounts: the image declares VOLUME /etc/cron.d, /home/agent: writable volumes the policy does not declare"),
    ("Memory", lambda a: a["HostConfig"].update(Memory=0), "the plan says 2147483648, the container has 0"),
    ("Tmpfs", lambda a: a["HostConfig"]["Tmpfs"].update({"/home/agent": "rw,size=536870912,uid=0,gid=0,mode=0700"}),
     "/home/agent=rw,size=536870912,uid=1000,gid=1000,mode=0700, the container has"),
    ("Tmpfs", lambda a: a["HostConfig"]["Tmpfs"].pop("/home/agent"), "the plan says /tmp="),
    ("Mounts", lambda a: a["Mounts"].append({"Type": "tmpfs", "Destination": "/home/agent", "RW": True, "Source": ""}),
     "/home/agent is mounted (tmpfs -, writable) but not planned"),
    ("LogConfig", lambda a: a["HostConfig"].update(LogConfig={"Type": "json-file", "Config": {}}),   # unbounded
     "the plan says json-file, {'max-size': '10m', 'max-file': '2'}, the container has json-file, {}"),
])
def test_every_difference_is_said_in_words_naming_the_field_and_both_values(field, change, says):
    diffs = differences(change)
    assert any(d.startswith(field) and says in d for d in diffs), diffs


def test_a_vanished_bind_source_refuses_the_start():
    plan = compile_policy(untrusted_bind(), fake_facts(workspace="/nonexistent/repo"))
    engine = FakeEngine()
    with pytest.raises(ProbeFailed, match="changed or vanished"):
        launch.run(engine, plan, Recorder())
    assert engine.calls == ["create", "remove"]


def test_mismatch_refuses_the_start_and_removes_the_container(plan):
    engine = FakeEngine(tamper=lambda a: a["HostConfig"].update(Privileged=True))
    with pytest.raises(ProbeFailed, match="Privileged"):
        launch.run(engine, plan, Recorder())
    assert engine.calls == ["create", "remove"]


def test_failed_probe_never_shows_agent_output_and_removes_the_container(plan):
    engine = FakeEngine(output=[((FAIL + "PROBE-END\tfail\t1\n").encode(), None), (b"AGENT RAN\n", None)])
    listener = Recorder()
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, listener)
    assert "fs.root_ro: expected ro, observed rw" in str(info.value)
    assert listener.out == b"" and engine.calls[-1] == "remove"


@pytest.mark.parametrize("observed, cannot", [
    ("r=no,x=no,w=no,list=refused,owner=0,group=0,mode=700", "read/write"),
    ("r=yes,x=yes,w=no,list=ok,owner=0,group=0,mode=755", "write"),
])
def test_a_failed_ws_access_says_whose_workspace_it_is_and_what_to_do(plan, observed, cannot):
    line = f"PROBE\tws.access\tfail\tuid 1000 can read,search,write /workspace\t{observed}\n"
    engine = FakeEngine(output=[((line + "PROBE-END\tfail\t1\n").encode(), None)])
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    assert info.value.exit_code == 122
    assert (f"\n    hint: the agent (uid 1000) cannot {cannot} {plan.probe.wsroot}, which belongs to uid 0 "
            f"mode 0{observed[-3:]}: set `user:` in the policy to a uid that can, or use copy mode") in str(info.value)


@pytest.mark.parametrize("observed, says", [
    ("mounts=0,type=-,root=-,uid=-,gid=-,owner=0:0,mode=755", "must be exactly one mount"),
    ("mounts=1,type=tmpfs,root=/,uid=0,gid=0,owner=0:0,mode=700", "belongs to 0:0, not to the agent (uid 1000)"),
    ("mounts=1,type=tmpfs,root=/,uid=1000,gid=1000,owner=1000:1000,mode=755", "mode 0755: runc before 1.1.8"),
    ("mounts=1,type=ext4,root=/var/lib/docker/volumes/x/_data,uid=-,gid=-,owner=1000:1000,mode=700", "never shared"),
])
def test_a_failed_home_private_says_what_is_wrong_with_the_home(plan, observed, says):
    line = f"PROBE\thome.private\tfail\t1 mount at /home/agent <- tmpfs\t{observed}\n"
    engine = FakeEngine(output=[((line + "PROBE-END\tfail\t1\n").encode(), None)])
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    assert "\n    hint: " in str(info.value) and says in str(info.value), str(info.value)


def test_a_failed_check_without_a_hint_gets_none(plan):
    engine = FakeEngine(output=[((FAIL + "PROBE-END\tfail\t1\n").encode(), None)])
    with pytest.raises(ProbeFailed) as info:
        launch.run(engine, plan, Recorder())
    assert "hint" not in str(info.value)


def test_a_probe_that_skips_a_planned_check_is_a_failure_even_when_it_says_ok(plan):
    skipped = "".join(l + "\n" for l in every_check_passing(plan).splitlines() if "\tfs.protected\t" not in l)
    engine = FakeEngine(output=[(skipped.encode(), None), (b"AGENT RAN\n", None)])
    listener = Recorder()
    with pytest.raises(ProbeFailed, match=f"reported {len(plan.probe.checks) - 1} checks, not the "
                                          f"{len(plan.probe.checks)} planned: fs.protected"):
        launch.run(engine, plan, listener)
    assert listener.out == b"" and engine.calls[-1] == "remove"


def test_probe_that_crashes_is_a_failure(plan):
    engine = FakeEngine(output=[(PASS.encode(), b"sh: segfault\n")])
    with pytest.raises(ProbeFailed, match="did not complete"):
        launch.run(engine, plan, Recorder())
    assert engine.calls[-1] == "remove"


def every_check_passing(plan) -> str:
    return "".join(f"PROBE\t{check}\tpass\tx\tx\n" for check in plan.probe.checks) + \
        f"PROBE-END\tok\t{len(plan.probe.checks)}\n"


def test_passing_probe_streams_the_agent_and_returns_its_exit_code(plan):
    engine = FakeEngine(output=[((every_check_passing(plan) + "hello ").encode(), None), (b"world\n", None)], exit_code=3)
    listener = Recorder()
    outcome = launch.run(engine, plan, listener)
    assert outcome.exit_code == 3 and listener.out == b"hello world\n"
    assert engine.calls == ["create", "start", "stdin go", "remove"]   # the launcher's word, after the report
