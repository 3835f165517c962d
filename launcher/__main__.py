"""`python -m launcher` is the same as the `sandbox` command."""

from launcher.cli import main

main()
