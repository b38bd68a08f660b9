"""The one thing guards need from an embedding model (``rag.retrieval.embed.Embedder``
satisfies it)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    def embed(self, texts: list[str]) -> np.ndarray:
        """L2-normalised vectors, one row per text."""
        ...
