"""The delivered-answer cache in the review store: served until it expires or the index's
content changes, and never again once a reviewer rejected or edited that answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from guards.review import NewItem, Resolution, ReviewStore
from guards.review.delivered import answer_hash
from tests.guards.fake_clock import Clock

RESULT = {"answer": "Paris [1].", "decision": "answer"}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> ReviewStore:
    return ReviewStore(tmp_path / "reviews.sqlite", clock=clock)


def _put(store: ReviewStore, key: str = "k1", *, version: str = "v1", **changes: object) -> bool:
    fields: dict[str, object] = {
        "index_name": "docs",
        "index_version": version,
        "question": "Where is the Eiffel tower?",
        "answer_id": "answer-1",
        "answer": "Paris [1].",
        "result": RESULT,
        "ttl_s": 60.0,
    }
    fields.update(changes)
    return store.delivered.put(key, **fields)  # type: ignore[arg-type]


def test_an_answer_is_served_until_it_expires(store: ReviewStore, clock: Clock) -> None:
    assert store.delivered.get("k1") is None
    assert _put(store)
    cached = store.delivered.get("k1")
    assert cached is not None
    assert (cached.answer_id, cached.result) == ("answer-1", RESULT)
    assert cached.expires_at == cached.created_at + 60.0
    assert store.delivered.get("another key") is None
    clock.now += 59.9
    assert store.delivered.get("k1") is not None
    clock.now += 0.2
    assert store.delivered.get("k1") is None
    assert store.delivered.count() == 0


def test_an_answer_on_new_content_drops_the_old_versions(store: ReviewStore) -> None:
    assert _put(store, "old", version="v1")
    assert _put(store, "other index", version="v1", index_name="other")
    assert _put(store, "new", version="v2")  # the index changed, then an answer went out
    assert store.delivered.get("old") is None
    assert store.delivered.get("new") is not None
    assert store.delivered.get("other index") is not None  # another index keeps its own
    assert store.delivered.invalidate("docs") == 1
    assert store.delivered.get("new") is None


@pytest.mark.parametrize("action", [Resolution.REJECT, Resolution.EDIT])
def test_a_rejected_or_edited_answer_is_never_served_again(
    store: ReviewStore, action: Resolution
) -> None:
    assert _put(store, "greedy")
    assert _put(store, "sampled", answer="It is in Paris [1].", answer_id="answer-2")
    audit = store.add(
        NewItem(
            "where is the  Eiffel Tower",  # the same question, written otherwise
            "Paris [1].",
            index_name="docs",
            index_version="v1",
            kind="audit",
            uniform=True,
        )
    )
    store.claim(audit.id, "ann")
    edit = "In Paris, on the Champ de Mars [1]." if action is Resolution.EDIT else None
    store.resolve(audit.id, "ann", action, edited_answer=edit)
    # Every cached answer to the question goes; the withdrawn one never comes back.
    assert store.delivered.get("greedy") is None and store.delivered.get("sampled") is None
    assert not _put(store, "greedy")
    assert not _put(store, "again", answer=" paris  [1]. ")  # the same text, spaced otherwise
    assert store.delivered.get("greedy") is None and store.delivered.get("again") is None
    assert _put(store, "sampled", answer="It is in Paris [1].", answer_id="answer-3")
    assert _put(store, "k1", question="Where is the Louvre?")  # other questions are not touched


def test_an_approved_answer_stays(store: ReviewStore) -> None:
    assert _put(store)
    audit = store.add(NewItem("Where is the Eiffel tower?", "Paris [1].", index_name="docs"))
    store.claim(audit.id, "ann")
    store.resolve(audit.id, "ann", Resolution.APPROVE)
    assert store.delivered.get("k1") is not None


def test_a_withdrawal_wins_over_a_put_that_raced_it(store: ReviewStore) -> None:
    """A put that read 'not withdrawn' before the verdict committed writes its row after the
    verdict's delete: the row is there, but it is never served."""
    assert _put(store)
    with store.db.transaction() as cur:
        cur.execute(
            "INSERT INTO withdrawn_answers VALUES (?, ?, ?, ?, ?)",
            ("docs", "where is the eiffel tower", answer_hash("Paris [1]."), "item-1", 0.0),
        )
    assert store.delivered.get("k1") is None


def test_a_ttl_must_be_positive(store: ReviewStore) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        _put(store, ttl_s=0.0)


def delivered_scenario(store: ReviewStore, clock: Clock) -> None:
    """Served, expired, replaced on new content, withdrawn by a rejection (for each backend)."""
    assert _put(store) and store.delivered.get("k1") is not None
    assert _put(store)  # the same key again: replaced, not a conflict
    clock.now += 61
    assert store.delivered.get("k1") is None
    assert _put(store, "k1") and _put(store, "k2", version="v2")
    assert store.delivered.get("k1") is None and store.delivered.get("k2") is not None
    item = store.add(NewItem("Where is the Eiffel tower?", "Paris [1].", index_name="docs"))
    store.claim(item.id, "ann")
    store.resolve(item.id, "ann", Resolution.REJECT)
    assert store.delivered.get("k2") is None
    assert not _put(store, "k3", version="v2")
    assert store.delivered.count() == 0


def test_the_scenario_on_sqlite(store: ReviewStore, clock: Clock) -> None:
    delivered_scenario(store, clock)
