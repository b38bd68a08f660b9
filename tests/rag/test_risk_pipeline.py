"""Risk control through the pipeline (real FAISS, SQLite, guards; scripted generator): audit
items at the configured rate, ``not_calibrated`` until labels certify a threshold, the
threshold in force once they do, and a refit in the background that a restart keeps."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guards import Policy
from guards.review import NewItem, Resolution, ReviewItem, ReviewStore
from rag.pipeline import Pipeline
from rag.settings import Settings
from tests.fakes import HashingEmbedder, ScriptedGenerator

QUESTIONS = [
    "What does a KV cache avoid recomputing?",
    "What is continuous batching?",
    "What is a knowledge graph?",
    "Why does grounding matter?",
    "What is self-consistency?",
]


Make = Callable[..., Pipeline]


@pytest.fixture
def make(tmp_path: Path, fake_demo_index_template: Path) -> Iterator[Make]:
    made: list[Pipeline] = []

    def build(**overrides: object) -> Pipeline:
        index_dir = tmp_path / "indexes"
        if not (index_dir / "demo").exists():
            shutil.copytree(fake_demo_index_template, index_dir / "demo")
        settings = Settings(
            index_dir=index_dir, data_dir=tmp_path / "data", max_tokens=48, _env_file=None,
            **overrides,
        )  # fmt: skip
        pipe = Pipeline(settings, HashingEmbedder(), ScriptedGenerator())
        made.append(pipe)
        return pipe

    yield build
    for pipe in made:
        pipe.close()


def replace_item(item: ReviewItem) -> NewItem:
    return NewItem(item.question + " again", item.answer, confidence=item.confidence,
                   shipped_confidence=item.shipped_confidence, signals=item.signals,
                   index_name="demo", profile="smollm2-135m", uniform=True)  # fmt: skip


def store_of(pipe: Pipeline) -> ReviewStore:
    return pipe.reviews.store


def store_kind(pipe: Pipeline, item_id: str) -> tuple[str, bool]:
    item = pipe.reviews.store.get(item_id)
    return item.kind, item.uniform


def _everything_answered(pipe: Pipeline) -> None:
    assert pipe.checker is not None
    pipe.checker.policy = Policy(abstain_below=0.0, review_below=0.0, review_on_failure=())


def test_audit_items_are_drawn_at_the_configured_rate(make: Make) -> None:
    pipe = make(audit_rate=0.3, audit_seed=11)
    _everything_answered(pipe)
    asked = [f"{q} (variant {i})" for i in range(8) for q in QUESTIONS]
    results = [r for r in (pipe.ask(q) for q in asked) if r.decision == "answer"]
    assert len(results) >= 20 and all(r.review_id is None for r in results)
    draw = random.Random(11)  # one draw per answer that goes out, in order
    expected = sum(draw.random() < 0.3 for _ in results)
    items, total = pipe.reviews.store.list_items(limit=100)
    assert total == expected and 0 < expected < len(results)
    assert all(i.kind == "audit" and i.propensity == 0.3 and i.uniform for i in items)
    assert {i.request_id for i in items} <= {r.request_id for r in results}
    audited = items[0]
    assert audited.shipped_confidence is not None and audited.signals
    assert audited.profile == "smollm2-135m"


def test_a_collections_own_rate_wins(make: Make) -> None:
    pipe = make(audit_rate=0.0, audit_rates={"demo": 1.0})
    _everything_answered(pipe)
    result = pipe.ask(QUESTIONS[0])
    (item,) = pipe.reviews.store.list_items()[0]
    assert item.kind == "audit" and item.request_id == result.request_id


def test_nothing_is_answered_automatically_until_labels_certify_a_threshold(make: Make) -> None:
    pipe = make(target_risk=0.1, audit_rate=0.0, calibrate_every=0)
    assert pipe.checker is not None
    pipe.checker.policy = Policy(abstain_below=0.0, review_below=0.0)
    result = pipe.ask(QUESTIONS[0])
    assert result.decision == "review" and result.review_id
    assert result.decision_reasons[0].startswith("not_calibrated: 0 uniform labels")
    # A request's own thresholds may be stricter, never looser: still nothing automatic.
    loose = pipe.ask(QUESTIONS[0] + " (loose)", review_below=0.0)
    assert loose.decision == "review" and loose.decision_reasons[0].startswith("not_calibrated")
    pipe.reviews.store.claim(str(loose.review_id), "ann")
    pipe.reviews.store.resolve(str(loose.review_id), "ann", Resolution.REJECT)
    assert store_kind(pipe, result.review_id) == ("flagged", True)  # cold: every one reviewed
    store = pipe.reviews.store
    # 120 verdicts on answers like this one (the same shipped confidence): all of them right.
    item = store.get(result.review_id)
    for _ in range(3):  # while this draw waits for its verdict, later draws do not certify
        new = store.add(replace_item(item))
        store.claim(new.id, "ann")
        store.resolve(new.id, "ann", Resolution.APPROVE)
    waiting = pipe.risk.state("demo", fresh=True)
    assert waiting.waiting_since == item.created_at and waiting.counts.uniform == 4  # + loose
    store.claim(item.id, "ann")
    store.resolve(item.id, "ann", Resolution.APPROVE)
    for i in range(120):
        new = store.add(
            NewItem(f"q{i}?", "a [1].", confidence=item.confidence,
                    shipped_confidence=item.shipped_confidence, signals=item.signals,
                    index_name="demo", profile="smollm2-135m", uniform=True)
        )  # fmt: skip
        store.claim(new.id, "ann")
        store.resolve(new.id, "ann", Resolution.APPROVE)
    state = pipe.risk.state("demo", fresh=True)
    assert state.counts.reviewed == 125 and state.choice is not None and state.choice.calibrated
    assert state.waiting_since is None
    again = pipe.ask(QUESTIONS[0] + " again")
    assert again.decision == "answer", again.decision_reasons
    assert any(r.startswith("risk threshold") for r in again.decision_reasons)
    # A request's own thresholds stand instead of the certified one.
    own = pipe.ask(QUESTIONS[0] + " once more", review_below=1.0)
    assert own.decision == "review"


def test_a_background_refit_is_swapped_in_and_survives_a_restart(make: Make) -> None:
    pipe = make(calibrate_every=20, audit_rate=0.0)
    _everything_answered(pipe)
    first = pipe.ask(QUESTIONS[1])
    store = pipe.reviews.store
    for i in range(40):  # the shipped confidence says ~first.confidence; half of them are wrong
        new = store.add(
            NewItem(f"q{i}?", "a [1].", confidence=first.confidence,
                    shipped_confidence=first.confidence, signals=dict(first.confidence_signals),
                    index_name="demo", profile="smollm2-135m")
        )  # fmt: skip
        store.claim(new.id, "ann")
        store.resolve(new.id, "ann", Resolution.APPROVE if i % 2 else Resolution.REJECT)
    pipe.risk.state("demo", fresh=True)  # sees 40 new labels: starts the refit
    pipe.risk.wait_for_refits(timeout=60)
    in_force = store.calibrations.in_force("demo", "smollm2-135m")
    assert in_force is not None and in_force.version == 1 and in_force.labels == 40
    assert in_force.model.seen == 40 and in_force.model.labels < 40  # held-back: never fitted
    calibrated = pipe.ask(QUESTIONS[1] + "?")
    assert calibrated.confidence == pytest.approx(0.5, abs=0.12)  # right half the time
    pipe.close()
    restarted = make(calibrate_every=20, audit_rate=0.0)
    assert restarted.risk.state("demo").version == 1
    # A refit by hand, accepted or refused, is what the next one is due from.
    restarted.risk.refit("demo")
    assert restarted.risk.state("demo", fresh=True).refit_from == 40
    assert len(store_of(restarted).calibrations.history("demo", "smollm2-135m")) == 2
    restarted.risk.state("demo", fresh=True)  # no new labels: no refit is started
    restarted.risk.wait_for_refits(timeout=60)
    assert len(store_of(restarted).calibrations.history("demo", "smollm2-135m")) == 2
