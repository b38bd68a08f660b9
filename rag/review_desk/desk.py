"""The review queue as the pipeline and the server use it: opened from the settings, with the
gold items of ``RAGGUARD_REVIEW_GOLD_FILE`` loaded and index versions for the answer cache."""

from __future__ import annotations

import json
import logging

from guards.review import CachedAnswer, ReviewStore
from rag.errors import InvalidInputError
from rag.retrieval.collection import Collection
from rag.settings import Settings

logger = logging.getLogger(__name__)


def open_review_store(settings: Settings) -> ReviewStore:
    """The store named by ``review_db`` (default ``data_dir/reviews.sqlite``)."""
    store = ReviewStore(
        settings.review.review_db or settings.review.data_dir / "reviews.sqlite",
        claim_ttl_s=settings.review.review_claim_ttl_s,
        sla_s=settings.review.review_sla_s,
        gold_rate=settings.review.review_gold_rate,
        min_ratings=settings.review.review_min_ratings,
    )
    if settings.review.review_gold_file is not None:
        load_gold_file(store, settings)
    return store


def load_gold_file(store: ReviewStore, settings: Settings) -> int:
    """Add the gold items of the JSONL file (``{"question", "answer", "correct"}`` per line)."""
    path = settings.review.review_gold_file
    assert path is not None
    count = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            store.add_gold(row["question"], row["answer"], is_correct=bool(row["correct"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(
                f"{path} line {number}: a gold item needs question, answer and correct ({exc})"
            ) from exc
        count += 1
    logger.info("review: %d gold items from %s", count, path)
    return count


def index_version(collection: Collection) -> str:
    """Changes whenever the index's content does (a rebuilt index restarts its generation,
    so its creation time is part of the version)."""
    info = collection.info()
    return f"{info.created_at!r}:{info.generation}"


class ReviewDesk:
    """The review queue's one owner in the pipeline: a reviewer's earlier answer to reuse (the
    act stage, ``rag.stages.act``, queues new items in its store)."""

    def __init__(self, store: ReviewStore, *, owns_store: bool = True):
        self.store = store
        self._owns_store = owns_store
        """False when the store is lent (the server's lifespan owns it): ``close`` leaves it."""

    def reviewed_answer(self, question: str, index: str, version: str) -> CachedAnswer | None:
        """A reviewer's approved (or edited) answer to this question on this index version."""
        return self.store.cached_answer(question, index, version)

    def close(self) -> None:
        if self._owns_store:
            self.store.close()
