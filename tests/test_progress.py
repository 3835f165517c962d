"""Long steps (image builds, debootstrap) say that they are alive and how far they are, with the
elapsed seconds, without a line per package: a fake engine, a fake debootstrap and a fake clock."""

from __future__ import annotations

import sys

import pytest

from launcher.engine import images
from launcher.engine.enginefake import FakeEngine
from launcher.errors import EngineError


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(images, "_now", fake)
    return fake


def build_engine(clock, stream, present=()):
    """The fake engine, playing back Docker's build stream, each line at its time on the clock; a
    present image was built from the current context."""
    def lines(context, tag):
        for at, line in stream:
            clock.now = 100.0 + at
            yield line

    built = {"dev.sandbox.context": images.agent_image().context_hash}
    return FakeEngine(images={images.BASE_IMAGE: {}, **{ref: {"Labels": built} for ref in present}}, builds=lines)


APT = "RUN apt-get update && apt-get install -y --no-install-recommends git curl ca-certificates python3 python3-pip"
BUILD = [(0, "Step 1/3 : FROM debian:bookworm-slim"), (0, " ---> 5f2b1a"), (1, f"Step 2/3 : {APT}"),
         (2, "Get:1 http://deb.debian.org/debian bookworm InRelease"), (5, "Get:2 …"), (6, "Get:3 …"),
         (7, "Unpacking git …"), (12, "Setting up git …"), (13, "Step 3/3 : USER agent"),
         (14, "Successfully built 9c1d2e"), (14, "Successfully tagged sandbox/agent:bookworm")]


def test_a_build_shows_each_step_with_the_image_and_seconds_and_a_heartbeat_in_a_long_one(clock):
    lines = []
    image = images.agent_image()
    assert images.build(build_engine(clock, BUILD), image, lines.append)
    assert lines == [
        f"building sandbox/agent:bookworm from {image.context}",
        "  sandbox/agent:bookworm: step 1/3: FROM debian:bookworm-slim (0 s)",
        f"  sandbox/agent:bookworm: step 2/3: {APT[:59]}… (1 s)",
        "  sandbox/agent:bookworm: step 2/3 still running (6 s)",      # 5 s after the last line
        "  sandbox/agent:bookworm: step 2/3 still running (12 s)",
        "  sandbox/agent:bookworm: step 3/3: USER agent (13 s)",
        "built sandbox/agent:bookworm in 14 s"]


def test_podman_s_build_steps_are_shown_the_same_way(clock):
    """buildah (podman's builder) says "STEP 1/3: FROM …", not Docker's "Step 1/3 : FROM …"."""
    lines = []
    podman = [(at, line.replace("Step ", "STEP ").replace(" : ", ": ")) for at, line in BUILD]
    assert images.build(build_engine(clock, podman), images.agent_image(), lines.append)
    assert "  sandbox/agent:bookworm: step 1/3: FROM debian:bookworm-slim (0 s)" in lines
    assert "  sandbox/agent:bookworm: step 3/3: USER agent (13 s)" in lines


def test_a_present_image_is_not_built_and_says_nothing(clock):
    lines = []
    assert not images.build(build_engine(clock, BUILD, present={images.AGENT_IMAGE}), images.agent_image(), lines.append)
    assert lines == []


