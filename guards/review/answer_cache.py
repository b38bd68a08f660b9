"""The answer cache: a reviewer's approved or edited answer, keyed by the normalised question,
the index name and the index version. ``put`` runs inside the resolution's transaction, so a
resolved item, its cached answer and the pruning of older versions are committed together."""

from __future__ import annotations

import json

from guards.review.models import CachedAnswer, ReviewItem, normalize_question
from guards.storage.database import Cursor


def put(cur: Cursor, item: ReviewItem, reviewer: str, now: float) -> None:
    """Remember ``item``'s final answer for its question on the index version it was asked on
    (replacing an earlier review of the same; an item from an older version of the index never
    displaces the answer for the current one), and drop the rows of the index's older versions."""
    cur.execute(
        "INSERT INTO answer_cache VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (question_key, index_name, index_version) DO UPDATE SET "
        "answer = excluded.answer, "
        "review_id = excluded.review_id, reviewer = excluded.reviewer, "
        "created_at = excluded.created_at",
        (
            normalize_question(item.question),
            item.index_name,
            item.index_version,
            item.final_answer,
            item.id,
            reviewer,
            now,
        ),
    )
    prune_older_versions(cur, item.index_name, item.index_version)


def prune_older_versions(cur: Cursor, index_name: str, index_version: str) -> int:
    """Delete an index's cached answers of versions older than ``index_version``; how many went.

    Version strings have no order, so a version's age is when the queue first saw it (its first
    review item): an index version never comes back once the index has changed. A version first
    seen at the same moment, or later, is kept, as are versions no item was queued under.

    Only the versions still in the cache are looked at (a few: each put prunes), and each one's
    first item is one seek in the ``review_by_index_version`` index, so the cost does not grow
    with the queue."""
    return cur.execute(
        "DELETE FROM answer_cache WHERE index_name = ? AND index_version IN ("
        "SELECT cached.index_version FROM ("
        "SELECT DISTINCT index_version FROM answer_cache "
        "WHERE index_name = ? AND index_version <> ?) cached "
        "WHERE (SELECT MIN(created_at) FROM review_items "
        "WHERE index_name = ? AND index_version = cached.index_version) < "
        "(SELECT MIN(created_at) FROM review_items WHERE index_name = ? AND index_version = ?))",
        (index_name, index_name, index_version, index_name, index_name, index_version),
    ).rowcount


def lookup(cur: Cursor, question: str, index_name: str, index_version: str) -> CachedAnswer | None:
    """The reviewed answer for this question on exactly this index version."""
    row = cur.execute(
        "SELECT c.answer, c.review_id, c.reviewer, r.passages, c.created_at "
        "FROM answer_cache c JOIN review_items r ON r.id = c.review_id "
        "WHERE c.question_key = ? AND c.index_name = ? AND c.index_version = ?",
        (normalize_question(question), index_name, index_version),
    ).fetchone()
    if row is None:
        return None
    return CachedAnswer(row[0], row[1], row[2], json.loads(row[3]), float(row[4]))


def invalidate(cur: Cursor, index_name: str, keep_version: str | None = None) -> int:
    """Delete an index's cached answers except those of ``keep_version`` (all when ``None``);
    how many went."""
    if keep_version is None:
        return cur.execute("DELETE FROM answer_cache WHERE index_name = ?", (index_name,)).rowcount
    return cur.execute(
        "DELETE FROM answer_cache WHERE index_name = ? AND index_version <> ?",
        (index_name, keep_version),
    ).rowcount
