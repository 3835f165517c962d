"""`python -m launcher` is the same as the `sandbox` command: this client. With a resident helper
of this build running (`sandbox helper start`, launcher/cli/helper.py), it hands the command over
whole (arguments, working directory, environment, stdin/stdout/stderr) and relays SIGINT, SIGTERM
and SIGHUP; otherwise, and for the commands that attach a terminal, the full CLI runs here. It
imports only the standard library until then: the in-process path costs nothing more."""

import os
import sys
import time

STARTED = time.perf_counter()   # the command's start, for --timings through the helper
# They attach the user's terminal to a sandbox (raw mode, the window's size): never through the helper
TERMINAL = frozenset({"up", "shell", "exec", "helper"})


def _command(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "")


def _through_helper(argv: list[str]) -> int | None:
    """The command's exit code from the helper, or None: the helper is absent, stale or refused it."""
    from launcher import resident
    from launcher.__version__ import __version__

    uid = os.geteuid()
    try:
        sock, _ = resident.connect(resident.runtime_dir(os.environ.get("XDG_RUNTIME_DIR"), uid), uid)
    except resident.Unusable as exc:
        if "answered by uid" in str(exc) or "is not a" in str(exc):   # not just absent: say why it is not used
            sys.stderr.write(f"sandbox: not using the helper: {exc}\n")
        return None
    try:
        buffer = bytearray()
        try:
            mine = resident.build(__version__)   # while the helper forks the child that says hello
            if resident.hello(sock, buffer).get("build") != mine:
                return None   # stale: `sandbox helper status` says so; `sandbox helper start` replaces it
            resident.send_request(sock, {
                "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "started": STARTED,
                "umask": _umask(), "gid": os.getegid(), "groups": sorted(os.getgroups()), "limits": _limits()},
                [0, 1, 2])
            sock.settimeout(None)
            first = resident.read_line(sock, buffer)
        except (OSError, ValueError, resident.Unusable):
            return None   # nothing ran yet
        if first.startswith(b"R"):
            return None
        import _signal   # not `signal`: it imports enum

        relayed = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
        previous = {s: _signal.signal(s, lambda number, _frame: _relay(sock, number)) for s in relayed}
        try:
            line = first
            while line and not line.startswith(b"X"):
                line = resident.read_line(sock, buffer)
        finally:
            for number, handler in previous.items():
                _signal.signal(number, handler)
    finally:
        sock.close()
    if not line:
        sys.stderr.write("sandbox: error: the helper ended without the command's exit code\n")
        return 125
    return int(line[1:])


def _relay(sock, number: int) -> None:
    try:
        sock.sendall(f"S{number}\n".encode())
    except OSError:
        pass   # the helper's side is gone: its exit code (or its absence) is the answer


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _limits() -> dict[str, list[int]]:
    import resource

    return {name: list(resource.getrlimit(getattr(resource, name)))
            for name in dir(resource) if name.startswith("RLIMIT_")}


def main() -> int | None:
    argv = sys.argv[1:]
    if _command(argv) not in TERMINAL and os.environ.get("SANDBOX_HELPER", "") != "off":
        code = _through_helper(argv)
        if code is not None:
            return code
    from launcher.cli import main as cli

    cli()
    return None


if __name__ == "__main__":
    sys.exit(main())
