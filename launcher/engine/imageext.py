"""Building a policy's extended image (imagebuild.ImageBuild) on the engine, once per content: the
repository's Dockerfile (FROM our agent image, checked at compile time), then the packages and the
agent image's hardening on top, both trusting the host's extra CAs for their downloads only, as
our own images do. A tag present with the same base ids and recipe is reused."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from launcher.engine import images
from launcher.engine.engineproto import Engine
from launcher.errors import PolicyError, Problem
from launcher.host.imagebuild import ImageBuild, base_problem, recipe


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def ensure(engine: Engine, build: ImageBuild, progress: images.Progress, ca_files: list[Path] = ()) -> str:
    """The extended image built when missing or when what it is made of changed (its base image's
    id included); returns its tag. The policy's image (build.base) must be present already
    (images.ensure_for)."""
    cas = images.ca_buildargs(list(ca_files))
    under = build.base
    if build.dockerfile:
        # Our agent images the Dockerfile may start FROM (imagebuild.AGENT_BASES), built first.
        text = Path(build.dockerfile).read_text(errors="replace")
        problem = base_problem(text)   # again, as it is now: it may have changed since the compile checked it
        if problem:
            raise PolicyError([Problem(file=build.dockerfile, path="FROM", expected="the Dockerfile as it was checked: "
                                       "every FROM our agent image", found=problem, hint="run again")])
        images.build(engine, images.agent_image(), progress)
        if images.FULL_IMAGE in text:
            images.build(engine, images.full_image(), progress)
        ids = [images.image_id(engine, ref) for ref in (images.AGENT_IMAGE, images.FULL_IMAGE) if ref in text]
        repo = images.BundledImage(key="ext-build", tag=f"{build.tag}-build", context=Path(build.context),
                                   dockerfile=build.dockerfile, context_hash=_key(build.digest, *ids),
                                   base=images.AGENT_IMAGE)
        if images.build(engine, repo, progress, buildargs=cas):
            progress(f"built the repository's {build.dockerfile} (FROM our agent image)")
        under = repo.tag
    dockerfile = recipe(build.packages)
    final = _key(images.image_id(engine, under), dockerfile)
    with tempfile.TemporaryDirectory(prefix="sandbox-ext-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(dockerfile)
        image = images.BundledImage(key="ext", tag=build.tag, context=Path(tmp), context_hash=final, base=under)
        if images.build(engine, image, progress, buildargs=cas):
            progress(f"{build.tag}: {build.base}" + (" + the repository's Dockerfile" if build.dockerfile else "")
                     + (f" + {' '.join(build.packages)}" if build.packages else ""))
    return build.tag
