"""Moved to launcher/launch/upoptions.py; this path stays for what docs/library.md names (FIELDS, UpOptions)."""

from launcher.launch.upoptions import FIELDS, UpOptions  # noqa: F401
