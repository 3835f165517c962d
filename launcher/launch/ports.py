"""Host ports forwarded into a sandbox, written HOST_PORT:PORT as Docker's `-p` is (`sandbox port`,
`up --port`): parsing, taking the host port, and the keepers `up --port` leaves behind, each a
detached `sandbox port` that ends when the sandbox does. Nothing is published by the engine."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from launcher import labels as label
from launcher.errors import EngineError, PolicyError, Problem
from launcher.host import host

SYNTAX = "[HOST_PORT:]PORT"
READY_WAIT = 30.0   # seconds for a keeper to say it listens (python start-up, an engine call)
STOP_WAIT = 5.0     # seconds for keepers to end on `sandbox down`


@dataclass(frozen=True, kw_only=True)
class PortSpec:
    port: int           # on the sandbox's loopback
    host_port: int      # on the host; 0: any free one
    address: str = "127.0.0.1"

    def __str__(self) -> str:
        return f"{self.host_port}:{self.port}"


def parse_spec(text: str, address: str = "127.0.0.1") -> PortSpec:
    """[HOST_PORT:]PORT, HOST_PORT first as in `docker run -p` (a bare PORT is the same port on
    both sides; HOST_PORT 0 picks a free one); ValueError says why not."""
    outside, colon, inside = text.rpartition(":")
    port = _port(inside, "PORT", text, low=1)
    return PortSpec(port=port, host_port=_port(outside, "HOST_PORT", text, low=0) if colon else port,
                    address=parse_address(address))


def parse_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"expected an IP address such as 127.0.0.1 or ::1, found {text!r}") from None


def _port(part: str, what: str, text: str, low: int) -> int:
    if not (part.isascii() and part.isdigit()) or not low <= int(part) <= 65535:
        raise ValueError(f"expected {SYNTAX} (host first, as docker run -p) with {what} a number from {low} to 65535, "
                         f"found {text!r}")
    return int(part)


def bind(spec: PortSpec, hint: str) -> socket.socket:
    """A socket listening on spec.address:spec.host_port; PolicyError (120) when it cannot be had."""
    family = socket.AF_INET6 if ipaddress.ip_address(spec.address).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # a restart right after a stop; never shares
    try:
        sock.bind((spec.address, spec.host_port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        used = exc.errno == 98   # EADDRINUSE
        raise PolicyError([Problem(
            file="command line", path="HOST_PORT", expected=f"a port free on {spec.address}",
            found=f"{spec.host_port} is in use" if used else f"{spec.host_port}: {exc.strerror}",
            hint=hint if used else "a port above 1023 needs no privileges")]) from None
    return sock


def inherited(fd: int) -> socket.socket:
    """The listening socket `up` handed to its keeper."""
    return socket.socket(fileno=fd)


def hold(specs: tuple[PortSpec, ...], name: str) -> list[socket.socket]:
    """Every host port of `up --port`, taken before the sandbox starts (none stays taken on an error)."""
    held: list[socket.socket] = []
    try:
        for spec in specs:
            held.append(bind(spec, f"another host port: `--port HOST_PORT:{spec.port}` (0 picks a free one), "
                                   f"or `sandbox ls` for a sandbox that holds it"))
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def taken(specs: tuple[PortSpec, ...], held: list[socket.socket]) -> tuple[PortSpec, ...]:
    """The specs with the host ports actually taken (HOST_PORT 0 picked one)."""
    return tuple(PortSpec(port=s.port, host_port=sock.getsockname()[1], address=s.address) for s, sock in zip(specs, held))


def label_value(specs: tuple[PortSpec, ...]) -> str:
    return ",".join(str(s) for s in specs)


def labelled(labels: dict) -> tuple[PortSpec, ...]:
    """The ports `up --port` forwards for a sandbox, from its label (unreadable parts skipped)."""
    found = []
    for part in filter(None, labels.get(label.PORTS, "").split(",")):
        try:
            found.append(parse_spec(part))
        except ValueError:   # written by us; a hand-edited label is not worth an error in `ls`
            continue
    return tuple(found)


@dataclass(frozen=True, kw_only=True)
class Published:
    """A port `up --port` forwards, as `sandbox ls` shows it."""

    address: str
    host_port: int
    port: int
    forwarded: bool     # its keeper runs (false: it ended or was killed; `sandbox port` forwards it again)


def published(name: str, labels: dict) -> tuple[Published, ...]:
    """The ports of a running sandbox, each with whether its keeper still runs."""
    specs = labelled(labels)
    if not specs:
        return ()
    alive = {port for pid in keepers(name) for port in _kept_port(pid)}
    return tuple(Published(address=s.address, host_port=s.host_port, port=s.port, forwarded=s.host_port in alive)
                 for s in specs)


def _kept_port(pid: int) -> list[int]:
    argv = host.process_argv(pid)
    try:
        return [parse_spec(argv[5]).host_port]
    except (IndexError, ValueError):
        return []


def missing(wanted: tuple[PortSpec, ...], have: tuple[PortSpec, ...]) -> tuple[PortSpec, ...]:
    """Those of `wanted` a running sandbox does not forward already (HOST_PORT 0: any of its ports)."""
    return tuple(w for w in wanted if not any(h.port == w.port and w.host_port in (0, h.host_port) for h in have))


def reuse_problem(name: str, labels: dict, wanted: tuple[PortSpec, ...]) -> Problem | None:
    """`up --port` on a running sandbox: its ports were fixed when it started."""
    have = labelled(labels)
    new = missing(wanted, have)
    if not new:
        return None
    return Problem(file="command line", path="--port", found=", ".join(map(str, new)),
                   expected=f"the ports {name} forwards ({', '.join(map(str, have)) or 'none'}) or fewer",
                   hint=f"`sandbox port {name} {new[0]}` forwards one more while it runs, or `sandbox down {name}` first")


def labelled_plan(planned, forwarded: tuple[PortSpec, ...]):
    """The Planned with the ports it forwards in its container's label, for `sandbox ls`."""
    container = planned.plan.container
    labels = container.labels + ((label.PORTS, label_value(forwarded)),)
    return replace(planned, plan=replace(planned.plan, container=replace(container, labels=labels)))


