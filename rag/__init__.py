"""ragguard's product surface: grounded QA pipeline, retrieval, HTTP server, SDK client, CLI.

Importing ``rag`` is cheap; models load when a ``Pipeline`` is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rag.errors import RagGuardError
from rag.types import Citation, Passage, Result, Usage

if TYPE_CHECKING:
    from rag.client import AsyncClient, Client
    from rag.pipeline import Pipeline
    from rag.settings import Settings

__all__ = [
    "AsyncClient",
    "Citation",
    "Client",
    "Passage",
    "Pipeline",
    "RagGuardError",
    "Result",
    "Settings",
    "Usage",
]

_LAZY = {
    "Pipeline": "rag.pipeline",
    "Settings": "rag.settings",
    "Client": "rag.client",
    "AsyncClient": "rag.client",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rag' has no attribute {name!r}")
