"""`sandbox extend`: the new end's arithmetic, the ceiling (limits.session before --timeout) and
where it comes from, how the sandbox and `ls` learn the new end, and bad input."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from launcher import labels as label
from launcher.cli import main
from launcher.engine import engine
from launcher.engine.enginefake import FakeEngine
from launcher.errors import EngineError, ExitCode, NoSandbox, PolicyError
from launcher.host import extensions
from launcher.launch import sandboxes
from launcher.pipeline import pipeline
from launcher.plan import lifetime
from launcher.plan.compiler import compile_policy
from launcher.plan.lifetime import Ceiling, extended_end

from conftest import fake_facts, preset

TEN_H = Ceiling(seconds=36000, source="policy untrusted.yaml")


# the arithmetic

def test_the_new_end_counts_from_the_current_end_while_it_is_ahead():
    assert extended_end(now=100, end=1000, start=0, add=600, limit=TEN_H) == 1600


def test_the_new_end_counts_from_now_once_the_current_end_passed():
    assert extended_end(now=2000, end=1000, start=0, add=600, limit=TEN_H) == 2600


def test_an_end_exactly_at_the_ceiling_is_allowed_one_second_more_is_not():
    assert extended_end(now=0, end=30000, start=0, add=6000, limit=TEN_H) == 36000
    with pytest.raises(PolicyError) as past:
        extended_end(now=0, end=30000, start=0, add=6001, limit=TEN_H, name="box")
    said = str(past.value)
    assert past.value.exit_code == ExitCode.POLICY_INVALID == 120
    assert "policy untrusted.yaml: limits.session" in said             # where the ceiling comes from
    assert "its ceiling, 10h after box started" in said                # the ceiling
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(36000)) in said   # the latest end possible
    assert "extend by 100m at most" in said and "--timeout only shortens" in said


def test_the_room_left_is_said_in_whole_minutes():
    with pytest.raises(PolicyError, match="extend by 599m at most"):
        extended_end(now=0, end=50, start=0, add=36000, limit=TEN_H)   # 35950 s left
    with pytest.raises(PolicyError, match="extend by 50s at most"):
        extended_end(now=0, end=35950, start=0, add=60, limit=TEN_H)


def test_a_session_at_its_ceiling_already_says_so():
    with pytest.raises(PolicyError, match="it runs until its ceiling already"):
        extended_end(now=0, end=36000, start=0, add=1, limit=TEN_H)


# the ceiling: what the layers allow, not what --timeout shortened

def test_the_ceiling_is_limits_session_before_the_command_line_and_names_its_source(tmp_path):
    short = pipeline.layered("untrusted", str(tmp_path), pipeline.LayerOptions(session="20s")).effective
    assert short.policy.limits.session_seconds == 20
    found = lifetime.ceiling(short)
    assert found.seconds == 36000 and found.source.startswith("the schema's default, under policy ")
    assert found.source.endswith("untrusted.yaml")
    dev = lifetime.ceiling(pipeline.layered("devcontainer", str(tmp_path), pipeline.LayerOptions(session="1h")).effective)
    assert dev.seconds == 12 * 3600 and dev.source.startswith("policy ") and dev.source.endswith("devcontainer.yaml")


def test_a_user_layer_that_lowers_limits_session_is_the_ceiling_and_named(tmp_path, monkeypatch):
    config = tmp_path / "config"
    (config / "sandbox").mkdir(parents=True)
    (config / "sandbox" / "policy.yaml").write_text("version: 1\nlimits:\n  session: 4h\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    eff = pipeline.layered("untrusted", str(tmp_path), pipeline.LayerOptions(session="20s")).effective
    assert lifetime.ceiling(eff) == Ceiling(seconds=4 * 3600, source=f"user {config}/sandbox/policy.yaml")


def test_the_ceiling_travels_in_a_label_and_in_the_main_process_argv():
    assert Ceiling.of_label(TEN_H.label()) == TEN_H
    assert Ceiling.of_label("") is None and Ceiling.of_label("ten hours") is None
    assert lifetime.up_main(20, 3600, 36000)[-3:] == ("20", "3600", "36000")
    assert lifetime.up_main(20, 3600)[-1] == "20"           # no ceiling given: the session is its own
    assert lifetime.up_main(7200, 3600, 60)[-1] == "7200"   # never below the session itself
    plan = compile_policy(preset("untrusted"), fake_facts(), kind="up", ceiling=TEN_H)
    assert dict(plan.container.labels)[label.SESSION_CEILING] == "36000 policy untrusted.yaml"
    assert plan.container.command[-1] == "36000"
    run = compile_policy(preset("untrusted"), fake_facts(), kind="run", ceiling=TEN_H)
    assert label.SESSION_CEILING not in dict(run.container.labels)


def test_the_loop_reads_the_end_only_as_digits_and_clamps_it_to_its_own_ceiling():
    script = lifetime.UP_MAIN
    assert f"read -r asked 2>/dev/null <{lifetime.END_FILE}" in script
    assert "*[!0-9]*|\"\") ;;" in script                           # no arithmetic on anything else
    assert '[ "$asked" -le "$latest" ] || asked=$latest' in script   # latest = start + $3
    assert "latest=$((start + ceiling))" in script and "ceiling=${3:-$1}" in script
    assert "end=$asked; warned_end=;" in script                       # warned again before the new end
    assert lifetime.END_FILE.startswith("/dev/")                      # root's tmpfs, 755: not the agent's


# the sandbox and ls learn it

class Recording(FakeEngine):
    def __init__(self, **knobs):
        super().__init__(**knobs)
        self.ran: list[tuple[str, list[str], str]] = []

    def exec_stream(self, ref, argv, user=""):
        self.ran.append((ref, list(argv), user))
        return super().exec_stream(ref, argv, user)


def with_session(*, kind="up", session="20 3600", ceiling="36000 policy untrusted.yaml", state="running",
                 code=0) -> Recording:
    fake = Recording(execs=lambda argv: (((None, b"mv: cannot move"),) if code else (), code))
    labels = {label.MANAGED: "1", label.KIND: kind, label.WORKSPACE: "/w"}
    labels |= {label.SESSION: session} if session else {}
    labels |= {label.SESSION_CEILING: ceiling} if ceiling else {}
    fake.http.add_container("box", labels, status=state)
    return fake


def test_extend_writes_the_end_inside_as_root_and_ls_shows_it():
    fake = with_session()   # the fake's containers were created at epoch 0: this one ends at 20
    assert sandboxes.ls(fake)[0].ends == 20
    done = sandboxes.extend(fake, None, "/w/sub", 30, now=5)
    assert (done.name, done.ends, done.was, done.latest, done.ceiling, done.idle) == ("box", 50, 20, 36000, TEN_H, 3600)
    ref, argv, user = fake.ran[-1]
    assert user == "0" and argv == lifetime.write_end(50) and argv[-1] == "50"
    assert lifetime.END_FILE in argv[3]
    assert sandboxes.ls(fake)[0].ends == 50
    again = sandboxes.extend(fake, "box", "/elsewhere", 60, now=10)   # from the extended end
    assert (again.was, again.ends) == (50, 110) and sandboxes.ls(fake)[0].ends == 110


def test_an_extension_of_an_earlier_container_of_the_same_name_is_not_shown():
    fake = with_session()
    extensions.save("box", "another-container-id", 999)
    assert sandboxes.ls(fake)[0].ends == 20
    sandboxes.down(fake, "box")
    assert extensions.end_of("box", "another-container-id") is None   # down forgets it


def test_extend_past_the_ceiling_writes_nothing():
    fake = with_session(ceiling="60 user /etc/me.yaml")
    with pytest.raises(PolicyError, match="user /etc/me.yaml: limits.session"):
        sandboxes.extend(fake, "box", "/", 41, now=5)
    assert fake.ran == [] and sandboxes.ls(fake)[0].ends == 20


@pytest.mark.parametrize("session, ceiling, why", [(None, None, "a sandbox run"),
                                                    ("20 3600", None, "made before sandbox extend")])
def test_a_sandbox_without_a_session_or_a_ceiling_is_refused(session, ceiling, why):
    fake = with_session(session=session, ceiling=ceiling)
    with pytest.raises(PolicyError, match=why) as refused:
        sandboxes.extend(fake, "box", "/", 30, now=5)
    assert refused.value.exit_code == 120 and fake.ran == []


def test_no_such_sandbox_or_a_stopped_one_is_117():
    for fake, name in ((with_session(), "nope"), (with_session(state="exited"), "box"), (with_session(), None)):
        with pytest.raises(NoSandbox) as missing:
            sandboxes.extend(fake, name, "/elsewhere", 30, now=5)
        assert missing.value.exit_code == ExitCode.NO_SANDBOX == 117


def test_a_failed_write_inside_is_an_engine_error_and_ls_keeps_the_old_end():
    fake = with_session(code=1)
    with pytest.raises(EngineError, match="mv: cannot move"):
        sandboxes.extend(fake, "box", "/", 30, now=5)
    assert sandboxes.ls(fake)[0].ends == 20


# the command line

def invoke(monkeypatch, fake, *args):
    monkeypatch.setattr(engine, "connect", lambda **_: fake)
    return CliRunner().invoke(main, ["extend", *args], catch_exceptions=False)


def test_extend_json_is_the_shared_envelope(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 5.0)
    result = invoke(monkeypatch, with_session(), "box", "30s", "--json")
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert {k: said[k] for k in ("command", "ok", "exit_code", "sandbox", "error")} == \
        {"command": "extend", "ok": True, "exit_code": 0, "sandbox": "box", "error": ""}
    assert (said["ends"], said["was"], said["latest"], said["ceiling"], said["idle"]) == (50, 20, 36000, 36000, 3600)
    assert said["ceiling_source"] == "policy untrusted.yaml"


def test_extend_says_the_new_end_and_the_ceiling(monkeypatch, tmp_path):
    monkeypatch.setattr(time, "time", lambda: 5.0)
    monkeypatch.chdir(tmp_path)
    result = invoke(monkeypatch, with_session(), "box", "1m")
    assert result.exit_code == 0 and "box now ends at" in result.stderr
    assert "limits.session 10h, policy untrusted.yaml" in result.stderr


def test_extend_past_the_ceiling_is_120_with_the_ceiling_its_source_and_the_latest_end(monkeypatch):
    result = invoke(monkeypatch, with_session(), "box", "2h")   # now is long past 10h after epoch 0
    assert result.exit_code == 120
    assert "policy untrusted.yaml: limits.session" in result.stderr and "10h after box started" in result.stderr
    assert "at the latest" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, words", [(("box", "2 hours"), "Invalid value for 'DURATION'"),
                                         (("0s",), "above zero"), (("box", "200h"), "at most 168h"),
                                         ((), "expected [NAME] DURATION"), (("a", "b", "1h"), "expected [NAME] DURATION")])
def test_bad_input_is_a_usage_error_with_a_hint(monkeypatch, args, words):
    result = invoke(monkeypatch, with_session(), *args)
    assert result.exit_code == ExitCode.USAGE and words in result.stderr and "Traceback" not in result.stderr


def test_no_such_sandbox_is_117_on_the_command_line_too(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for args in (("nope", "1h"), ("1h",)):
        result = invoke(monkeypatch, with_session(), *args)
        assert result.exit_code == 117 and "Traceback" not in result.stderr, result.stderr
