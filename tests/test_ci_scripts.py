"""CI's scripts cannot go green past a failure: no && list in .ci/ (under `set -e` only its last
command stops the script), every part a `step` whose exit code ends the run, the README's test
command run one command per step, and the time of each part printed at the end, also after a failure."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from test_quickstart import quickstart

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci"


def code_lines(path: Path) -> list[str]:
    """The lines of a shell script that are not comments, stripped."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]


def test_no_script_of_ci_chains_commands_with_and_outside_a_condition():
    for path in sorted(CI.iterdir()):
        for line in code_lines(path):
            if "&&" in line:
                assert re.match(r"(el)?if |while ", line), f"{path.name}: {line}"


def test_ci_runs_each_command_of_the_readmes_test_command_as_its_own_step():
    commands = quickstart()
    assert len(commands) == 2 and "sandbox up examples/untrusted-repo" in commands[0]
    steps = [line.split(" ", 2)[2] for line in code_lines(CI / "run") if line.startswith("step ")]
    parts = commands[1].split(" && ")
    assert len(parts) == 3 and all(part in steps for part in parts), (parts, steps)
    assert [steps.index(part) for part in parts] == sorted(steps.index(part) for part in parts)


def run_steps(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "ci-script"
    script.write_text(f"set -euo pipefail\n. {CI / 'steps.sh'}\ntrap ci_summary EXIT\n{body}\n")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)


def test_the_first_failing_step_ends_the_run_with_its_exit_code_and_every_time_is_printed(tmp_path):
    done = run_steps("step first true\nstep pytest sh -c 'exit 5'\nstep never touch never", tmp_path)
    assert done.returncode == 5, done
    assert re.search(r"^  first +\d+ s  ok$", done.stdout, re.M), done.stdout
    assert re.search(r"^  pytest +\d+ s  failed \(exit 5\)$", done.stdout, re.M), done.stdout
    assert re.search(r"^  total +\d+ s  failed \(exit 5\)$", done.stdout, re.M), done.stdout
    assert "never" not in done.stdout and not (tmp_path / "never").exists()


def test_a_run_whose_steps_pass_exits_0_with_its_summary(tmp_path):
    done = run_steps("step one true\nstep two true", tmp_path)
    assert done.returncode == 0 and re.search(r"^  two +\d+ s  ok\n  total +\d+ s  ok$", done.stdout, re.M), done


def test_a_step_that_is_a_shell_function_is_refused(tmp_path):
    """Run under `||`, a function's failing lines would pass unseen (set -e is off inside it)."""
    done = run_steps("several() { false; true; }\nstep install several\ntouch after", tmp_path)
    assert done.returncode == 2 and "shell function several" in done.stderr and not (tmp_path / "after").exists()


def test_steps_under_or_still_report_the_failure(tmp_path):
    """.ci/podman runs its steps under `|| failed=1` so that its leftover check always runs."""
    done = run_steps("failed=0\nstep a false || failed=1\nstep b true || failed=1\nexit $failed", tmp_path)
    assert done.returncode == 1 and re.search(r"^  a +\d+ s  failed \(exit 1\)$", done.stdout, re.M), done.stdout


def test_no_test_reads_the_shared_directory_beside_the_checkout():
    """A fresh clone has no ../shared: data the tests need lives in tests/data/."""
    for path in sorted((ROOT / "tests").glob("*.py")):
        text = path.read_text()
        if path.name != "test_ci_scripts.py":
            found = re.findall(r'/ "shared"|\.\./shared/|/work/shared\b|\bshared/k8s', text)
            assert not found, f"{path.name} names {found}"


FAKE_PYTHON3 = r'''#!/bin/sh
# python3 -m venv .venv: a venv whose pip and python log their arguments and exit as the test says
# (pytest only once podman's background part has started, so that a test can see it stopped)
mkdir -p .venv/bin
for tool in pip python; do
  cat > ".venv/bin/$tool" <<EOF
#!/bin/sh
echo "$tool \$*" >> log
case "\$*" in
  *pytest*) while [ ! -e podman.pid ]; do sleep 0.1; done; exit \${PYTEST_RC:-0} ;;
  *install*) exit \${PIP_RC:-0} ;;
esac
EOF
  chmod +x ".venv/bin/$tool"
done
'''


