"""The review store and its workflow, on a real SQLite file (and PostgreSQL when one can start)."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from guards.review import (
    AlreadyResolvedError,
    ClaimConflictError,
    ClaimExpiredError,
    InvalidReviewError,
    ItemNotFoundError,
    NewItem,
    NotClaimedError,
    Ratings,
    Resolution,
    ReviewConflictError,
    ReviewStore,
    Status,
    krippendorff_alpha,
    normalize_question,
    queue_stats,
)
from guards.review.errors import SchemaTooNewError
from guards.review.migrations import SCHEMA_VERSION, migrate
from guards.storage.database import Cursor, Database
from tests.guards.fake_clock import Clock


def flagged(question: str = "How tall is the Eiffel Tower?", **kw: Any) -> NewItem:
    defaults: dict[str, Any] = {
        "answer": "It is 330 metres tall [1].",
        "candidates": ["It is 330 metres tall [1].", "300 m"],
        "passages": [
            {
                "doc_id": "t",
                "chunk_id": "t#0",
                "text": "The tower is 330 metres tall.",
                "score": 0.8,
            }
        ],
        "guard_results": [
            {"name": "grounding", "outcome": "pass", "score": 0.9, "reason": "", "evidence": {}}
        ],
        "confidence": 0.4,
        "reasons": ["confidence 0.40 < 0.5"],
        "index_name": "demo",
        "index_version": "v1",
    }
    defaults.update(kw)
    return NewItem(question, **defaults)


def test_an_item_keeps_every_field_and_starts_pending(store: ReviewStore, clock: Clock) -> None:
    item = store.add(flagged())
    got = store.get(item.id)
    assert got == item
    assert got.status is Status.PENDING and got.assignee is None
    assert got.candidates[1] == "300 m" and got.passages[0]["doc_id"] == "t"
    assert got.confidence == 0.4 and got.reasons == ["confidence 0.40 < 0.5"]
    assert got.deadline == clock.now + 3600 and not got.is_overdue(clock.now)
    assert got.is_overdue(clock.now + 3601)
    assert [e.action for e in store.audit(item.id)] == ["created"]


def test_claim_resolve_and_the_audit_trail(store: ReviewStore, clock: Clock) -> None:
    item = store.add(flagged())
    claimed = store.claim(item.id, "ann")
    assert claimed.status is Status.CLAIMED and claimed.assignee == "ann"
    assert claimed.claim_expires_at == clock.now + 60
    with pytest.raises(ClaimConflictError, match="claimed by ann"):
        store.claim(item.id, "bob")
    with pytest.raises(ClaimConflictError):
        store.resolve(item.id, "bob", Resolution.APPROVE)
    clock.now += 10
    done = store.resolve(
        item.id,
        "ann",
        Resolution.EDIT,
        edited_answer="330 m [1].",
        ratings=Ratings(3, 2, 4, "fine"),
    )
    assert done.status is Status.EDITED and done.final_answer == "330 m [1]."
    assert done.resolved_by == "ann" and done.ratings[0].ratings == Ratings(3, 2, 4, "fine")
    with pytest.raises(AlreadyResolvedError, match="already edited by ann"):
        store.resolve(item.id, "ann", Resolution.APPROVE)
    with pytest.raises(AlreadyResolvedError):
        store.claim(item.id, "bob")
    log = store.audit(item.id)
    assert [(e.actor, e.action) for e in log] == [
        ("system", "created"),
        ("ann", "claim"),
        ("ann", "edit"),
    ]
    assert log[2].before is not None and log[2].before["status"] == "claimed"
    assert log[2].after is not None and log[2].after["status"] == "edited"
    assert (
        log[2].after["edited_answer"] == "330 m [1]." and log[2].after["ratings"]["relevance"] == 3
    )


def test_an_expired_claim_returns_to_the_queue(store: ReviewStore, clock: Clock) -> None:
    item = store.add(flagged())
    store.claim(item.id, "ann")
    clock.now += 61
    assert store.get(item.id).status is Status.PENDING
    assert [i.id for i in store.list_items(status=Status.PENDING)[0]] == [item.id]
    with pytest.raises(ClaimExpiredError, match="expired"):
        store.resolve(item.id, "ann", Resolution.APPROVE)
    assert store.claim(item.id, "bob").assignee == "bob"
    with pytest.raises(ClaimConflictError):
        store.resolve(item.id, "ann", Resolution.APPROVE)
    assert store.resolve(item.id, "bob", Resolution.APPROVE).status is Status.APPROVED


def test_release_escalate_and_unknown_ids(store: ReviewStore) -> None:
    item = store.add(flagged())
    store.claim(item.id, "ann")
    with pytest.raises(ClaimConflictError):
        store.release(item.id, "bob")
    assert store.release(item.id, "ann").status is Status.PENDING
    with pytest.raises(NotClaimedError):
        store.release(item.id, "ann")
    store.claim(item.id, "ann")
    escalated = store.resolve(item.id, "ann", Resolution.ESCALATE, ratings=Ratings(relevance=1))
    assert escalated.status is Status.ESCALATED and escalated.assignee is None
    store.claim(item.id, "senior", is_admin=True)  # escalated to no one: to the admins
    final = store.resolve(item.id, "senior", Resolution.REJECT, ratings=Ratings(relevance=2))
    assert final.status is Status.REJECTED and len(final.ratings) == 2
    for call in (store.get, lambda i: store.claim(i, "ann"), lambda i: store.release(i, "ann")):
        with pytest.raises(ItemNotFoundError):
            call("nope")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"relevance": 4}, "relevance must be an integer from 0 to 3"),
        ({"fluency": -1}, "fluency must be an integer from 0 to 2"),
        ({"usefulness": 5}, "usefulness must be an integer from 0 to 4"),
        ({"usefulness": True}, "usefulness"),
    ],
)
def test_ratings_out_of_range_are_refused(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidReviewError, match=fragment):
        Ratings(**kwargs)


def test_edit_needs_an_answer_and_only_edit_takes_one(store: ReviewStore) -> None:
    item = store.add(flagged())
    store.claim(item.id, "ann")
    with pytest.raises(InvalidReviewError, match="corrected answer"):
        store.resolve(item.id, "ann", Resolution.EDIT, edited_answer="  ")
    with pytest.raises(InvalidReviewError, match="only 'edit'"):
        store.resolve(item.id, "ann", Resolution.APPROVE, edited_answer="x")
    assert store.get(item.id).status is Status.CLAIMED  # nothing half-written


def test_priority_deadline_and_filters(store: ReviewStore, clock: Clock) -> None:
    low = store.add(flagged("q low", confidence=0.1))
    high = store.add(flagged("q high", confidence=0.45))
    kg = store.add(
        flagged(
            "q kg",
            confidence=0.9,
            reasons=["knowledge_graph: the graph says Paris"],
            guard_results=[{"name": "knowledge_graph", "outcome": "fail"}],
        )
    )
    items, total = store.list_items()
    assert total == 3 and [i.id for i in items] == [kg.id, low.id, high.id]
    assert store.list_items(reason="KNOWLEDGE_graph")[1] == 1
    claimed = store.claim_next("ann")
    assert claimed is not None and claimed.id == kg.id
    assert [i.id for i in store.list_items(assignee="ann")[0]] == [kg.id]
    clock.now += 3700
    assert store.list_items(is_overdue=True)[1] == 3
    newer = store.add(flagged("q new"))
    assert [i.id for i in store.list_items(max_age_s=10)[0]] == [newer.id]
    assert store.list_items(min_age_s=10)[1] == 3
    page, total = store.list_items(offset=1, limit=2)
    assert total == 4 and len(page) == 2


def test_two_reviewers_never_both_win_a_claim(tmp_path: Path) -> None:
    path = tmp_path / "race.sqlite"
    ReviewStore(path, gold_rate=0).close()
    stores = [ReviewStore(path, gold_rate=0) for _ in range(4)]  # four connections
    ids = [stores[0].add(flagged(f"q{i}")).id for i in range(30)]
    won: dict[str, list[str]] = {f"r{i}": [] for i in range(4)}

    errors: list[Exception] = []

    def work(store: ReviewStore, name: str) -> None:
        try:
            while (item := store.claim_next(name)) is not None:
                won[name].append(item.id)
        except Exception as exc:  # surfaced below: a thread's exception is only a warning
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, f"r{i}")) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [i for ids_ in won.values() for i in ids_]
    assert not errors and sorted(claimed) == sorted(ids)  # each exactly once
    for s in stores:
        s.close()


def test_the_audit_log_is_append_only(store: ReviewStore) -> None:
    store.add(flagged())
    conn = sqlite3.connect(store.db.url)
    for sql in ("UPDATE audit_log SET actor = 'x'", "DELETE FROM audit_log"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql)
    conn.close()


def test_approved_answers_are_cached_per_index_version(store: ReviewStore) -> None:
    item = store.add(flagged("How tall is the  Eiffel tower"))
    store.claim(item.id, "ann")
    store.resolve(item.id, "ann", Resolution.APPROVE)
    hit = store.cached_answer("how tall is the Eiffel Tower?", "demo", "v1")
    assert hit is not None and hit.answer == item.answer and hit.review_id == item.id
    assert hit.reviewer == "ann" and hit.passages == item.passages
    assert store.cached_answer("how tall is the Eiffel Tower?", "demo", "v2") is None
    assert store.cached_answer("how tall is the Eiffel Tower?", "other", "v1") is None
    assert store.invalidate("demo", keep_version="v2") == 1
    assert store.cached_answer("how tall is the Eiffel Tower?", "demo", "v1") is None
    rejected = store.add(flagged("Who built it?"))
    store.claim(rejected.id, "ann")
    store.resolve(rejected.id, "ann", Resolution.REJECT)
    assert store.cached_answer("Who built it?", "demo", "v1") is None
    assert normalize_question(" Who  BUILT it?? ") == "who built it"


def test_approving_an_item_from_an_older_index_keeps_the_current_answer(
    store: ReviewStore,
) -> None:
    old = store.add(flagged("Who built it?", index_version="v1", answer="Old answer."))
    new = store.add(flagged("Who built it?", index_version="v2", answer="New answer."))
    for item in (new, old):  # the stale item is approved last
        store.claim(item.id, "ann")
        store.resolve(item.id, "ann", Resolution.APPROVE)
    current = store.cached_answer("Who built it?", "demo", "v2")
    assert current is not None and current.answer == "New answer."


def test_an_answer_for_a_newer_version_drops_the_older_versions_rows(
    store: ReviewStore, clock: Clock
) -> None:
    def approve(question: str, **kw: object) -> None:
        item = store.add(flagged(question, **kw))
        store.claim(item.id, "ann")
        store.resolve(item.id, "ann", Resolution.APPROVE)

    approve("Who built it?", index_version="v1")
    approve("Who built it?", index_name="other", index_version="v1")
    stale = store.add(flagged("When was it built?", index_version="v1"))
    clock.now += 10
    approve("How tall is it?", index_version="v2")
    assert store.cached_answer("Who built it?", "demo", "v1") is None
    assert store.cached_answer("Who built it?", "other", "v1") is not None
    assert store.cached_answer("How tall is it?", "demo", "v2") is not None
    store.claim(stale.id, "ann")  # an item of the older version, resolved late
    store.resolve(stale.id, "ann", Resolution.APPROVE)
    assert store.cached_answer("How tall is it?", "demo", "v2") is not None
    assert store.invalidate("other") == 1  # no keep_version: every row of the index


def test_gold_items_are_mixed_in_and_score_reviewers(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path / "g.sqlite", gold_rate=0.25)
    right = store.add_gold("Capital of France?", "Paris.", is_correct=True)
    store.add_gold("Capital of Italy?", "Madrid.", is_correct=False)
    for i in range(6):
        store.add(flagged(f"q{i}", index_version="v1", request_id=uuid.uuid4().hex))
    items, total = store.list_items(limit=100)
    gold = [i for i in items if i.gold_id]
    assert total == 8 and len(gold) == 2  # 2 of 8 = 25 %
    assert {g.gold_id for g in gold} != {right}  # both gold items are used
    assert all(g.reasons == ["confidence 0.40 < 0.5"] and g.confidence == 0.4 for g in gold)
    # Nothing in the list tells them apart: same index and version, a request id of their own.
    real = [i for i in items if not i.gold_id]
    assert {(g.index_name, g.index_version) for g in gold} == {(real[0].index_name, "v1")}
    request_ids = [i.request_id for i in items]
    assert all(len(r) == 32 for r in request_ids) and len(set(request_ids)) == 8
    for g in gold:
        store.claim(g.id, "ann")
        store.resolve(g.id, "ann", Resolution.APPROVE)  # right once, wrong once
        # gold never reaches users
        assert store.cached_answer(g.question, g.index_name, g.index_version) is None
    stats = queue_stats(store)
    ann = next(r for r in stats.reviewers if r.reviewer == "ann")
    assert ann.num_gold == 2 and ann.num_gold_correct == 1 and ann.gold_accuracy == 0.5
    store.close()


def test_agreement_and_per_reviewer_stats(store: ReviewStore, clock: Clock) -> None:
    values = [(3, 3), (2, 2), (0, 1), (1, 1)]
    for n, (a, b) in enumerate(values):
        item = store.add(flagged(f"q{n}"))
        store.claim(item.id, "ann")
        clock.now += 5
        store.resolve(item.id, "ann", Resolution.APPROVE, ratings=Ratings(relevance=a, fluency=2))
        store.rate(item.id, "bob", Ratings(relevance=b, fluency=2))
    stats = queue_stats(store)
    assert stats.num_multiply_rated == 4 and stats.by_status == {"approved": 4}
    expected = krippendorff_alpha([list(v) for v in values], "ordinal")
    assert stats.agreement["relevance"] == pytest.approx(expected)
    assert stats.agreement["fluency"] is None  # no variation: undefined
    ann = next(r for r in stats.reviewers if r.reviewer == "ann")
    assert ann.num_resolved == 4 and ann.by_action == {"approve": 4}
    assert ann.median_resolve_s == 5 and ann.mean_ratings["relevance"] == 1.5
    assert [e.action for e in store.audit(item.id)][-1] == "rate"


def test_krippendorff_alpha_matches_the_published_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 coders, 12 units.
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = [list(u) for u in zip(*coders, strict=True)]
    assert krippendorff_alpha(units, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(units, "ordinal") == pytest.approx(0.815, abs=5e-4)
    assert krippendorff_alpha(units, "interval") == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha([[1, 1], [2, 2]], "interval") == 1.0
    assert krippendorff_alpha([[1], [2]]) is None


def test_a_schema_1_database_is_migrated_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE review_items (id TEXT PRIMARY KEY, created_at REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending', question TEXT NOT NULL, answer TEXT NOT NULL,
            payload TEXT NOT NULL);
        CREATE INDEX review_by_status ON review_items(status, created_at);
        INSERT INTO meta VALUES ('schema_version', '1');
        """
    )
    payload = {
        "confidence": 0.3,
        "reasons": ["low"],
        "guard_results": [],
        "passages": [{"doc_id": "d"}],
    }
    conn.execute(
        "INSERT INTO review_items VALUES ('old1', 5.0, 'pending', 'q?', 'a.', ?)",
        (json.dumps(payload),),
    )
    conn.commit()
    conn.close()
    store = ReviewStore(path)
    assert store.schema_version == SCHEMA_VERSION == 7
    item = store.get("old1")
    assert item.question == "q?" and item.confidence == 0.3 and item.passages == [{"doc_id": "d"}]
    assert item.reasons == ["low"] and item.deadline > 5.0 and item.status is Status.PENDING
    store.claim("old1", "ann")
    store.close()
    reopened = ReviewStore(path)  # migrating twice is a no-op
    assert reopened.get("old1").assignee == "ann"
    reopened.close()


