"""A reviewer's approved or edited answer is what the same question gets next time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guards import Policy
from guards.review import Resolution
from rag.retrieval.documents import Document

if TYPE_CHECKING:
    from rag.pipeline import Pipeline


def test_an_edited_answer_is_served_until_the_index_changes(demo_pipeline: Pipeline) -> None:
    question = "What does a KV cache avoid recomputing?"
    assert demo_pipeline.checker is not None  # the guards are on by default
    demo_pipeline.checker.policy = Policy(abstain_below=0.0, review_below=1.0)
    flagged = demo_pipeline.ask(question, max_tokens=8)
    assert flagged.decision == "review" and flagged.review_id
    reviews = demo_pipeline.reviews.store
    reviews.claim(flagged.review_id, "ann")
    reviews.resolve(
        flagged.review_id,
        "ann",
        Resolution.EDIT,
        edited_answer="The keys and values of past tokens [1].",
    )

    again = demo_pipeline.ask("  what does a KV cache avoid recomputing ")
    assert again.answer == "The keys and values of past tokens [1]."
    assert again.decision == "answer" and again.review_id == flagged.review_id
    assert again.decision_reasons == [f"approved by reviewer ann (review {flagged.review_id})"]
    assert again.passages == flagged.passages and again.citations[0].number == 1
    assert again.usage.completion_tokens == 0  # no generation

    demo_pipeline.collections.get("demo").ingest([Document("new", "A new fact.")])
    after_change = demo_pipeline.ask(question, max_tokens=8)
    assert after_change.review_id != flagged.review_id  # generated afresh, flagged again
    assert after_change.usage.completion_tokens > 0
