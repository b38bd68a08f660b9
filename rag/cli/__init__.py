"""The ``ragguard`` command line: ``main`` parses and dispatches (``rag.cli.commands``); the
review and key commands (``rag.cli.review``) and ``ragguard eval`` (``rag.cli.eval``) have
modules of their own, and every command writes through ``rag.cli.console``."""

from rag.cli.commands import main

__all__ = ["main"]