def test_postgresql_paramstyle_translation() -> None:
    class Raw:
        class dialect:
            name = "postgresql"

        def exec_driver_sql(self, sql: str, params: tuple[object, ...]) -> None:
            self.sql, self.params = sql, params

    raw = Raw()
    # Raw stands in for a SQLAlchemy Connection: Cursor only reads dialect.name and calls
    # exec_driver_sql.
    Cursor(raw).execute(  # type: ignore[arg-type]
        "SELECT a FROM t WHERE b = ? AND c LIKE '5%' AND d = ?", (1, 2)
    )
    assert raw.sql == "SELECT a FROM t WHERE b = %s AND c LIKE '5%%' AND d = %s"


def test_queue_wide_queries_use_an_index_not_a_scan(tmp_path: Path) -> None:
    """Adding an item while gold items are mixed in, export pages and the answer cache's pruning
    would each read the whole queue without the schema-3 indexes: check the plans SQLite picks
    for the statements the store really runs."""
    path = tmp_path / "plans.sqlite"
    store = ReviewStore(path, gold_rate=0.5)
    store.add_gold("Capital of France?", "Paris.", is_correct=True)
    for i in range(20):
        store.add(flagged(f"q{i}", index_version=f"v{i % 3}"))
    statements: list[tuple[str, tuple[object, ...]]] = []

    def record(
        conn: object, cursor: object, sql: str, params: Iterable[object], *_: object
    ) -> None:
        statements.append((sql, tuple(params)))

    event.listen(store.db.engine, "before_cursor_execute", record)
    store.add(flagged("one more"))
    list(store.export_items(page_size=4))
    item = store.add(flagged("newest", index_version="v9"))
    store.claim(item.id, "ann")
    store.resolve(item.id, "ann", Resolution.APPROVE)  # caches it and prunes older versions
    event.remove(store.db.engine, "before_cursor_execute", record)
    store.close()

    plans = sqlite3.connect(path)
    full_scans: list[str] = []
    used: set[str] = set()
    for sql, params in statements:
        if not sql.lstrip().upper().startswith(("SELECT", "DELETE")):
            continue
        for row in plans.execute(f"EXPLAIN QUERY PLAN {sql}", params):
            words = row[-1].split()
            used.update(w for w in words if w.startswith(("review_by_", "answer_cache_by")))
            # A bare "SCAN t" reads every row of the queue or the cache; "SCAN t USING INDEX"
            # walks an index in order, which is fine only up to a LIMIT. The exception is the
            # gold rate's count, a share of the whole queue by definition (through the small
            # gold_id index).
            queue_table = words[1] in ("review_items", "r", "answer_cache", "c")
            bounded = "USING" in words and ("LIMIT" in sql or "COUNT(gold_id)" in sql)
            if words[0] == "SCAN" and queue_table and not bounded:
                full_scans.append(f"{row[-1]}: {sql[:120]}")
    plans.close()
    assert full_scans == []
    assert {"review_by_gold", "review_by_created", "review_by_index_version"} <= used
    assert "answer_cache_by_index" in used


