"""The command line's one way to write: results to standard output, messages to standard error.

Library code never writes to the terminal (ruff's T20 rule holds it to that); the CLI modules
write through these two functions, so where each line goes is decided in one place.
"""

from __future__ import annotations

import sys


def out(text: str = "", *, end: str = "\n", flush: bool = False) -> None:
    """A result line (or a streamed piece of one, with ``end=""``) on standard output."""
    sys.stdout.write(text + end)
    if flush:
        sys.stdout.flush()


def note(text: str) -> None:
    """A message for the person at the terminal (progress, errors) on standard error."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
