"""The review queue exported for people: every item (or those of one status) with its ratings,
oldest first, as dictionaries, JSON lines or CSV; for the export route and ``ragguard review
export``. The pages themselves are read by ``guards.review.export``."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from guards.review import ReviewStore, Status
from rag.review_desk.views import ReviewOut

_EXPORT_PAGE = 500


def export_rows(
    store: ReviewStore, status: Status | None, *, show_gold: bool
) -> Iterator[dict[str, Any]]:
    """Export rows, oldest item first; only an admin sees which items are gold."""
    for item in store.export_items(status, page_size=_EXPORT_PAGE):
        out = ReviewOut.from_item(item, store.clock(), show_gold=show_gold)
        yield out.model_dump(exclude={"audit", "is_gold"} if not show_gold else {"audit"})


_CSV_FIELDS = [
    "id", "status", "question", "answer", "edited_answer", "resolution", "resolved_by",
    "resolved_at", "confidence", "reasons", "created_at", "deadline", "index", "ratings",
]  # fmt: skip


def _inert(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, quoted so that it stays text."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def to_csv(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """The rows as CSV text, a row at a time (formula-like cells quoted to stay text)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=_CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        row = {**row, "reasons": "; ".join(row["reasons"]), "ratings": json.dumps(row["ratings"])}
        writer.writerow({k: _inert(v) for k, v in row.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()
