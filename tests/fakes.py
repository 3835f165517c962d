"""Test helpers beside the engine fake (launcher.engine.enginefake): a listener that keeps the output, the
fake engine holding one sandbox."""

from __future__ import annotations

from launcher import labels as label
from launcher.engine.enginefake import FakeEngine


class Recorder:
    """A launch Listener that keeps the agent's output and ignores status lines."""

    def __init__(self):
        self.out = b""

    def status(self, message):
        pass

    def output(self, stream, data):
        self.out += data


def one_sandbox(network: str = "none", kind: str = "up", proxy_log: str | None = None) -> FakeEngine:
    """The fake engine with the sandbox box on `network` (and, given its log, box's egress proxy);
    a command run in it writes out and err and exits 3."""
    fake = FakeEngine(execs=lambda argv: (((b"out\n", b"err\n"),), 3), logs={"box-proxy": proxy_log or ""})
    ref = fake.http.add_container("box", {label.MANAGED: "1", label.KIND: kind})
    fake.http.container(ref)["HostConfig"]["NetworkMode"] = network
    if proxy_log is not None:
        fake.http.add_container("box-proxy", {label.MANAGED: "1", label.KIND: "proxy", label.SANDBOX: "box"})
    return fake
