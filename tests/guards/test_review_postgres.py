"""The same review store on PostgreSQL: a throwaway server (initdb + pg_ctl on a Unix socket) when
the PostgreSQL binaries and psycopg are installed; skipped otherwise."""

from __future__ import annotations

import threading

import pytest

from guards.review import (
    AlreadyResolvedError,
    ClaimConflictError,
    ClaimExpiredError,
    NewItem,
    Ratings,
    Resolution,
    ReviewStore,
    Status,
    queue_stats,
)
from guards.review.migrations import SCHEMA_VERSION
from tests.guards.fake_clock import Clock
from tests.guards.test_review_escalation import escalation_scenario, migration_scenario
from tests.postgres import new_database


@pytest.fixture(scope="module")
def pg_url(postgres_url: str) -> str:
    return postgres_url


def test_the_workflow_on_postgresql(pg_url: str) -> None:
    now = [1_000_000.0]
    store = ReviewStore(pg_url, claim_ttl_s=60, gold_rate=0.25, clock=lambda: now[0])
    store.add_gold("Capital of France?", "Paris.", is_correct=True)
    ids = [
        store.add(
            NewItem(
                f"q{i}?",
                "a [1].",
                passages=[{"text": "a."}],
                confidence=0.1 * i,
                index_name="demo",
                index_version="v1",
            )
        ).id
        for i in range(3)
    ]
    assert store.list_items()[1] == 4  # one gold item among four
    store.claim(ids[0], "ann")
    with pytest.raises(ClaimConflictError):
        store.claim(ids[0], "bob")
    now[0] += 61
    with pytest.raises(ClaimExpiredError):
        store.resolve(ids[0], "ann", Resolution.APPROVE)
    assert store.get(ids[0]).status is Status.PENDING
    store.claim(ids[0], "ann")
    done = store.resolve(
        ids[0], "ann", Resolution.EDIT, edited_answer="b [1].", ratings=Ratings(3, 2, 4)
    )
    assert done.status is Status.EDITED and done.ratings[0].ratings.relevance == 3
    with pytest.raises(AlreadyResolvedError):
        store.resolve(ids[0], "ann", Resolution.APPROVE)
    hit = store.cached_answer("Q0", "demo", "v1")
    assert hit is not None and hit.answer == "b [1]."
    assert [e.action for e in store.audit(ids[0])] == ["created", "claim", "claim", "edit"]
    store.rate(ids[0], "bob", Ratings(relevance=2))
    assert queue_stats(store).num_multiply_rated == 1
    exported = list(store.export_items(page_size=3))  # one timestamp: the id orders the pages
    assert sorted(i.id for i in exported) == sorted(i.id for i in store.list_items()[0])
    assert len(next(i for i in exported if i.id == ids[0]).ratings) == 2
    assert [i.id for i in store.export_items(Status.EDITED, page_size=1)] == [ids[0]]
    now[0] += 1
    newer = store.add(NewItem("q9?", "c.", index_name="demo", index_version="v2")).id
    store.claim(newer, "ann")
    store.resolve(newer, "ann", Resolution.APPROVE)
    assert store.cached_answer("Q0", "demo", "v1") is None  # the older version's rows went
    store.close()
    again = ReviewStore(pg_url)  # migrating again is a no-op
    assert again.schema_version == SCHEMA_VERSION
    again.close()


def test_concurrent_claims_on_postgresql(pg_url: str) -> None:
    stores = [ReviewStore(pg_url, gold_rate=0) for _ in range(4)]
    with stores[0].db.transaction() as cur:  # a clean queue for this test
        cur.execute("UPDATE review_items SET status = 'rejected' WHERE status <> 'rejected'")
    ids = {stores[0].add(NewItem(f"race {i}?", "a")).id for i in range(20)}
    won: list[str] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def work(store: ReviewStore, name: str) -> None:
        try:
            while (item := store.claim_next(name)) is not None:
                with lock:
                    won.append(item.id)
        except Exception as exc:  # surfaced below: a thread's exception is only a warning
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, f"r{i}")) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(won) == sorted(ids)
    for s in stores:
        s.close()


def test_an_escalation_goes_to_someone_else_on_postgresql(pg_url: str) -> None:
    clock = Clock()
    store = ReviewStore(new_database(pg_url), gold_rate=0, clock=clock)
    escalation_scenario(store, clock)
    store.close()


def test_escalations_from_before_schema_5_are_kept_on_postgresql(pg_url: str) -> None:
    migration_scenario(new_database(pg_url))


def test_labels_feedback_and_calibrations_on_postgresql(pg_url: str) -> None:
    from tests.guards.test_review_labels import label_scenario

    clock = Clock()
    label_scenario(ReviewStore(new_database(pg_url), gold_rate=0.0, clock=clock), clock)


def test_delivered_answers_on_postgresql(pg_url: str) -> None:
    from tests.guards.test_review_delivered import delivered_scenario

    clock = Clock()
    delivered_scenario(ReviewStore(new_database(pg_url), gold_rate=0.0, clock=clock), clock)
