"""Moved to launcher/launch/ports.py; this path stays for what docs/library.md names (PortSpec, parse_spec)."""

from launcher.launch.ports import PortSpec, parse_spec  # noqa: F401
