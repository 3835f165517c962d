"""Test helpers beside the engine fake (launcher.enginefake): a listener that keeps the output."""

from __future__ import annotations


class Recorder:
    """A launch Listener that keeps the agent's output and ignores status lines."""

    def __init__(self):
        self.out = b""

    def status(self, message):
        pass

    def output(self, stream, data):
        self.out += data
