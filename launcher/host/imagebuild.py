"""A policy's extension of its image (`packages:`, `build:`): what the plan builds, read from the
host once (the repository's Dockerfile and its context, by content), and checked before anything
runs: Debian package names by their grammar (the schema), a Dockerfile's every FROM our agent
image. The engine side (building, caching by tag) is launcher/engine/imageext.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace

from launcher.errors import PolicyError, Problem
from launcher.policy.model import Policy

# The images a repository's Dockerfile may start FROM (launcher.engine.images.AGENT_IMAGE, FULL_IMAGE).
AGENT_BASES = ("sandbox/agent:bookworm", "sandbox/agent:bookworm-full")
REPOSITORY = "sandbox/agent-ext"
PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")   # Debian policy 5.6.1 (the schema says it too)


@dataclass(frozen=True, kw_only=True)
class ImageBuild:
    """The image a plan runs: `base` (the policy's image), then the repository's Dockerfile (when
    given, FROM our agent image), then `packages` and the agent image's hardening on top."""

    base: str
    packages: tuple[str, ...] = ()
    dockerfile: str = ""      # host path of the repository's Dockerfile, "" none
    context: str = ""         # host path of its build context
    digest: str = ""          # sha256 of the Dockerfile and the context's files (what the tag follows)
    tag: str = ""


def _logical_lines(text: str) -> list[str]:
    """Dockerfile instructions: comments dropped, backslash continuations joined."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") and not current:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def base_problem(text: str) -> str:
    """Why this Dockerfile does not start from our agent image ("" when every FROM does: the agent
    image itself, or an earlier stage of the same file)."""
    stages: set[str] = set()
    froms = 0
    for line in _logical_lines(text):
        words = line.split()
        if words[0].upper() != "FROM":
            continue
        froms += 1
        args = [w for w in words[1:] if not w.startswith("--")]
        if not args:
            return "a FROM without an image"
        image = args[0]
        if "$" in image:
            return f"FROM {image}: a build argument in FROM cannot be checked"
        if image not in AGENT_BASES and image.lower() not in stages:
            return f"FROM {image}"
        if len(args) >= 3 and args[1].upper() == "AS":
            stages.add(args[2].lower())
    return "" if froms else "no FROM instruction"


def context_digest(dockerfile: str, context: str) -> str:
    """sha256 over the Dockerfile's bytes and every file under the context (path, then bytes; a
    symbolic link by its target). .git is left out: a commit alone does not rebuild the image."""
    digest = hashlib.sha256()
    with open(dockerfile, "rb") as handle:
        digest.update(b"Dockerfile\0" + handle.read() + b"\0")
    for root, dirs, files in os.walk(context):
        dirs[:] = sorted(d for d in dirs if not (root == context and d == ".git"))
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(root, d))):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, context).encode("utf-8", "surrogateescape")
            if os.path.islink(path):
                digest.update(rel + b"\0link\0" + os.readlink(path).encode("utf-8", "surrogateescape") + b"\0")
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    digest.update(rel + b"\0file\0" + hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def tag_for(base: str, packages: tuple[str, ...], digest: str) -> str:
    """The extended image's tag: its content's hash (the base by name here; the engine side also
    rebuilds it when the base's id changed, kept as a label)."""
    key = "\0".join([base, " ".join(sorted(packages)), digest])
    return f"{REPOSITORY}:{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def gather(policy: Policy, workspace: str) -> ImageBuild | None:
    """The plan's image build, or None when the policy extends nothing. Reads the repository's
    Dockerfile (or devcontainer.json) and context; refuses (PolicyError) a missing one or another
    base, before any build."""
    build = policy.build
    if not policy.packages and not build.dockerfile and not build.devcontainer:
        return None
    bad = [n for n in policy.packages if not PACKAGE.match(n)]
    if bad:   # the schema refuses them already; a policy made in code passes here too
        raise PolicyError([Problem(file=policy.source, path="packages", expected="Debian package names",
                                   found=repr(bad[0]), hint="lower-case letters, digits, + - . only")])

    def refuse(path: str, expected: str, found: str, hint: str) -> PolicyError:
        return PolicyError([Problem(file=build.source or policy.source, path=path, expected=expected,
                                    found=found, hint=hint)])

    root = os.path.realpath(workspace)

    def inside(key: str, rel: str) -> str:
        path = os.path.realpath(os.path.join(root, rel))
        if path != root and not path.startswith(root + "/"):
            raise refuse(key, "a path inside the workspace", f"{path} (a link out of {root})",
                         "name the file itself, inside the repository")
        return path

    base, key = policy.image, "build.dockerfile"
    wanted = (build.dockerfile, build.context) if build.dockerfile else ("", "")
    if build.devcontainer:
        key = "build.devcontainer"
        wanted, image = _devcontainer(inside(key, build.devcontainer), refuse)
        base = image or base
    dockerfile = context = digest = ""
    if wanted[0] and policy.image not in AGENT_BASES:   # the build replaces the image: it is never dropped unsaid
        raise refuse(key, f"a build on {' or '.join(AGENT_BASES)} (the build replaces the policy's image)",
                     f"the image {policy.image}", "drop build:, or the image (and --agent: an agent's image "
                     "carries its CLI, a repository Dockerfile does not); packages: extend any Debian image")
    if wanted[0]:
        dockerfile, context = inside(key, wanted[0]), inside(key.replace("dockerfile", "context"), wanted[1])
        if not os.path.isfile(dockerfile):
            raise refuse(key, "a Dockerfile in the workspace", f"no file {dockerfile}",
                         "the path is relative to the workspace (in a devcontainer.json, to its directory)")
        if not os.path.isdir(context):
            raise refuse(key, "a build context directory in the workspace", f"no directory {context}", "for example .")
        with open(dockerfile, "rb") as handle:
            problem = base_problem(handle.read().decode("utf-8", "replace"))
        if problem:
            raise refuse(key, "a Dockerfile whose every FROM is " + " or ".join(AGENT_BASES)
                         + " (or an earlier stage)", f"{problem} in {dockerfile}",
                         "start it with FROM sandbox/agent:bookworm: the sandbox's guarantees are built on it")
        digest = context_digest(dockerfile, context)
    return ImageBuild(base=base, packages=policy.packages, dockerfile=dockerfile, context=context,
                      digest=digest, tag=tag_for(base, policy.packages, digest))


def protected(policy: Policy) -> Policy:
    """The policy with what its build reads made read-only in the sandbox (workspace.protect): the
    Dockerfile, its context unless that is the whole workspace, the devcontainer.json (whose
    directory, .devcontainer, is protected anyway). What a later run builds on the host's engine is
    not the agent's to change; a context of "." stays writable (docs/policy.md says so)."""
    build = policy.build
    wanted = (build.dockerfile, build.context if build.dockerfile and build.context != "." else "", build.devcontainer)
    extra = tuple(p for p in dict.fromkeys(wanted) if p and p not in policy.workspace.protect)
    return replace(policy, workspace=replace(policy.workspace, protect=policy.workspace.protect + extra)) if extra else policy


def _jsonc(text: str) -> str:
    """JSON with comments (devcontainer.json): // and /* */ comments and trailing commas dropped."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = n if text.find("\n", i) < 0 else text.find("\n", i)
        elif text.startswith("/*", i):
            i = n if text.find("*/", i + 2) < 0 else text.find("*/", i + 2) + 2
        else:
            if not (text[i] == "," and re.match(r"\s*[}\]]", text[i + 1:])):
                out.append(text[i])
            i += 1
    return "".join(out)


RECIPE_SHOWN = 64 * 1024   # a recipe file longer than this is covered by its digest alone


def approval_appendix(build, workspace: str) -> bytes:
    """What the approval of a repository policy with `build:` covers besides the file itself: the
    build runs the Dockerfile's RUN steps on the host's engine, so the devcontainer.json and the
    Dockerfile it reads (as text, to review and diff) and its context (by digest) are part of what
    was approved; a change to any of them asks again. b"" without `build:`: an approval of such a
    policy keeps its digest. `build` is the raw YAML value; a malformed one is the schema's to refuse."""
    if not isinstance(build, dict) or not build:
        return b""
    root = os.path.realpath(workspace)
    lines = ["", "# sandbox: this approval also covers what build: reads (it runs on the host's engine)"]

    def inside(rel) -> str | None:
        path = os.path.realpath(os.path.join(root, rel)) if isinstance(rel, str) and rel else ""
        return path if path == root or path.startswith(root + "/") else None

    def show(path: str | None, what) -> None:
        name = what if path is None else os.path.relpath(path, root)
        if path is None or not os.path.isfile(path):
            lines.append(f"# {name}: {'outside the workspace' if path is None else 'no such file'}")
            return
        with open(path, "rb") as handle:
            data = handle.read()
        lines.append(f"# {name}: sha256 {hashlib.sha256(data).hexdigest()}")
        if len(data) <= RECIPE_SHOWN:
            lines.extend(f"#   | {line}" for line in data.decode("utf-8", "replace").splitlines())

    dockerfile, context = build.get("dockerfile"), build.get("context", ".")
    if "devcontainer" in build:
        found = inside(build.get("devcontainer"))
        show(found, build.get("devcontainer"))
        dockerfile = context = None
        if found and os.path.isfile(found):
            try:
                (dockerfile, context), _ = _devcontainer(found, lambda *a: PolicyError([]))
            except PolicyError:
                pass
    if dockerfile:
        path = inside(dockerfile)
        show(path, dockerfile)
        where = inside(context)
        if path and os.path.isfile(path) and where and os.path.isdir(where):
            lines.append(f"# context {os.path.relpath(where, root)}: sha256 {context_digest(path, where)}")
    return "\n".join(lines).encode() + b"\n"


def _devcontainer(path: str, refuse) -> tuple[tuple[str, str], str]:
    """((Dockerfile, context) as host paths, or ("", ""); image or "") from a devcontainer.json: its
    build.dockerfile (legacy dockerFile) relative to its directory, else its image, which must be ours."""
    hint = "build.dockerfile naming a Dockerfile FROM sandbox/agent:bookworm, or image: sandbox/agent:bookworm"
    try:
        with open(path, "rb") as handle:
            doc = json.loads(_jsonc(handle.read().decode("utf-8", "replace")))
    except OSError as exc:
        raise refuse("build.devcontainer", "a devcontainer.json in the workspace", f"{path}: {exc.strerror}",
                     "the path is relative to the workspace, e.g. .devcontainer/devcontainer.json") from None
    except ValueError as exc:
        raise refuse("build.devcontainer", "a devcontainer.json (JSON with comments)", f"{path}: {exc}", hint) from None
    spec = doc.get("build") if isinstance(doc, dict) and isinstance(doc.get("build"), dict) else {}
    dockerfile = spec.get("dockerfile") or (doc.get("dockerFile") if isinstance(doc, dict) else None)
    context = spec.get("context") or (doc.get("context") if isinstance(doc, dict) else None) or "."
    here = os.path.dirname(path)
    if isinstance(dockerfile, str) and isinstance(context, str) and dockerfile:
        return (os.path.join(here, dockerfile), os.path.join(here, context)), ""
    image = doc.get("image") if isinstance(doc, dict) else None
    if image in AGENT_BASES:
        return ("", ""), image
    raise refuse("build.devcontainer", "a devcontainer.json whose build.dockerfile starts FROM our agent image, or whose "
                 "image is " + " or ".join(AGENT_BASES), f"image {image!r} in {path}" if image else f"neither in {path}",
                 hint)


def recipe(packages: tuple[str, ...]) -> str:
    """The Dockerfile of the last step: PACKAGES installed (trusting CA_BUNDLE, the host's extra
    CAs, for those downloads only), then the agent image's guarantees again for all it added."""
    install = ("apt-get -o Acquire::https::CAInfo=/tmp/sandbox-ca.pem update; apt-get -o Acquire::https::CAInfo="
               f"/tmp/sandbox-ca.pem install -y --no-install-recommends libcap2-bin {' '.join(packages)};")
    return f"""ARG BASE
FROM ${{BASE}}
USER 0:0
ARG DEBIAN_FRONTEND=noninteractive
ARG CA_BUNDLE=""
RUN set -eu; \\
    cat /etc/ssl/certs/ca-certificates.crt > /tmp/sandbox-ca.pem 2>/dev/null || true; \\
    printf '%s' "$CA_BUNDLE" >> /tmp/sandbox-ca.pem; \\
    {install} \\
    getcap -r / 2>/dev/null | while read -r f _; do setcap -r "$f"; done; \\
    caps="$(getcap -r / 2>/dev/null)"; \\
    if [ -n "$caps" ]; then echo "file capabilities remain: $caps" >&2; exit 1; fi; \\
    apt-get purge -y --auto-remove libcap2-bin; \\
    apt-get clean; \\
    rm -rf /tmp/sandbox-ca.pem /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log; \\
    find / -xdev -perm /6000 -type f -exec chmod a-s {{}} +; \\
    left="$(find / -xdev -perm /6000 -type f)"; \\
    if [ -n "$left" ]; then echo "setuid/setgid files remain: $left" >&2; exit 1; fi
USER 1000:1000
"""
