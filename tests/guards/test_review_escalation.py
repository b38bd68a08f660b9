"""Escalations go to someone else: the reviewer who escalated an item never gets it back, a named
reviewer or an admin does, and databases from before schema 5 keep their escalations. The
scenarios run on SQLite here and on PostgreSQL in test_review_postgres.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from guards.review import (
    EscalatedElsewhereError,
    InvalidReviewError,
    NewItem,
    Resolution,
    ReviewStore,
    Status,
    queue_stats,
)
from guards.review.migrations import SCHEMA_VERSION, migrate
from guards.storage.database import Database
from tests.guards.fake_clock import Clock


def _escalated(store: ReviewStore, question: str, to: str | None = None) -> str:
    item = store.add(NewItem(question, "An answer [1].", confidence=0.2))
    store.claim(item.id, "ann")
    store.resolve(item.id, "ann", Resolution.ESCALATE, escalate_to=to)
    return item.id


def escalation_scenario(store: ReviewStore, clock: Clock) -> None:
    """The whole rule on one store whose queue holds nothing claimable yet."""
    burst = [_escalated(store, f"burst {n}?") for n in range(15)]
    item = store.get(burst[0])
    assert item.status is Status.ESCALATED and item.escalated_by == "ann"
    assert item.escalated_to is None  # to the admins
    # The reviewer who escalated gets none of them back, admin or not, by id or as "next".
    for is_admin in (False, True):
        assert store.claim_next("ann", is_admin=is_admin) is None
        with pytest.raises(EscalatedElsewhereError, match="you \\(ann\\) escalated"):
            store.claim(burst[3], "ann", is_admin=is_admin)
    # Escalated to the admins: another reviewer who is not one may not take them either.
    assert store.claim_next("bob") is None
    with pytest.raises(EscalatedElsewhereError, match="only an admin may claim it"):
        store.claim(burst[3], "bob")
    assert store.get(burst[3]).status is Status.ESCALATED  # refused claims changed nothing
    taken = store.claim_next("carol", is_admin=True)
    assert taken is not None and taken.assignee == "carol" and taken.escalated_by == "ann"
    # Released, or left to expire, it stays an escalation: still not ann's.
    assert store.release(taken.id, "carol").status is Status.ESCALATED
    store.claim(taken.id, "carol", is_admin=True, ttl_s=5)
    clock.now += 6
    assert store.get(taken.id).status is Status.ESCALATED
    escalated_ids = {i.id for i in store.list_items(status=Status.ESCALATED, limit=100)[0]}
    assert escalated_ids == set(burst)
    assert not store.list_items(status=Status.PENDING)[1]
    assert queue_stats(store).by_status.get("escalated") == 15
    with pytest.raises(EscalatedElsewhereError):
        store.claim(taken.id, "ann", is_admin=True)

    # Escalated to a named reviewer: theirs (or an admin's), nobody else's.
    named = _escalated(store, "For bob?", to=" bob ")
    assert store.get(named).escalated_to == "bob"
    with pytest.raises(EscalatedElsewhereError, match="only bob or an admin"):
        store.claim(named, "dave")
    got = store.claim_next("bob")
    assert got is not None and got.id == named
    done = store.resolve(named, "bob", Resolution.APPROVE)
    assert done.status is Status.APPROVED and done.resolved_by == "bob"
    assert (done.escalated_by, done.escalated_to) == ("ann", "bob")  # kept as its history
    log = store.audit(named)
    assert [e.action for e in log] == ["created", "claim", "escalate", "claim", "approve"]
    assert log[2].after is not None and log[2].after["escalated_to"] == "bob"

    # Bad escalations are refused before anything changes.
    mine = store.add(NewItem("Mine?", "a"))
    store.claim(mine.id, "ann")
    with pytest.raises(InvalidReviewError, match="not to yourself"):
        store.resolve(mine.id, "ann", Resolution.ESCALATE, escalate_to="ann")
    with pytest.raises(InvalidReviewError, match="only 'escalate' takes escalate_to"):
        store.resolve(mine.id, "ann", Resolution.REJECT, escalate_to="bob")
    for bad in ("", "x" * 65, "bob\x1b[2J"):
        with pytest.raises(InvalidReviewError, match="reviewer's name"):
            store.resolve(mine.id, "ann", Resolution.ESCALATE, escalate_to=bad)
    assert store.get(mine.id).status is Status.CLAIMED


def migration_scenario(url: str) -> None:
    """Items escalated under schema 4 go to someone else after the upgrade."""
    old = Database(url)
    assert migrate(old, to=4) == 4
    with old.transaction() as cur:
        for item_id, status, resolution in [
            ("esc", "escalated", "escalate"),  # escalated, waiting
            ("back", "pending", "escalate"),  # escalated, claimed and released
            ("done", "approved", "approve"),
        ]:
            cur.execute(
                "INSERT INTO review_items (id, created_at, status, question, answer, "
                "payload, resolution, resolved_by, deadline) "
                "VALUES (?, 1.0, ?, 'q', 'a.', '{}', ?, 'ann', 9e9)",
                (item_id, status, resolution),
            )
    old.close()
    store = ReviewStore(url)
    assert store.schema_version == SCHEMA_VERSION
    for item_id in ("esc", "back"):
        item = store.get(item_id)
        assert item.status is Status.ESCALATED and item.escalated_by == "ann"
        with pytest.raises(EscalatedElsewhereError):
            store.claim(item_id, "ann", is_admin=True)
    assert store.get("done").escalated_by is None
    assert store.claim("back", "carol", is_admin=True).assignee == "carol"
    store.close()
    again = ReviewStore(url)  # migrating again is a no-op
    assert again.schema_version == SCHEMA_VERSION and again.get("esc").escalated_by == "ann"
    again.close()


def test_an_escalation_goes_to_someone_else(store: ReviewStore, clock: Clock) -> None:
    escalation_scenario(store, clock)


def test_escalations_from_before_schema_5_are_kept(tmp_path: Path) -> None:
    migration_scenario(str(tmp_path / "v4.sqlite"))
