"""Exporting the review queue while it changes: keyset pages on a real SQLite file."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guards.review import NewItem, Ratings, Resolution, ReviewItem, ReviewStore, Status
from tests.guards.fake_clock import Clock


def fill(store: ReviewStore, clock: Clock, num_items: int) -> list[str]:
    """Items two to a timestamp (so the id breaks ties), the newest the most urgent."""
    ids = []
    for i in range(num_items):
        if i % 2 == 0:
            clock.now += 1
        item = store.add(NewItem(f"q{i}?", "a [1].", confidence=0.9 - 0.05 * i))
        ids.append(item.id)
    return ids


def offset_export(store: ReviewStore, page_size: int) -> Iterator[ReviewItem]:
    """The export this replaced: OFFSET pages over the urgency order."""
    offset = 0
    while True:
        page, _ = store.list_items(offset=offset, limit=page_size)
        yield from page
        if len(page) < page_size:
            return
        offset += page_size


def export_while_changing(
    store: ReviewStore, clock: Clock, export: Callable[[], Iterator[ReviewItem]]
) -> tuple[list[str], list[str]]:
    """Ids existing at the start, and ids exported while items are added, claimed, resolved
    and released between pages."""
    start_ids = fill(store, clock, 10)
    rows = export()
    seen = [next(rows).id for _ in range(4)]  # into the second page of three
    first_time = clock.now
    clock.now = first_time - 1  # new items amid the old keys, and more urgent than all of them
    for i in range(3):
        store.add(NewItem(f"new {i}?", "b", confidence=0.01 * i))
    clock.now = first_time + 1
    store.add(NewItem("newest?", "c", confidence=0.0))
    store.claim(start_ids[0], "ann")
    store.resolve(start_ids[0], "ann", Resolution.APPROVE, ratings=Ratings(relevance=3))
    store.claim(start_ids[7], "bob")
    store.claim(start_ids[8], "ann")
    store.release(start_ids[8], "ann")
    store.claim(start_ids[9], "ann")
    store.resolve(start_ids[9], "ann", Resolution.REJECT)
    seen += [item.id for item in rows]
    return start_ids, seen


def test_an_export_yields_every_item_once_while_the_queue_changes(
    store: ReviewStore, clock: Clock
) -> None:
    start_ids, seen = export_while_changing(store, clock, lambda: store.export_items(page_size=3))
    counts = Counter(seen)
    assert {i: counts[i] for i in start_ids} == dict.fromkeys(start_ids, 1)
    assert max(counts.values()) == 1  # nothing, old or new, repeated
    assert len(seen) == len(set(seen)) >= len(start_ids)


def test_offset_paging_in_the_same_scenario_skips_or_repeats_rows(
    tmp_path: Path, clock: Clock
) -> None:
    """The scenario above really moves items under OFFSET paging (so the test above can fail)."""
    store = ReviewStore(tmp_path / "offset.sqlite", claim_ttl_s=60, gold_rate=0, clock=clock)
    start_ids, seen = export_while_changing(store, clock, lambda: offset_export(store, 3))
    counts = Counter(seen)
    assert any(counts[i] != 1 for i in start_ids)
    store.close()


def test_export_pages_carry_every_rating(store: ReviewStore, clock: Clock) -> None:
    ids = fill(store, clock, 5)
    for n, item_id in enumerate(ids[:4]):
        store.claim(item_id, "ann")
        clock.now += 1
        store.resolve(
            item_id, "ann", Resolution.APPROVE, ratings=Ratings(relevance=n % 4, comment="ok")
        )
        if n % 2:
            clock.now += 1
            store.rate(item_id, "bob", Ratings(fluency=2))
    exported = {item.id: item for item in store.export_items(page_size=2)}
    keys = [(item.created_at, item.id) for item in exported.values()]
    assert keys == sorted(keys) and set(exported) == set(ids)  # oldest first, id breaking ties
    for item_id in ids:
        assert exported[item_id].ratings == store.get(item_id).ratings
    assert [r.reviewer for r in exported[ids[1]].ratings] == ["ann", "bob"]
    assert exported[ids[0]].ratings[0].ratings == Ratings(relevance=0, comment="ok")
    assert exported[ids[4]].ratings == []


def test_export_keeps_the_status_filter(store: ReviewStore, clock: Clock) -> None:
    ids = fill(store, clock, 5)
    store.claim(ids[1], "ann")
    store.resolve(ids[1], "ann", Resolution.REJECT)
    store.claim(ids[2], "ann", ttl_s=10)
    clock.now += 11  # ids[2]'s claim expired: it counts as pending again
    store.claim(ids[3], "bob")
    pending = [i.id for i in store.export_items(Status.PENDING, page_size=2)]
    assert pending == [ids[0], ids[2], ids[4]]
    assert [i.id for i in store.export_items(Status.CLAIMED)] == [ids[3]]
    assert [i.id for i in store.export_items(Status.REJECTED)] == [ids[1]]
    with pytest.raises(ValueError, match="page_size"):
        next(store.export_items(page_size=0))