DEBOOTSTRAP = [(0, "I: Retrieving InRelease"), (0, "I: Checking Release signature"),
               (1, "I: Retrieving Packages"), (1, "I: Validating Packages"),
               *[(2 + i // 4, f"I: {'Retrieving' if i % 2 == 0 else 'Validating'} pkg{i // 2}") for i in range(40)],
               (13, "W: a warning nobody needs here"), (14, "I: Extracting base-files..."),
               (15, "I: Extracting bash..."), (20, "I: Installing core packages..."),
               (21, "I: Unpacking required packages..."), (22, "I: Unpacking bash..."),
               (30, "I: Configuring required packages..."), (36, "I: Configuring bash..."),
               (40, "I: Base system installed successfully.")]


class FakeDebootstrap:
    """Stands in for subprocess.Popen: debootstrap's output on the fake clock; tar says nothing."""

    def __init__(self, argv, clock, fail=False):
        self.argv, self.clock, self.returncode = argv, clock, 1 if fail else 0
        self.stdout = self._lines() if argv[0] == "debootstrap" else iter(["tar: broken\n"] if fail else [])

    def _lines(self):
        for at, line in DEBOOTSTRAP:
            self.clock.now = 100.0 + at
            yield line + "\n"
        self.clock.now = 100.0 + 45

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Runs(list):
    """The commands run, in order; fail_tar makes tar exit 1."""

    fail_tar = False


@pytest.fixture
def fake_debootstrap(monkeypatch, clock):
    runs = Runs()

    def popen(argv, **kwargs):
        runs.append(argv[0])
        return FakeDebootstrap(argv, clock, fail=runs.fail_tar and argv[0] == "tar")

    monkeypatch.setattr(images.subprocess, "Popen", popen)
    monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(images.os, "geteuid", lambda: 0)   # debootstrap needs root; nothing runs here
    return runs


def test_debootstrap_shows_each_stage_once_then_at_most_a_line_every_few_seconds(clock, fake_debootstrap):
    lines, engine = [], build_engine(clock, [])
    images.bootstrap(engine, lines.append)
    assert fake_debootstrap == ["debootstrap", "tar"] and engine.imported == [images.BASE_IMAGE]
    assert lines[0].startswith("debootstrap --variant=minbase bookworm (about a minute) into ")
    assert lines[1:] == [
        "  debootstrap: Retrieving InRelease (0 s)",
        "  debootstrap: Checking Release signature (0 s)",
        "  debootstrap: Validating Packages (1 s)",
        "  debootstrap: Retrieving pkg8 (6 s)",      # a line per package: one every 5 s at most
        "  debootstrap: Retrieving pkg18 (11 s)",
        "  debootstrap: Extracting base-files... (14 s)",
        "  debootstrap: Installing core packages... (20 s)",
        "  debootstrap: Unpacking required packages... (21 s)",
        "  debootstrap: Configuring required packages... (30 s)",
        "  debootstrap: Configuring bash... (36 s)",
        "  debootstrap: Base system installed successfully. (40 s)",
        "packing the root filesystem (45 s)",
        "importing it as debian:bookworm-slim (45 s)",
        "created debian:bookworm-slim locally from Debian packages in 45 s (no registry was used)"]


def test_a_failing_step_reports_its_last_lines(clock, fake_debootstrap):
    fake_debootstrap.fail_tar = True
    with pytest.raises(EngineError, match="tar failed with exit code 1:\ntar: broken"):
        images.bootstrap(build_engine(clock, []), lambda line: None)


def test_run_passes_every_line_of_a_real_process_and_keeps_the_tail_for_errors():
    seen = []
    images._run([sys.executable, "-c", "import sys; print('one'); print('two', file=sys.stderr)"], seen.append)
    assert sorted(seen) == ["one", "two"]
    script = "import sys; [print(f'line {i}') for i in range(9)]; sys.exit(3)"
    with pytest.raises(EngineError) as caught:
        images._run([sys.executable, "-c", script])
    assert str(caught.value).splitlines() == [f"{sys.executable} failed with exit code 3:",
                                              *[f"line {i}" for i in range(4, 9)]]


def test_a_silent_build_step_still_gets_a_heartbeat(monkeypatch):
    import time

    monkeypatch.setattr(images, "HEARTBEAT", 0.05)

    def silent(context, tag):
        yield "Step 2/2 : RUN make"
        time.sleep(0.3)        # a step that prints nothing

    lines = []
    images.build(FakeEngine(builds=silent), images.agent_image(), lines.append)
    assert any("step 2/2 still running" in line for line in lines), lines
    assert lines[-1].startswith("built sandbox/agent:bookworm in ")