def test_a_resolved_item_becomes_a_gold_item_that_looks_like_it(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path / "g.sqlite", gold_rate=0.5)
    source = store.add(
        flagged(
            "Who designed the tower?",
            answer="Gustave Eiffel's company [1].",
            candidates=["Gustave Eiffel's company [1].", "Eiffel."],
            confidence=0.55,
            reasons=["grounding 0.55"],
            guard_results=[
                {"name": "kg", "outcome": "fail", "score": 0.0, "reason": "x", "evidence": {}}
            ],
        )
    )
    with pytest.raises(ReviewConflictError, match="only an approved, rejected or edited"):
        store.gold_from_item(source.id, "root")
    store.claim(source.id, "ann")
    store.resolve(source.id, "ann", Resolution.EDIT, edited_answer="Gustave Eiffel's firm [1].")
    gold_id = store.gold_from_item(source.id, "root")
    assert store.gold_from_item(source.id, "root") == gold_id  # idempotent
    assert [e.action for e in store.audit(source.id)][-1] == "made_gold"

    store.add(flagged("A later question", confidence=0.2, reasons=["confidence 0.20 < 0.7"]))
    items, _ = store.list_items(limit=100)
    copy = next(i for i in items if i.gold_id == gold_id)
    # Everything a reviewer sees is the source item's, not the neighbour's...
    assert copy.answer == source.answer and copy.candidates == source.candidates
    assert copy.passages == source.passages and copy.guard_results == source.guard_results
    assert copy.confidence == 0.55 and copy.reasons == ["grounding 0.55"]
    assert copy.priority == source.priority and copy.request_id != source.request_id
    # ...and the original answer was edited, so it counts as wrong: rejecting it scores.
    store.claim(copy.id, "bob")
    store.resolve(copy.id, "bob", Resolution.REJECT)
    bob = next(r for r in queue_stats(store).reviewers if r.reviewer == "bob")
    assert bob.num_gold == 1 and bob.num_gold_correct == 1
    with pytest.raises(ReviewConflictError, match="gold item already"):
        store.gold_from_item(copy.id, "root")
    with pytest.raises(ItemNotFoundError):
        store.gold_from_item("nope", "root")
    store.close()


