"""Evaluation on labelled data: ``ragguard eval`` and ``evaluate`` (run a dataset through the
pipeline and report), the JSONL item format, the built-in sets' loaders, and the metrics.

Importing ``rag.eval`` is cheap; ``evaluate`` loads the models when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag.eval.config import EvalConfig, load_config
    from rag.eval.evaluation import evaluate
    from rag.eval.items import EvalItem, read_items, write_items

__all__ = ["EvalConfig", "EvalItem", "evaluate", "load_config", "read_items", "write_items"]

_LAZY = {
    "EvalConfig": "rag.eval.config",
    "load_config": "rag.eval.config",
    "EvalItem": "rag.eval.items",
    "read_items": "rag.eval.items",
    "write_items": "rag.eval.items",
    "evaluate": "rag.eval.evaluation",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rag.eval' has no attribute {name!r}")
