"""The version, below everything (the run report records it; `launcher/__init__.py` exports it)."""

__version__ = "0.1.0"
