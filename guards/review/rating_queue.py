"""More reviewers' ratings for resolved items, until each has ``min_ratings`` of them.

Agreement between reviewers (Krippendorff's alpha) needs items rated by several people; the seed
design asks for at least three per sample. The reviewer who resolved an item rates it while
resolving; others are handed resolved items they have neither resolved nor rated, oldest
resolution first, until the item has enough ratings. Gold items are left out: they score
resolutions, and their answers repeat items already in the queue. These functions run inside
the store's transactions.
"""

from __future__ import annotations

from guards.review.export import ratings_of
from guards.review.models import ReviewItem
from guards.review.rows import COLUMNS, item_from_row
from guards.storage.database import Cursor

_NEEDS_RATINGS = (
    "status IN ('approved', 'edited', 'rejected') AND gold_id IS NULL "
    "AND (SELECT COUNT(*) FROM ratings t WHERE t.item_id = review_items.id) < ?"
)


def next_item(cur: Cursor, actor: str, min_ratings: int, now: float) -> ReviewItem | None:
    """The resolved item ``actor`` should rate next, if any, with its ratings so far."""
    if min_ratings <= 0:
        return None
    row = cur.execute(
        f"SELECT {COLUMNS} FROM review_items WHERE {_NEEDS_RATINGS} "
        "AND resolved_by <> ? AND NOT EXISTS "
        "(SELECT 1 FROM ratings t WHERE t.item_id = review_items.id AND t.reviewer = ?) "
        "ORDER BY resolved_at, id LIMIT 1",
        (min_ratings, actor, actor),
    ).fetchone()
    if row is None:
        return None
    return item_from_row(row, now, ratings_of(cur, [row[0]]).get(row[0], []))


def num_needing(cur: Cursor, min_ratings: int) -> int:
    """How many resolved items still have fewer than ``min_ratings`` ratings."""
    if min_ratings <= 0:
        return 0
    row = cur.execute(
        f"SELECT COUNT(*) FROM review_items WHERE {_NEEDS_RATINGS}", (min_ratings,)
    ).fetchone()
    return int(row[0]) if row else 0
