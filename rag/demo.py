"""The packaged demo collection: where it lives, and building its index on first use."""

from __future__ import annotations

import logging
from pathlib import Path

from rag.errors import IndexNotFoundError
from rag.retrieval.collection import CollectionRegistry, built_indexes
from rag.retrieval.index import VectorIndex
from rag.settings import Settings

logger = logging.getLogger(__name__)

DEMO_INDEX = "demo"
DEMO_QUESTIONS = (
    "What does a KV cache avoid recomputing?",
    "What temperature does the technical preset use?",
    "What does continuous batching do?",
    "When does the policy send an answer to human review?",
    "What is self-consistency voting?",
    "How are reviewers' ratings scored?",
    "What does the repetition guard detect?",
    "What is prefix caching?",
)
"""Questions the demo collection answers (the benchmarks' workload over it)."""


def demo_collection_path() -> Path:
    """The packaged demo documents."""
    return Path(__file__).resolve().parent / "data" / "demo"


def builds_demo(settings: Settings) -> bool:
    """Whether loading with these settings builds the demo index when it is missing (never
    over indexes served read-only)."""
    return (
        settings.server.build_demo_index
        and not settings.retrieval.read_only_indexes
        and settings.retrieval.index_name == DEMO_INDEX
    )


def ensure_demo_index(collections: CollectionRegistry) -> bool:
    """Build the demo index from the packaged documents when it is missing or empty (an empty
    one is what a first start interrupted before its first commit leaves behind)."""
    collection = collections.get(DEMO_INDEX, create=True)
    if collection.info().num_documents:
        return False
    from rag.retrieval.documents import load_path

    logger.info("building the demo index from %s", demo_collection_path())
    collection.ingest(load_path(demo_collection_path()))
    return True


def check_index_exists(settings: Settings) -> None:
    """Fail at once, before any model loads, when the settings' index is not built (unless it
    is the demo index, built on first use)."""
    where = settings.retrieval
    if builds_demo(settings) or VectorIndex.exists(where.index_dir / where.index_name):
        return
    folder = where.index_dir.resolve()
    built = built_indexes(folder)
    raise IndexNotFoundError(
        f"no index {where.index_name!r} in {folder} (RAGGUARD_INDEX_DIR; relative to the "
        f"working directory); built there: {', '.join(built) or 'none'}. Build it with "
        f"`ragguard ingest FOLDER --index {where.index_name}`, or use index_name='demo'"
    )