# ---- the keepers: one detached `sandbox port` per port, alive while the sandbox runs

def _dir() -> str:
    return os.path.join(host.state_dir(), "ports")


def log_path(name: str, spec: PortSpec) -> str:
    return os.path.join(_dir(), f"{name}.{spec.host_port}.log")


def _pids_path(name: str) -> str:
    return os.path.join(_dir(), f"{name}.json")


def _argv(name: str, spec: PortSpec) -> list[str]:
    return [sys.executable, "-m", "launcher", "port", name, str(spec), "--json", "--listen-fd"]


def keep(name: str, specs: tuple[PortSpec, ...], held: list[socket.socket]) -> None:
    """Start a keeper for each held socket (given to it, so the port is never free in between) and
    wait until each says it listens; EngineError (121) when one does not, the others stopped."""
    os.makedirs(_dir(), mode=0o700, exist_ok=True)
    started: list[tuple[PortSpec, subprocess.Popen]] = []
    try:
        for spec, sock in zip(specs, held):
            with open(log_path(name, spec), "wb") as log:
                started.append((spec, subprocess.Popen(
                    _argv(name, spec) + [str(sock.fileno())], pass_fds=(sock.fileno(),), stdin=subprocess.DEVNULL,
                    stdout=log, stderr=log, start_new_session=True)))   # no terminal's Ctrl-C or hang-up ends it
        _remember(name, [proc.pid for _, proc in started])
        for spec, proc in started:
            _ready(name, spec, proc)
    except BaseException:
        for _, proc in started:
            proc.kill()
            proc.wait()
        forget(name)
        raise


def _ready(name: str, spec: PortSpec, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_WAIT
    while time.monotonic() < deadline:
        text = _read(log_path(name, spec))
        if '"state": "listening"' in text:
            return
        if proc.poll() is not None:
            said = [line.removeprefix("sandbox: ") for line in text.splitlines() if line.startswith("sandbox: ")]
            raise EngineError(f"forwarding {spec.address}:{spec.host_port} to port {spec.port} inside {name} did not "
                              f"start (exit {proc.returncode}): {said[-1] if said else 'it said nothing'}")
        time.sleep(0.05)
    raise EngineError(f"forwarding {spec.address}:{spec.host_port} to port {spec.port} inside {name} did not start "
                      f"within {READY_WAIT:.0f} s; its log: {log_path(name, spec)}")


def _read(path: str) -> str:
    try:
        with open(path, "rb") as log:
            return log.read(1 << 16).decode(errors="replace")
    except OSError:
        return ""


def _remember(name: str, pids: list[int]) -> None:
    path = _pids_path(name)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump({"pids": pids}, out)
    os.replace(tmp, path)


def keepers(name: str) -> list[int]:
    """The keepers of `name` still running (a pid reused since by another process is not one)."""
    try:
        with open(_pids_path(name)) as data:
            pids = [int(p) for p in json.load(data)["pids"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [p for p in pids if _is_keeper(p, name)]


def _is_keeper(pid: int, name: str) -> bool:
    argv = host.process_argv(pid)
    return len(argv) > 5 and argv[1:5] == ["-m", "launcher", "port", name] and "--listen-fd" in argv


def stop(name: str) -> None:
    """End the keepers of `name` now (as Ctrl-C ends `sandbox port`), so its host ports are free
    when `down` returns rather than at their next look at the sandbox."""
    left = keepers(name)
    for pid in left:
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:   # it ended meanwhile
            pass
    deadline = time.monotonic() + STOP_WAIT
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _is_keeper(p, name)]
    forget(name)


def forget(name: str) -> None:
    try:
        os.unlink(_pids_path(name))
    except OSError:
        pass
