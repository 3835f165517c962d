"""The README's two Quick start commands, read out of README.md so they cannot drift: the first
runs for real in a fresh copy of the repository with Debian's own /usr/bin/python3 (where a plain
`pip install .` is refused), its shell fed `exit` through a pty; the second is what .ci/run runs (tests/test_ci_scripts.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import read_until

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent
DEBIAN_PYTHON = "/usr/bin/python3"


def quickstart() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Quick start"):]
    block = block[block.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true")


def _needs(condition: bool, why: str) -> None:
    if not condition:
        if _in_ci():
            pytest.fail(f"CI=true and {why}: .ci/run prepares it")
        pytest.skip(why)


def _copy_of_the_repository(to: Path) -> Path:
    """The files git knows (the working tree's version, so a local change is tested too)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file() and not (ROOT / name).is_symlink():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, to / name)
    subprocess.run(["git", "init", "-q"], cwd=to, check=True)
    return to


def test_the_main_job_works_with_debians_own_python_and_leaves_nothing(engine, tmp_path):
    wheels = os.environ.get("SANDBOX_TEST_WHEELHOUSE", "")
    _needs(os.access(DEBIAN_PYTHON, os.X_OK), f"no {DEBIAN_PYTHON}")
    _needs(bool(wheels) and os.path.isdir(wheels), "SANDBOX_TEST_WHEELHOUSE (wheels for an offline install) is not set")
    assert not [c for c in engine.list() if c.name == "sandbox-untrusted-repo"], \
        "a sandbox named sandbox-untrusted-repo is running already: `sandbox down sandbox-untrusted-repo`"
    clone = _copy_of_the_repository(tmp_path / "clone")   # owned by root, as this test runs: copy mode copes
    command = quickstart()[0]
    # Debian's python3 first on PATH; pip gets the wheels fetched by .ci/run instead of a registry.
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "TERM": "xterm",
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           **{k: os.environ[k] for k in ("SANDBOX_ORG_POLICY", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "DOCKER_HOST")
              if k in os.environ}}
    workspace = clone / "examples" / "untrusted-repo"
    readme = (workspace / "README.md").read_text()
    primary, secondary = os.openpty()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=clone, env=env, stdin=secondary, stdout=secondary,
                            stderr=secondary, start_new_session=True)
    os.close(secondary)
    sandbox = [str(clone / ".venv" / "bin" / "sandbox")]

    def then(*args):
        return subprocess.run(sandbox + list(args), cwd=clone, env=env, capture_output=True, text=True, timeout=300)

    try:
        seen = read_until(primary, b"is up until", 600)
        assert b"probe passed" in seen and b"is up until" in seen, seen[-3000:].decode(errors="replace")
        os.write(primary, b"echo fixed >> README.md; ./scripts/try-everything.sh | tail -1; echo QUICKSTART=$(id -u)\n")
        seen = read_until(primary, b"QUICKSTART=1000", 120)
        assert b"QUICKSTART=1000" in seen and b"blocked, 0 escaped" in seen, seen[-3000:].decode(errors="replace")
        os.write(primary, b"exit\n")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(primary)
        down = then("down", "sandbox-untrusted-repo")
    assert down.returncode == 0 and "its work stays in the copy sandbox-untrusted-repo" in down.stderr, down.stderr
    # The README's story: the host tree is as it was; diff shows the change and what apply refuses.
    assert (workspace / "README.md").read_text() == readme
    stat = then("diff", "sandbox-untrusted-repo", "--stat")
    assert " M README.md" in stat.stdout and "REFUSED" in stat.stdout, stat.stdout + stat.stderr
    applied = then("apply", "sandbox-untrusted-repo")
    assert applied.returncode == 0 and (workspace / "README.md").read_text() == readme + "fixed\n", applied.stderr
    assert not (workspace / ".git").exists() and not (workspace / ".sandbox.yaml").exists()
    assert then("discard", "sandbox-untrusted-repo").returncode == 0
    version = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"],
                             capture_output=True, text=True)
    assert version.stdout.strip() == "/usr"   # the venv is Debian's python, not this machine's other one
    assert engine.list(f"dev.sandbox.workspace={workspace}") == []
    assert engine.list_networks(f"dev.sandbox.workspace={workspace}") == []
    assert engine.list_volumes(f"dev.sandbox.workspace={workspace}") == []