def test_gold_from_an_approved_item_counts_its_answer_right_and_clashes_are_refused(
    tmp_path: Path,
) -> None:
    store = ReviewStore(tmp_path / "g.sqlite")
    approved = store.add(flagged("Capital of France?", answer="Paris."))
    store.claim(approved.id, "ann")
    store.resolve(approved.id, "ann", Resolution.APPROVE)
    gold_id = store.gold_from_item(approved.id, "root")
    with store.db.read() as cur:
        row = cur.execute("SELECT is_correct, source_item_id FROM gold_items").fetchone()
    assert row == (1, approved.id)
    # The same question and answer rejected elsewhere would say the opposite: refused.
    rejected = store.add(flagged("Capital of France?", answer="Paris."))
    store.claim(rejected.id, "bob")
    store.resolve(rejected.id, "bob", Resolution.REJECT)
    with pytest.raises(ReviewConflictError, match="already counts the answer as right"):
        store.gold_from_item(rejected.id, "root")
    assert store.add_gold("Capital of France?", "Paris.", is_correct=True) == gold_id
    store.close()


def test_a_schema_2_database_keeps_its_gold_items(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    old = Database(path)
    assert migrate(old, to=2) == 2
    with old.transaction() as cur:
        cur.execute(
            "INSERT INTO gold_items VALUES ('g1', 'Capital of Italy?', 'Rome.', 1, '[]', 1.0)"
        )
    old.close()
    store = ReviewStore(path, gold_rate=0.5)
    assert store.schema_version == SCHEMA_VERSION
    store.add(flagged("A question"))
    items, total = store.list_items(limit=10)
    copy = next(i for i in items if i.gold_id == "g1")
    # Added by hand before schema 4: no samples or verdicts, the neighbour's confidence.
    assert total == 2 and copy.candidates == [] and copy.guard_results == []
    assert copy.confidence == 0.4
    store.close()


def test_a_database_from_a_newer_ragguard_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    ReviewStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNewError, match="schema 99, newer than this ragguard's"):
        ReviewStore(path)


