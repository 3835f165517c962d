"""sandbox: run AI coding agents in Docker containers whose isolation is declared and proven."""

__version__ = "0.1.0"
