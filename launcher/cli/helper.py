"""`sandbox helper start|stop|status`: the resident helper (issue 45). A process of the user's,
with the launcher imported, that answers on a per-user unix socket (launcher/resident.py) and forks
per request: the child takes the client's arguments, working directory, environment, umask, limits
and descriptors and runs the same command as `sandbox` would in-process, the whole pipeline and the
probe included. It saves the interpreter's start and the imports; it keeps nothing of one request
for the next (each child is a fresh fork of the helper as it was after its imports)."""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import time

import click

from launcher import resident
from launcher.__version__ import __version__
from launcher.cli import output

# What a launch imports beyond the CLI (launcher/cli/options.py's session, the engine's client):
# imported once by the helper, so that no request pays for them
WARM = ("launcher.launch.session", "launcher.launch.launch", "launcher.launch.proof", "launcher.engine.engine",
        "launcher.engine.engineapi", "launcher.engine.verify", "launcher.pipeline.pipeline", "launcher.plan.compiler",
        "launcher.host.hostfacts", "launcher.host.probedir", "launcher.host.gitscan", "launcher.host.gitgraph",
        "launcher.host.hostgit", "launcher.plan.seccompfiles", "launcher.targets.report", "launcher.targets.summary")


def _where() -> str:
    from launcher.host import host   # not at the CLI's start: host.py imports the YAML reader

    return resident.runtime_dir(host.runtime_dir_env(), os.geteuid())


@click.group(short_help="Start, stop or show the resident helper that saves each command's start.")
def helper() -> None:
    """A process of yours that keeps the launcher imported and runs each `sandbox` command in a fork
    of itself, with the command's own arguments, directory, environment and terminal descriptors:
    the whole pipeline and the probe still run for every command; only the interpreter's start and
    the imports (~0.1 s) are saved. It answers only you (the socket's peer uid, checked both ways),
    in a directory only you can enter, and only while its build is the installed one (otherwise,
    and for `up`, `shell` and `exec`, which attach your terminal, commands run in-process as
    without it). SANDBOX_HELPER=off runs a command without it.

    \b
    Example:
      sandbox helper start && sandbox run -- true
    """


