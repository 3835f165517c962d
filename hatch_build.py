"""Build hook: record the commit a wheel was built from, so `sandbox --version` can say it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        try:
            commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=self.root, capture_output=True,
                                    text=True, timeout=10, check=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=self.root,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return   # not a checkout (an sdist): the version says so
        fd, self._commit_file = tempfile.mkstemp(prefix="sandbox-commit-")
        with os.fdopen(fd, "w") as out:
            out.write(commit + ("-dirty" if dirty else "") + "\n")
        build_data["force_include"][self._commit_file] = "launcher/_commit.txt"

    def finalize(self, version, build_data, artifact_path):
        """The temporary file is in the wheel now: it goes (one was left in /tmp per build)."""
        path = getattr(self, "_commit_file", None)
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)
