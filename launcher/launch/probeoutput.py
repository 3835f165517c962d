"""A container's output read on a thread, so the launcher keeps its deadlines: the probe's report
up to its PROBE-END line (the word that its proxy is ready given when it asks), then the rest."""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from launcher.engine.engineproto import Engine
from launcher.engine.verify import ProbeReport, parse_probe
from launcher.errors import EngineError
from launcher.plan.plan import PROBE_ASK, PROBE_END


class ProbeOutput:
    """Reads a container's output on a thread so the launcher can keep its deadlines."""

    def __init__(self, engine: Engine, ref: str, not_applicable: tuple[str, ...] = (), stdin: bool = False):
        self.chunks: queue.Queue = queue.Queue()
        self.not_applicable = not_applicable   # the plan's n/a checks: the only ones an n/a verdict may pass
        self.engine, self.ref = engine, ref
        self.stream = engine.output(ref, stdin=stdin)   # stdin: the container's is open for the word
        threading.Thread(target=self._pump, args=(self.stream,), daemon=True).start()

    def give_word(self) -> None:
        """The launcher's word that the report holds, which the probe waits for before it starts the
        agent: "go" on its stdin (probe.sh's gate; a write, where a signal was a ~10 ms runc round trip)."""
        self.stream.write(b"go\n")

    def proxy_ready(self) -> None:
        """The launcher's word that the proxy is ready, which the probe asked for (a PROBE-ASK line):
        a line on its stdin, which its checks read before they ask the proxy (probe.sh, _p_ask_proxy;
        a write, where a signal was a runc round trip and the probe looked for it every 10 ms)."""
        self.stream.write(b"proxy\n")

    def _pump(self, stream) -> None:
        try:
            for out, err in stream:
                if out:
                    self.chunks.put(("stdout", out))
                if err:
                    self.chunks.put(("stderr", err))
        except Exception:  # noqa: BLE001 - a broken stream ends the output; the exit code tells the rest
            pass
        self.chunks.put(None)

    def next(self, deadline: float):
        """The next chunk, None at the end of output; raises TimeoutError at the deadline."""
        while True:
            try:
                return self.chunks.get(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise TimeoutError from None

    def read_probe(self, timeout: float, asked: Callable[[], None] | None = None) -> tuple[ProbeReport, bytes, list[str]]:
        """Read the probe's lines up to PROBE-END; return the report and any bytes after it.
        `asked()` once the probe asks for the word that its proxy is ready (a PROBE-ASK line)."""
        deadline, buffer, errors, word = time.monotonic() + timeout, b"", [], ""
        try:
            while True:
                chunk = self.next(deadline)
                if chunk is None:
                    break
                stream, data = chunk
                if stream == "stderr":
                    errors.append(data.decode(errors="replace"))
                    continue
                buffer += data
                if asked is not None and (b"\n" + buffer).find(b"\n" + PROBE_ASK.encode() + b"\n") >= 0:
                    word = "; it asked for the word that the proxy is ready and was answered"
                    try:
                        asked()
                    except EngineError as exc:   # the probe may have ended (its report says why), or not
                        word = f"; it asked for the word that the proxy is ready, which could not be given: {exc}"
                    asked = None
                marker = (b"\n" + buffer).find(b"\n" + PROBE_END.encode() + b"\t")
                if marker >= 0 and buffer.find(b"\n", marker) >= 0:
                    end = buffer.find(b"\n", marker) + 1
                    lines = buffer[:end].decode(errors="replace").splitlines()
                    return parse_probe(lines, self.not_applicable), buffer[end:], errors
        except TimeoutError:   # where it stopped, for whoever finds out why
            lines = buffer.decode(errors="replace").splitlines()
            where = f"{len(lines)} lines, the last {lines[-1][:160]!r}" if lines else "nothing printed"
            errors.append(f"the probe did not finish within {timeout:.0f} s ({where}{word}){self._still_running()}")
        return parse_probe(buffer.decode(errors="replace").splitlines(), self.not_applicable), b"", errors

    def _still_running(self) -> str:
        """What the sandbox still runs, for whoever finds out why its probe did not finish."""
        try:
            commands = self.engine.processes(self.ref)
        except EngineError as exc:
            return f"; its processes could not be listed: {exc}"
        # command lines from inside the sandbox, bound for a terminal: no control byte goes through
        shown = ("".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in c[:120]) for c in commands[:40])
        return "; still running: " + " | ".join(shown)
