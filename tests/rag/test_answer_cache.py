"""The answer cache through the pipeline (real FAISS, SQLite, guards; scripted generator): a
question asked again the same way gets the answer that went out, without generating, until the
TTL passes, the index changes, a setting or option differs, or a reviewer rejects that answer;
an answer withheld or waiting for a reviewer is never served from it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from guards import Policy
from guards.review import Resolution, ReviewStore
from rag.pipeline import Pipeline
from rag.retrieval.documents import Document
from rag.settings import Settings
from tests.fakes import HashingEmbedder, ScriptedGenerator
from tests.guards.fake_clock import Clock

QUESTION = "What does a KV cache avoid recomputing?"


class CountingGenerator(ScriptedGenerator):
    def __init__(self) -> None:
        self.calls = 0

    def generate(
        self, prompts: Sequence[str | list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[RequestOutput]:
        self.calls += 1
        return super().generate(prompts, params)


Make = Callable[..., tuple[Pipeline, CountingGenerator]]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make(tmp_path: Path, fake_demo_index_template: Path, clock: Clock) -> Iterator[Make]:
    made: list[tuple[Pipeline, ReviewStore]] = []

    def build(
        policy: Policy | None = None, **overrides: object
    ) -> tuple[Pipeline, CountingGenerator]:
        index_dir = tmp_path / "indexes"
        if not (index_dir / "demo").exists():
            shutil.copytree(fake_demo_index_template, index_dir / "demo")
        fields: dict[str, object] = {"answer_cache_ttl_s": 60.0, "max_tokens": 48}
        fields.update(overrides)
        settings = Settings(
            index_dir=index_dir, data_dir=tmp_path / "data", _env_file=None,
            **fields,
        )  # fmt: skip
        store = ReviewStore(tmp_path / "reviews.sqlite", clock=clock)
        generator = CountingGenerator()
        pipe = Pipeline(settings, HashingEmbedder(), generator, reviews=store)
        assert pipe.checker is not None
        pipe.checker.policy = policy or Policy(abstain_below=0.0, review_below=0.0)
        made.append((pipe, store))
        return pipe, generator

    yield build
    for pipe, store in made:
        pipe.close()
        store.close()


def test_the_same_question_is_answered_from_the_cache_until_the_ttl(
    make: Make, clock: Clock
) -> None:
    pipe, generator = make()
    first = pipe.ask(QUESTION)
    assert first.decision == "answer" and first.cached_from is None and generator.calls == 1
    again = pipe.ask("  what does a KV cache avoid recomputing ")
    assert generator.calls == 1  # not generated again
    assert again.cached_from == first.request_id and again.request_id != first.request_id
    assert (again.answer, again.passages, again.citations) == (
        first.answer,
        first.passages,
        first.citations,
    )
    assert again.confidence == first.confidence and again.decision == "answer"
    assert again.decision_reasons[-1] == f"served from the answer cache (answer {first.request_id})"
    assert "total_s" in again.timings and "generate_s" not in again.timings
    # Feedback on the served copy is recorded under its own id.
    assert pipe.reviews.store.labels.answer(again.request_id).question == QUESTION
    assert (pipe.cache.hits, pipe.cache.misses) == (1, 1)

    clock.now += 61  # past the TTL
    assert pipe.ask(QUESTION).cached_from is None and generator.calls == 2


def test_other_options_or_settings_miss(make: Make) -> None:
    pipe, generator = make()
    pipe.ask(QUESTION)
    pipe.ask(QUESTION, top_k=2)
    pipe.ask(QUESTION, max_tokens=20)
    pipe.ask(QUESTION, timeout_s=30)  # a deadline does not shape the answer: a hit
    assert generator.calls == 3
    other, other_generator = make(top_k=2)  # same store, other settings
    assert other.ask(QUESTION).cached_from is None and other_generator.calls == 1


def test_an_ingest_invalidates(make: Make) -> None:
    pipe, generator = make()
    pipe.ask(QUESTION)
    assert pipe.ask(QUESTION).cached_from is not None
    pipe.collections.get("demo").ingest([Document("new", "A new fact about caches.")])
    after = pipe.ask(QUESTION)
    assert after.cached_from is None and generator.calls == 2
    assert pipe.ask(QUESTION).cached_from == after.request_id


def test_a_flagged_answer_is_never_served_from_the_cache(make: Make) -> None:
    pipe, generator = make(Policy(abstain_below=0.0, review_below=1.0))
    first = pipe.ask(QUESTION)
    second = pipe.ask(QUESTION)
    assert first.decision == second.decision == "review"
    assert first.review_id != second.review_id and generator.calls == 2
    withheld, withheld_generator = make(Policy(abstain_below=1.0, review_below=1.0))
    withheld.ask(QUESTION)
    assert withheld.ask(QUESTION).abstained and withheld_generator.calls == 2


def test_a_rejected_answer_is_never_served_again(make: Make) -> None:
    pipe, generator = make(audit_rate=1.0, audit_seed=1)  # every answer is audited
    first = pipe.ask(QUESTION)
    assert pipe.ask(QUESTION).cached_from == first.request_id
    store = pipe.reviews.store
    (audit,) = [i for i in store.list_items()[0] if i.kind == "audit"]
    store.claim(audit.id, "ann")
    store.resolve(audit.id, "ann", Resolution.REJECT)

    regenerated = pipe.ask(QUESTION)
    assert regenerated.cached_from is None and generator.calls == 2
    # The scripted generator writes the same answer again: the cache never takes it back.
    assert regenerated.answer == first.answer
    assert pipe.ask(QUESTION).cached_from is None and generator.calls == 3


def test_off_at_zero(make: Make) -> None:
    pipe, generator = make(answer_cache_ttl_s=0)
    pipe.ask(QUESTION)
    assert pipe.ask(QUESTION).cached_from is None and generator.calls == 2
    assert (pipe.cache.hits, pipe.cache.misses) == (0, 0)


def test_over_http_with_its_counters(make: Make) -> None:
    from fastapi.testclient import TestClient

    from rag.server import create_app

    pipe, generator = make()
    with TestClient(create_app(pipeline=pipe)) as http:
        first = http.post("/v1/ask", json={"question": QUESTION}).json()
        assert first["cached_from"] is None
        again = http.post("/v1/ask", json={"question": QUESTION}).json()
        assert again["cached_from"] == first["request_id"] and again["answer"] == first["answer"]
        chat = {"model": "ragguard", "messages": [{"role": "user", "content": QUESTION}]}
        grounded = http.post("/v1/chat/completions", json=chat).json()["ragguard"]
        assert grounded["cached_from"] == first["request_id"]
        # Feedback on the served copy, by its own id, is accepted.
        thumbs = http.post(f"/v1/answers/{again['request_id']}/feedback", json={"rating": "up"})
        assert thumbs.status_code == 201, thumbs.text
        metrics = http.get("/metrics").text
    assert "ragguard:answer_cache_hits_total 2.0" in metrics
    assert "ragguard:answer_cache_misses_total 1.0" in metrics
    assert generator.calls == 1


def test_an_evaluation_never_uses_the_cache_nor_queues_audits(settings: Settings) -> None:
    from rag.eval.evaluation import _Models

    models = _Models(HashingEmbedder(), ScriptedGenerator())
    served = settings.updated(
        **{"answer_cache_ttl_s": 3600.0, "audit_rate": 0.5, "audit_rates": {"demo": 1.0}}
    )
    pipe = models.pipeline(served)
    try:
        assert not pipe.cache.enabled
        assert pipe.risk.audit_rate("demo") == 0.0
    finally:
        pipe.close()