@helper.command(short_help="Start the helper (or replace a stale one).")
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the helper as a process of yours, detached from this terminal; a stale one (another
    build: an upgrade) is stopped first. It runs until `sandbox helper stop`.

    \b
    Example:
      sandbox helper start
    """
    found = resident.state(_where(), os.geteuid(), __version__)
    if found.running and not found.stale:
        output.status(f"the helper is running already (pid {found.pid}, build {found.build})")
        return
    if found.running:
        _stop(found.pid)
    where = _where()
    os.makedirs(where, mode=0o700, exist_ok=True)
    try:
        resident.checked_dir(where, os.geteuid())
    except resident.Unusable as exc:
        output.error(f"the helper cannot start: {exc}")
        sys.exit(121)
    pid = os.fork()
    if pid == 0:   # the helper: a session of its own, no terminal, detached from this command
        os.setsid()
        if os.fork() == 0:
            _serve(where, ctx.find_root().command)
        os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = resident.state(where, os.geteuid(), __version__)
        if found.running:
            output.status(f"helper started (pid {found.pid}, build {found.build}, socket {found.socket})")
            return
        time.sleep(0.05)
    output.error(f"the helper did not answer within 10 s: {found.problem}")
    sys.exit(125)


@helper.command(short_help="Stop the helper.")
def stop() -> None:
    """Stop the helper (commands already running in it finish); commands then run in-process.

    \b
    Example:
      sandbox helper stop
    """
    found = resident.state(_where(), os.geteuid(), __version__)
    if not found.running:
        output.status(f"no helper is running ({found.problem})")
        return
    _stop(found.pid)
    output.status(f"helper stopped (pid {found.pid})")


@helper.command(short_help="Say whether the helper runs, its pid and build, and whether it is stale.")
@click.option("--json", "as_json", is_flag=True, help="The state as JSON on stdout.")
def status(as_json: bool) -> None:
    """Whether the helper runs: its socket, pid and build, and whether it is stale (then unused).

    \b
    Example:
      sandbox helper status --json
    """
    found = resident.state(_where(), os.geteuid(), __version__)
    if as_json:
        click.echo(json.dumps({"socket": found.socket, "running": found.running, "pid": found.pid,
                               "build": found.build, "current": found.current, "stale": found.stale,
                               "problem": found.problem}))
    else:
        click.echo(words(found))


def words(found: resident.State) -> str:
    if not found.running:
        return f"not running ({found.problem}); commands run in-process"
    said = f"running, pid {found.pid}, build {found.build}, socket {found.socket}"
    return said + (f"; STALE (this copy is {found.current}): commands run in-process; `sandbox helper start` "
                   "replaces it" if found.stale else "")


def _stop(pid: int) -> None:
    """End the helper (its pid: the socket's peer, of this uid) and wait for it to go."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.02)


def _serve(where: str, main: click.Group) -> None:
    """The helper's loop (never returns): accept, check the peer's uid, fork a child per request."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    path = os.path.join(where, resident.SOCKET)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.lexists(path):
        os.unlink(path)   # a helper before this one that ended without removing it (checked_dir: ours)
    old = os.umask(0o177)
    server.bind(path)
    os.umask(old)
    server.listen(64)
    bound = os.lstat(path).st_ino
    for name in WARM:
        __import__(name)
    _warm()
    import gc

    gc.freeze()
    build = resident.build(__version__)

    def ended(number, frame):
        if os.path.exists(path) and os.lstat(path).st_ino == bound:
            os.unlink(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, ended)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        if select.select([server], [], [], 1.0)[0]:
            conn, _ = server.accept()
            if not admitted(conn):
                conn.close()
            elif os.fork() == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _child(conn, build, main)
            else:
                conn.close()
        while True:   # the children that ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        try:
            if os.lstat(path).st_ino != bound:
                ended(None, None)   # someone removed or replaced the socket: this helper is no longer reachable
        except FileNotFoundError:
            os._exit(0)


def _warm() -> None:
    """What each child would pay at its first use, paid once here: the bundled presets read and
    checked (the schema loaded, its patterns compiled: ~10 ms of a launch's `load`), the probe
    script's digest. Only what this build ships, never a file of the user's (it may change)."""
    from launcher import resources
    from launcher.engine import probefiles
    from launcher.pipeline import stack

    try:
        for name in resources.preset_names():
            stack.load_base(name)
        probefiles.script_digest()
    except Exception:  # noqa: BLE001 - a request meets the same error and says it
        pass


def admitted(conn: socket.socket) -> bool:
    """Only the user's own processes are answered (the socket's peer uid; its directory is the
    user's alone as well)."""
    return resident.peer(conn)[1] == os.geteuid()


def _child(conn: socket.socket, build: str, main: click.Group) -> None:
    """One request (never returns): the client's world taken over, the command run, its exit code sent."""
    code = 125
    try:
        conn.sendall(resident.hello_line(os.getpid(), build))
        try:
            request, fds = resident.receive_request(conn)
            refused = _take_over(request, fds)
        except resident.Unusable as exc:   # a client of another form: it runs the command itself
            refused = str(exc)
        if refused:
            conn.sendall(b"R" + refused.encode() + b"\n")
            os._exit(0)
        conn.sendall(b"B\n")   # begun: from here on the command's exit code is the answer
        finished = threading.Event()
        threading.Thread(target=_relayed, args=(conn, finished), daemon=True).start()
        code = _run(request, main)
        finished.set()
        conn.sendall(f"X{code}\n".encode())
    except (OSError, ValueError, resident.Unusable):
        pass
    os._exit(0)


def _take_over(request: dict, fds: list[int]) -> str:
    """Become the client's process as far as a process of the same user can: its groups and gid
    must be this helper's (a helper never lends a group the user lost since it started), its
    limits set (none above the helper's own hard ones), its umask, directory and environment.
    Returns why not ("": taken over)."""
    import resource

    if len(fds) != 3:
        return "three descriptors are needed"
    if request.get("gid") != os.getegid() or request.get("groups") != sorted(os.getgroups()):
        return "the client's groups are not the helper's"
    try:
        for name, (soft, hard) in request.get("limits", {}).items():
            which = getattr(resource, name, None)
            if which is not None and resource.getrlimit(which) != (soft, hard):
                resource.setrlimit(which, (soft, hard))
        os.chdir(request["cwd"])
    except (OSError, ValueError) as exc:
        return f"the client's limits or directory cannot be taken: {exc}"
    from launcher.host import host

    os.umask(request.get("umask", 0o022))
    host.replace_environment(request["env"])
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), errors="strict")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace", line_buffering=True)
    sys.argv = ["sandbox", *request["argv"]]
    return ""


def _relayed(conn: socket.socket, finished: threading.Event) -> None:
    """The client's signals, raised here; the client gone before the command ended: SIGTERM (clean up)."""
    buffer = bytearray()
    while True:
        try:
            line = resident.read_line(conn, buffer)
        except OSError:
            line = b""
        if not line:
            if not finished.is_set():
                os.kill(os.getpid(), signal.SIGTERM)
            return
        if line.startswith(b"S") and line[1:].isdigit() and int(line[1:]) in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), int(line[1:]))


def _run(request: dict, main: click.Group) -> int:
    """The command, as `sandbox` runs it in-process (`main`: the CLI's group); its exit code."""
    from launcher import timings

    timings.IMPORTED, timings.FIRST = float(request.get("started", time.perf_counter())), "helper"
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        main(args=request["argv"], prog_name="sandbox")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            sys.stderr.write(exc.code + "\n")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    return code


COMMANDS = (helper,)