def test_resolved_items_go_round_until_each_has_min_ratings(tmp_path: Path) -> None:
    store = ReviewStore(tmp_path / "r.sqlite", gold_rate=0.0, min_ratings=3)
    rated = store.add(flagged("Rated by its resolver"))
    unrated = store.add(flagged("Resolved without ratings"))
    open_item = store.add(flagged("Still pending"))
    store.claim(rated.id, "ann")
    store.resolve(rated.id, "ann", Resolution.APPROVE, ratings=Ratings(relevance=3, fluency=2))
    store.claim(unrated.id, "ann")
    store.resolve(unrated.id, "ann", Resolution.REJECT)
    assert queue_stats(store).num_needing_ratings == 2
    assert store.next_to_rate("ann") is None  # she resolved both: others rate them

    handed: list[tuple[str, str]] = []
    for reviewer in ("bob", "carl", "dora", "eve"):
        while (item := store.next_to_rate(reviewer)) is not None:
            assert item.id != open_item.id and reviewer not in {r.reviewer for r in item.ratings}
            handed.append((reviewer, item.question))
            store.rate(item.id, reviewer, Ratings(relevance=2, usefulness=3))
    # The rated item needed two more ratings, the unrated one three; oldest resolution first.
    assert handed == [
        ("bob", "Rated by its resolver"),
        ("bob", "Resolved without ratings"),
        ("carl", "Rated by its resolver"),
        ("carl", "Resolved without ratings"),
        ("dora", "Resolved without ratings"),
    ]
    assert queue_stats(store).num_needing_ratings == 0
    assert queue_stats(store).num_multiply_rated == 2
    store.close()
    off = ReviewStore(tmp_path / "r.sqlite")  # min_ratings 0: no such queue
    assert off.next_to_rate("zed") is None and queue_stats(off).num_needing_ratings == 0
    off.close()
    with pytest.raises(ValueError, match="min_ratings"):
        ReviewStore(tmp_path / "r.sqlite", min_ratings=11)


def test_the_stats_show_which_reviewer_lowers_agreement(store: ReviewStore) -> None:
    # ann and bob agree; carl rates at random.
    triples = [(3, 3, 0), (2, 2, 3), (0, 0, 2), (1, 1, 3), (3, 2, 1)]
    for n, (a, b, c) in enumerate(triples):
        item = store.add(flagged(f"q{n}"))
        store.claim(item.id, "ann")
        store.resolve(item.id, "ann", Resolution.APPROVE, ratings=Ratings(relevance=a))
        store.rate(item.id, "bob", Ratings(relevance=b))
        store.rate(item.id, "carl", Ratings(relevance=c))
    stats = queue_stats(store)
    everyone = stats.agreement["relevance"]
    without = {r.reviewer: r.alpha_without["relevance"] for r in stats.reviewers}
    ann, bob, carl = without["ann"], without["bob"], without["carl"]
    assert carl == pytest.approx(krippendorff_alpha([[a, b] for a, b, _ in triples], "ordinal"))
    assert everyone is not None and ann is not None and bob is not None and carl is not None
    assert carl > 0.8 > everyone and ann < everyone and bob < everyone