def selftested(line: str) -> set[str]:
    """The presets of a logged `python -m launcher selftest -p A -p B … --output …` line."""
    words = line.split()
    assert words[:4] == ["python", "-m", "launcher", "selftest"] and words[-2:] == ["--output", "/tmp/sandbox-selftest.json"]
    assert words[4:-2:2] == ["-p"] * len(words[5:-2:2]), line
    return set(words[5:-2:2])


def test_the_preset_ci_does_not_selftest_again_is_the_one_pytest_selftested():
    test = (ROOT / "tests" / "test_selftest.py").read_text()
    assert '["selftest", "--policy", "read-only", "--output", str(report)]' in test


def fake_ci(tmp_path: Path, **rcs: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    """.ci/run itself, in a copy whose install, podman, python3, pip and python only log."""
    (tmp_path / ".ci").mkdir()
    for name in ("run", "steps.sh", "await"):
        (tmp_path / ".ci" / name).write_text((CI / name).read_text())
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    (tmp_path / ".ci" / "install").write_text("#!/bin/sh\necho install >> log\n")
    # podman's part runs in the background: it notes its pid, and after PODMAN_SECONDS logs and exits PODMAN_RC
    (tmp_path / ".ci" / "podman").write_text(
        "#!/bin/sh\necho $$ > podman.pid\nsleep ${PODMAN_SECONDS:-0}\necho podman >> log\nexit ${PODMAN_RC:-0}\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(FAKE_PYTHON3)
    for path in [tmp_path / ".ci" / name for name in ("run", "await", "install", "podman")] + [tmp_path / "bin" / "python3"]:
        path.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "TMPDIR": str(tmp_path), **{k.upper(): str(v) for k, v in rcs.items()}}
    done = subprocess.run([str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60)
    log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return done, log


def test_ci_runs_every_part_in_order_and_prints_their_times(tmp_path):
    done, log = fake_ci(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "podman" in log   # started after doctor, in the background: its place among the others varies
    log = [line for line in log if line != "podman"]
    assert log[:4] + log[5:] == ["install", "pip install -q .[test]", "python -m launcher doctor --fix",
                                 "python -m pytest -ra"]
    # every preset of policies/ but read-only, which tests/test_selftest.py selftests in pytest
    assert selftested(log[4]) == {p.stem for p in (ROOT / "policies").glob("*.yaml")} - {"read-only"}
    parts = re.findall(r"^  (\S+) +\d+ s  ok$", done.stdout, re.M)
    assert parts == ["install", "venv", "pip", "doctor", "pytest", "selftest", "podman", "total"], done.stdout


def test_a_failed_install_stops_ci_before_pytest_with_its_exit_code(tmp_path):
    done, log = fake_ci(tmp_path, pip_rc=3)
    assert done.returncode == 3 and not any("pytest" in line for line in log), log
    assert re.search(r"^  pip +\d+ s  failed \(exit 3\)$", done.stdout, re.M), done.stdout


def test_pytest_collecting_nothing_fails_ci_and_stops_podmans_part(tmp_path):
    done, log = fake_ci(tmp_path, pytest_rc=5, podman_seconds=30)
    assert done.returncode == 5 and re.search(r"^  total +\d+ s  failed \(exit 5\)$", done.stdout, re.M), done.stdout
    assert "ci: podman, cut short:" in done.stdout and "podman" not in log
    pid = int((tmp_path / "podman.pid").read_text())
    assert gone(pid), "podman's background part outlived CI"


def gone(pid: int, seconds: float = 5) -> bool:
    """Whether process PID ends (or is only a zombie) within SECONDS: a kill takes a moment to land."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_a_failing_podman_part_fails_ci_with_its_exit_code(tmp_path):
    done, _ = fake_ci(tmp_path, podman_rc=4)
    assert done.returncode == 4 and re.search(r"^  podman +\d+ s  failed \(exit 4\)$", done.stdout, re.M), done.stdout
