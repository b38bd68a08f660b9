"""The TTL cache of answers that went out unreviewed, kept beside the review queue.

An answer the policy let through is kept for ``ttl_s`` under a key the caller builds from
everything that shaped it (the index and its content version, the normalised question, the
settings and the request's options), so the same question asked the same way is answered again
without generating. What the store guarantees:

- only what the caller puts is served, and only until it expires;
- an index's rows of other content versions are dropped whenever one of its answers is put
  (a changed index never serves an answer of its old content: the key has the version anyway);
- a reviewer who rejects or edits an answer withdraws it (``withdraw``, in the verdict's
  transaction): every cached answer to that question on that index goes, and that answer's text
  is remembered so that it is never cached nor served again, even when put again later (a
  replica that generated it again) or by a ``put`` racing the verdict.

The cached answer is opaque here (a JSON object): the pipeline above owns its shape.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guards.review.models import ReviewItem, normalize_question
from guards.storage.database import Cursor, Database

_NOT_WITHDRAWN = (
    "NOT EXISTS (SELECT 1 FROM withdrawn_answers w WHERE w.index_name = d.index_name "
    "AND w.question_key = d.question_key AND w.answer_hash = d.answer_hash)"
)


def answer_hash(answer: str) -> str:
    """What identifies an answer's text (white space and case do not matter)."""
    normal = " ".join(answer.split()).casefold()
    return hashlib.sha256(normal.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class DeliveredAnswer:
    """A cached answer: the id of the answer that went out, what to serve, and its life."""

    answer_id: str
    result: dict[str, Any]
    created_at: float
    expires_at: float


def withdraw(cur: Cursor, item: ReviewItem, now: float) -> int:
    """A reviewer rejected or edited ``item``: forget every cached answer to its question on its
    index and remember its answer as withdrawn; how many cached answers went."""
    question_key = normalize_question(item.question)
    cur.execute(
        "INSERT INTO withdrawn_answers VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (index_name, question_key, answer_hash) DO NOTHING",
        (item.index_name, question_key, answer_hash(item.answer), item.id, now),
    )
    return cur.execute(
        "DELETE FROM delivered_answers WHERE index_name = ? AND question_key = ?",
        (item.index_name, question_key),
    ).rowcount


class DeliveredAnswers:
    """The delivered-answer cache of one review database."""

    def __init__(self, db: Database, clock: Callable[[], float]):
        self.db = db
        self.clock = clock

    def get(self, cache_key: str) -> DeliveredAnswer | None:
        """The answer cached under ``cache_key``, unless it has expired or was withdrawn."""
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT d.answer_id, d.result, d.created_at, d.expires_at "
                f"FROM delivered_answers d WHERE d.cache_key = ? AND d.expires_at > ? "
                f"AND {_NOT_WITHDRAWN}",
                (cache_key, self.clock()),
            ).fetchone()
        if row is None:
            return None
        return DeliveredAnswer(str(row[0]), json.loads(row[1]), float(row[2]), float(row[3]))

    def put(
        self,
        cache_key: str,
        *,
        index_name: str,
        index_version: str,
        question: str,
        answer_id: str,
        answer: str,
        result: dict[str, Any],
        ttl_s: float,
    ) -> bool:
        """Cache ``result`` for ``ttl_s`` seconds; False (nothing kept) when a reviewer has
        withdrawn this answer to this question. Drops the index's expired rows and those of
        its other content versions."""
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        now = self.clock()
        question_key = normalize_question(question)
        digest = answer_hash(answer)
        with self.db.transaction() as cur:
            withdrawn = cur.execute(
                "SELECT 1 FROM withdrawn_answers "
                "WHERE index_name = ? AND question_key = ? AND answer_hash = ?",
                (index_name, question_key, digest),
            ).fetchone()
            if withdrawn is not None:
                return False
            cur.execute(
                "DELETE FROM delivered_answers "
                "WHERE index_name = ? AND (expires_at <= ? OR index_version <> ?)",
                (index_name, now, index_version),
            )
            cur.execute(
                "INSERT INTO delivered_answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (cache_key) DO UPDATE SET "
                "answer_id = excluded.answer_id, answer_hash = excluded.answer_hash, "
                "result = excluded.result, created_at = excluded.created_at, "
                "expires_at = excluded.expires_at",
                (
                    cache_key,
                    index_name,
                    index_version,
                    question_key,
                    answer_id,
                    digest,
                    json.dumps(result, ensure_ascii=False),
                    now,
                    now + ttl_s,
                ),
            )
        return True

    def invalidate(self, index_name: str) -> int:
        """Forget every cached answer of an index (its content changed); how many went."""
        with self.db.transaction() as cur:
            return cur.execute(
                "DELETE FROM delivered_answers WHERE index_name = ?", (index_name,)
            ).rowcount

    def count(self) -> int:
        """Cached answers not yet expired (withdrawn ones are deleted when withdrawn)."""
        with self.db.read() as cur:
            row = cur.execute(
                "SELECT COUNT(*) FROM delivered_answers WHERE expires_at > ?", (self.clock(),)
            ).fetchone()
        return int(row[0]) if row else 0
