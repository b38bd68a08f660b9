"""Every item of the review queue, page by page, in an order the queue cannot shift under.

Pages follow ``(created_at, id)``, which never changes once an item exists, and each page starts
after the last key of the one before (keyset pagination), not at an offset. So an export that
runs while items are added, claimed or resolved yields every item that existed when it began
exactly once; OFFSET paging over the urgency order would skip or repeat the items that moved.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

from guards.review.models import Rating, ReviewItem, Status
from guards.review.rows import COLUMNS, RATING_COLUMNS, filters, item_from_row, rating_from_row
from guards.storage.database import Cursor, Database

DEFAULT_PAGE_SIZE = 500


def export_items(
    db: Database,
    clock: Callable[[], float],
    status: Status | None = None,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Iterator[ReviewItem]:
    """Items (of one status, if given) with their ratings, oldest first.

    Each page is one read transaction: nothing is held open while the caller consumes it."""
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, not {page_size}")
    after: tuple[float, str] | None = None
    while True:
        now = clock()
        with db.read() as cur:
            page = _page(cur, now, status, after, page_size)
        yield from page
        if len(page) < page_size:
            return
        after = (page[-1].created_at, page[-1].id)


def _page(
    cur: Cursor, now: float, status: Status | None, after: tuple[float, str] | None, limit: int
) -> list[ReviewItem]:
    where, params = filters(now, status)
    if after is not None:
        # A row-value comparison: SQLite (3.15+) and PostgreSQL both compare it key by key.
        keyset = "(created_at, id) > (?, ?)"
        where = f"{where} AND {keyset}" if where else f"WHERE {keyset}"
        params = (*params, *after)
    rows = cur.execute(
        f"SELECT {COLUMNS} FROM review_items {where} ORDER BY created_at, id LIMIT ?",
        (*params, limit),
    ).fetchall()
    ratings = ratings_of(cur, [row[0] for row in rows])
    return [item_from_row(row, now, ratings.get(row[0], [])) for row in rows]


def ratings_of(cur: Cursor, item_ids: list[str]) -> dict[str, list[Rating]]:
    """The ratings of these items (a whole page) in one query, each item's oldest first."""
    if not item_ids:
        return {}
    marks = ", ".join("?" * len(item_ids))
    rows = cur.execute(
        f"SELECT {RATING_COLUMNS} FROM ratings WHERE item_id IN ({marks}) "
        "ORDER BY item_id, created_at",
        item_ids,
    ).fetchall()
    by_item: defaultdict[str, list[Rating]] = defaultdict(list)
    for row in rows:
        by_item[row[0]].append(rating_from_row(row))
    return by_item
