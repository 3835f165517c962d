"""`sandbox port`: a port on the host's loopback forwarded to one on an `up` sandbox's loopback,
each connection relayed by the probe's busybox `nc` over an exec stream of the engine. The sandbox
gets no network, no interface and no published port: every probe check still holds."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from launcher import labels as label
from launcher.engine.engineapi import Frames
from launcher.engine.engineproto import Engine
from launcher.engine.execsocket import ExecSocket
from launcher.errors import EngineError, NotFound, PolicyError, Problem
from launcher.launch import sandboxes
from launcher.launch.ports import PortSpec, bind, parse_address, parse_spec  # noqa: F401 - `sandbox port`'s, from here too
from launcher.plan.plan import PROBE_BUSYBOX
from launcher.values import visible

# Inside, run by the probe's own busybox (the image may have no shell or nc): wait for the first
# line (so no output can precede the hijacked stream; see Engine.exec_socket), say the pid (the
# engine cannot stop an exec; we kill it by pid), then become `nc`, which half-closes towards the
# server at stdin's EOF and exits when the server closes.
RELAY = 'read -r go || exit 0; echo "$$" >&2; exec "$0" nc 127.0.0.1 "$1"'
# Kills only what is still a relay to this port (a pid may have been reused meanwhile).
KILL = ('port=$1; shift; for p in "$@"; do [ "$("$0" tr "\\0" " " < /proc/$p/cmdline 2>/dev/null)" = '
        '"$0 nc 127.0.0.1 $port " ] && "$0" kill -9 "$p" 2>/dev/null; done; true')
REFUSED = "Connection refused"
CHUNK = 1 << 16
STOP_WAIT = 5.0         # seconds for relays to end after their streams closed
LIVENESS_EVERY = 5.0    # seconds between checks that the sandbox still runs


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


@dataclass(frozen=True, kw_only=True)
class Target:
    name: str
    ref: str
    user: str       # the sandbox's own user: the relay runs as it, never as root


def target(engine: Engine, name: str) -> Target:
    """The running `up` sandbox NAME, or an error that says what it is instead."""
    item = sandboxes.find(engine, name)
    kind = item.labels.get(label.KIND)
    if kind != "up":
        raise PolicyError([Problem(file="command line", path="NAME", expected="a sandbox `sandbox up` started",
                                   found=f"{name} is a `{kind}` sandbox",
                                   hint="`sandbox up DIR --name N` starts one that stays")])
    if item.state != "running":
        raise EngineError(f"{name} is {item.state}, not running; `sandbox down {name}` and "
                          f"`sandbox up` start it again")
    return Target(name=name, ref=item.id, user=engine.inspect(item.id).user or "")


@dataclass(kw_only=True, eq=False)
class Relay:
    """One accepted connection and the exec that carries it."""

    client: socket.socket
    peer: str
    exec_id: str = ""
    stream: ExecSocket | None = None
    pid: str = ""              # inside the sandbox, once the relay said it
    stderr: bytearray = field(default_factory=bytearray)
    sent: int = 0              # bytes from the server to the client
    ended: bool = False        # the exec's stream ended: the relay process has exited

    def take_stderr(self, data: bytes) -> None:
        self.stderr += data
        del self.stderr[4096:]   # a line or two is all we show
        if not self.pid and b"\n" in self.stderr:
            first, _, rest = bytes(self.stderr).partition(b"\n")
            if first.strip().isdigit():
                self.pid, self.stderr[:] = first.strip().decode(), rest


class Forwarder:
    """Listens on spec.address:spec.host_port; each connection gets its own relay (a thread).
    `status` is told what goes wrong with one connection; the caller prints it."""

    def __init__(self, engine: Engine, where: Target, spec: PortSpec, status: Callable[[str], None],
                 listener: socket.socket | None = None):
        self.engine, self.where, self.spec, self.status = engine, where, spec, status
        self.listener = listener   # already listening (`up --port` took it before the sandbox started), or None
        self.relays: set[Relay] = set()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failure: EngineError | None = None
        self.served = 0

    def __enter__(self) -> "Forwarder":
        self.listen()
        return self

    def __exit__(self, *exc) -> None:
        left = self.close()
        if left and exc[0] is None:
            raise EngineError(f"{left} relay process(es) may still run in {self.where.name}; "
                              f"`sandbox down {self.where.name}` ends them")

    @property
    def port(self) -> int:
        """The host port listened on (the one picked when spec.host_port was 0)."""
        return self.listener.getsockname()[1]

    def listen(self) -> None:
        if self.listener is None:
            self.listener = bind(self.spec, f"another host port: `sandbox port {self.where.name} "
                                            f"HOST_PORT:{self.spec.port}` (0 picks a free one)")
        self.listener.settimeout(0.5)    # to notice stop() and a sandbox that went away

    def serve(self) -> None:
        """Accept until stop(), Ctrl-C (KeyboardInterrupt), or the sandbox is gone (EngineError)."""
        checked = time.monotonic()
        while not self.stopping.is_set():
            try:
                client, peer = self.listener.accept()
            except TimeoutError:
                if time.monotonic() - checked > LIVENESS_EVERY:
                    checked = time.monotonic()
                    self._check_alive()
                continue
            except OSError:
                if self.stopping.is_set():
                    break
                raise
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            relay = Relay(client=client, peer=f"{peer[0]}:{peer[1]}")
            with self.lock:
                self.relays.add(relay)
                self.served += 1
            thread = threading.Thread(target=self._carry, args=(relay,), daemon=True, name=f"relay {relay.peer}")
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()
        if self.failure:
            raise self.failure

    def stop(self) -> None:
        self.stopping.set()

    def close(self) -> int:
        """Stop listening, end every connection and its relay; the number of relays that may be
        left running inside (0 when all are gone)."""
        self.stopping.set()
        if self.listener is not None:
            self.listener.close()
        with self.lock:
            relays = list(self.relays)
        for relay in relays:
            if relay.stream is not None:
                relay.stream.shutdown()
            _shutdown(relay.client)
        deadline = time.monotonic() + STOP_WAIT
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            relays = list(self.relays)
        return len(self._end(relays))

    # one connection
    def _carry(self, relay: Relay) -> None:
        try:
            self._relay(relay)
        except Exception as exc:   # noqa: BLE001 - one connection's failure must not end the others
            self.status(f"error: the connection from {relay.peer}: {type(exc).__name__}: {exc}")
        finally:
            if relay.stream is not None:
                relay.stream.shutdown()   # EOF on its stdin: a relay still waiting for "go" exits
            if not relay.ended and relay.exec_id:
                self._end([relay])
            relay.client.close()
            if relay.stream is not None:
                relay.stream.close()
            with self.lock:
                self.relays.discard(relay)

    def _relay(self, relay: Relay) -> None:
        argv = [PROBE_BUSYBOX, "sh", "-c", RELAY, PROBE_BUSYBOX, str(self.spec.port)]
        try:
            relay.exec_id, relay.stream = self.engine.exec_socket(self.where.ref, argv, self.where.user)
        except EngineError as exc:
            self._check_alive()
            if not self.failure:
                self.status(f"error: could not start a relay in {self.where.name}: {exc}")
            return
        if self.stopping.is_set():
            return
        relay.stream.send(b"go\n")
        upstream = threading.Thread(target=self._upstream, args=(relay,), daemon=True)
        upstream.start()
        frames = Frames()
        try:
            while True:
                data = relay.stream.recv(CHUNK)
                if not data:
                    relay.ended = True
                    break
                for kind, payload in frames.feed(data):
                    if kind == 1:
                        relay.client.sendall(payload)
                        relay.sent += len(payload)
                    elif kind == 2:
                        relay.take_stderr(payload)
        except OSError:   # the client went away, or close() shut the stream
            relay.stream.shutdown()
        if relay.ended:   # the server's answer is complete: EOF to the client after the last byte
            _shutdown(relay.client, socket.SHUT_WR)
            upstream.join(STOP_WAIT)
        _shutdown(relay.client)
        upstream.join(STOP_WAIT)
        self._say_why(relay)

    def _upstream(self, relay: Relay) -> None:
        try:
            while data := relay.client.recv(CHUNK):
                relay.stream.send(data)
            relay.stream.close_stdin()
        except OSError:   # either side is gone; the other loop sees it too
            relay.stream.shutdown()

    def _say_why(self, relay: Relay) -> None:
        text = bytes(relay.stderr).decode(errors="replace").strip()
        if self.stopping.is_set() or not text:
            return
        if REFUSED in text and not relay.sent:
            self.status(f"nothing is listening on 127.0.0.1:{self.spec.port} inside {self.where.name}: "
                        f"closed the connection from {relay.peer}{order_hint(self.spec)}")
        else:
            self.status(f"relay for {relay.peer}: {visible(text.splitlines()[-1], keep_lines=False)}")

    # inside the sandbox
    def _end(self, relays: list[Relay]) -> list[Relay]:
        """Kill those relays whose exec still runs; the ones still running after STOP_WAIT."""
        running = [r for r in relays if r.exec_id]
        try:
            running = [r for r in running if self.engine.exec_running(r.exec_id)]
            pids = [r.pid for r in running if r.pid]
            if pids:
                exec_id, stream = self.engine.exec_stream(
                    self.where.ref, [PROBE_BUSYBOX, "sh", "-c", KILL, PROBE_BUSYBOX, str(self.spec.port), *pids],
                    user=self.where.user)
                for _ in stream:
                    pass
            deadline = time.monotonic() + STOP_WAIT
            while running and time.monotonic() < deadline:
                time.sleep(0.1)
                running = [r for r in running if self.engine.exec_running(r.exec_id)]
        except NotFound:   # the sandbox is gone, and its processes with it
            return []
        except EngineError:   # the engine could not say or do it (pids limit, engine gone): left as they are
            pass
        return running

    def _check_alive(self) -> None:
        try:
            running = self.engine.inspect(self.where.ref).running
        except NotFound:
            running = False
        if not running and not self.failure:
            self.failure = EngineError(f"{self.where.name} is not running any more (`sandbox down`, or its "
                                       f"limits.timeout passed); stopped forwarding")
            self.stopping.set()


@contextmanager
def serving(engine: Engine, name: str, ref: str, specs: tuple[PortSpec, ...], held: list[socket.socket],
            status: Callable[[str], None]):
    """`run --port`: each held host port forwarded into the running sandbox `ref` (this process's
    threads, not keepers: the launcher waits for the agent anyway) until the block ends."""
    where = Target(name=name, ref=ref, user=engine.inspect(ref).user or "")
    forwarders = [Forwarder(engine, where, spec, status, sock) for spec, sock in zip(specs, held)]
    threads = []
    for forwarder in forwarders:
        forwarder.listen()
        threads.append(threading.Thread(target=_serve_until_stopped, args=(forwarder,), daemon=True,
                                        name=f"port {forwarder.spec}"))
        threads[-1].start()
        status(f"forwarding 127.0.0.1:{forwarder.port} to 127.0.0.1:{forwarder.spec.port} inside {name} while the "
               f"agent runs")
    try:
        yield
    finally:
        for forwarder in forwarders:
            forwarder.stop()
        for thread in threads:
            thread.join(STOP_WAIT)
        for forwarder in forwarders:
            forwarder.close()   # relays still running go with the sandbox, removed next


def _serve_until_stopped(forwarder: Forwarder) -> None:
    try:
        forwarder.serve()
    except EngineError:   # the agent ended and its sandbox stopped: the run's own end says so
        pass


def order_hint(spec: PortSpec) -> str:
    """Said with a refused connection when the pair may be written the old way round (PORT:HOST_PORT)."""
    if spec.host_port in (0, spec.port):
        return ""
    return (f" (the order is HOST_PORT:PORT, as in docker run -p: {spec.host_port}:{spec.port} is port {spec.port} "
            f"inside; for port {spec.host_port} inside, {spec.port}:{spec.host_port})")


def listening_inside(engine: Engine, where: Target) -> set[int]:
    """The TCP ports something listens on inside (from /proc/net/tcp and tcp6, read by the probe's
    busybox as the sandbox's user); empty when they cannot be read."""
    try:
        _, stream = engine.exec_stream(where.ref, [PROBE_BUSYBOX, "cat", "/proc/net/tcp", "/proc/net/tcp6"],
                                       user=where.user)
        text = b"".join(out for out, _ in stream if out)[:1 << 20].decode(errors="replace")
    except EngineError:   # only a warning hangs on it
        return set()
    found = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:   # 0A: LISTEN
            try:
                found.add(int(fields[1].rpartition(":")[2], 16))
            except ValueError:
                continue
    return found


def swapped(engine: Engine, where: Target, spec: PortSpec) -> bool:
    """Whether the pair looks written the old way round: nothing listens on PORT inside, something
    does on HOST_PORT."""
    if spec.host_port in (0, spec.port):
        return False
    inside = listening_inside(engine, where)
    return spec.port not in inside and spec.host_port in inside


def _shutdown(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    try:
        sock.shutdown(how)
    except OSError:   # not connected any more
        pass
