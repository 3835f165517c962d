"""One error tree; each class carries the stable exit code the CLI returns for it."""

from __future__ import annotations

from dataclasses import dataclass


class ExitCode:
    """Stable exit codes (the README's "Exit codes"). The agent's own code passes through."""

    OK = 0
    USAGE = 2
    NO_SANDBOX = 117         # no sandbox of that name (or none running for this workspace); the engine answered
    ATTESTATION_INVALID = 118   # verify-attestation: a digest or the signature does not match; --attest: not written
    COPY_CONFLICT = 119      # `sandbox apply`: the host tree changed where the agent's changes go; nothing written
    POLICY_INVALID = 120
    ENGINE = 121
    PROBE_FAILED = 122
    SURFACES_CHANGED = 123   # the agent left changes to host-executed files (CI or --strict)
    AGENT_TIMEOUT = 124
    INTERNAL = 125


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One thing wrong with an input: where, what was expected, what was found, what to do."""

    file: str
    path: str
    expected: str
    found: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.file}: {self.path}" if self.path else self.file
        text = f"{where}: expected {self.expected}, found {self.found}"
        return f"{text}\n    hint: {self.hint}" if self.hint else text


class SandboxError(Exception):
    exit_code = ExitCode.INTERNAL


class PolicyError(SandboxError):
    """The policy, the command line or a host path was refused before anything ran."""

    exit_code = ExitCode.POLICY_INVALID

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{count} problem{'s' if count != 1 else ''}:"] + [f"  {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class EngineError(SandboxError):
    """The Docker engine is unreachable, or building, creating or starting failed; `hint` (also in
    the message) says what to do, for `sandbox doctor` to show on its own."""

    exit_code = ExitCode.ENGINE

    def __init__(self, message: str, hint: str = ""):
        self.hint = hint
        super().__init__(f"{message}\n    hint: {hint}" if hint else message)


def over_limit(path: str, limit: int):
    """Refuse a read from the engine past its bound (raises; usable inside an expression)."""
    raise EngineError(f"reading {path}: over {limit} bytes; refused rather than held in memory")


class NotFound(EngineError):
    """A named sandbox or image does not exist."""


class SessionEnded(SandboxError):
    """`up` found its sandbox stopped (its session ended by time, or it was stopped): what `down`
    reports comes first, then a new one starts on the kept copy and home."""

    exit_code = ExitCode.POLICY_INVALID

    def __init__(self, sandbox: str, state: str):
        self.sandbox, self.state = sandbox, state
        super().__init__(f"{sandbox} is not running ({state}): its session ended\n"
                         f"    hint: `sandbox down {sandbox}` (its copy and home stay), then `sandbox up` again")


class NoSandbox(NotFound):
    """No sandbox of that name, or none running where one was looked for: the engine answered, so
    not 121 (a script can tell "start one" from "the engine is down")."""

    exit_code = ExitCode.NO_SANDBOX


class ProbeFailed(SandboxError):
    """The sandbox did not take effect as planned: the agent was not started."""

    exit_code = ExitCode.PROBE_FAILED

    def __init__(self, message: str, report=None):
        self.report = report
        super().__init__(message)


class CopyConflict(SandboxError):
    """The host tree no longer matches the copy where the agent changed it; nothing was written."""

    exit_code = ExitCode.COPY_CONFLICT

    def __init__(self, message: str, conflicts: tuple[str, ...] = ()):
        self.conflicts = conflicts
        super().__init__(message)


class AttestationInvalid(SandboxError):
    """An attestation record that does not match its own digests, or that could not be written."""

    exit_code = ExitCode.ATTESTATION_INVALID


class AgentTimeout(SandboxError):
    exit_code = ExitCode.AGENT_TIMEOUT


class Terminated(BaseException):
    """SIGTERM, raised like Ctrl-C so every clean-up path runs."""


def also_failed(primary: BaseException, message: str) -> None:
    """Record a secondary failure (a clean-up) on the primary error, which stays the one that
    decides the exit code; the CLI reports both."""
    primary.__dict__.setdefault("sandbox_also", []).append(message)


def copy_kept(primary: BaseException, name: str) -> None:
    """Record that the copy `name` (copy mode) outlives the failed or interrupted run: its message
    says so instead of only "removed"."""
    primary.__dict__["sandbox_copy_kept"] = name


def kept_copy(exc: BaseException | None) -> str:
    return getattr(exc, "__dict__", {}).get("sandbox_copy_kept", "")


def secondary_failures(exc: BaseException | None) -> list[str]:
    return list(getattr(exc, "__dict__", {}).get("sandbox_also", ()))
