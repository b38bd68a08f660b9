"""The grounded prompt's layout: passages in a canonical order, so that questions retrieving the
same passages share the prompt's prefix (and its KV, through the prefix cache)."""

from __future__ import annotations

from rag.prompt import build_messages, canonical_order, prompt_order
from rag.types import Passage


def passage(doc: str, chunk: int, score: float) -> Passage:
    return Passage(doc, f"{doc}#{chunk}", f"Text of {doc} part {chunk}.", score)


def test_canonical_order_is_by_document_then_position_whatever_the_scores() -> None:
    ranked = [passage("b", 10, 0.9), passage("a", 3, 0.8), passage("b", 2, 0.7)]
    ordered = canonical_order(ranked)
    assert [p.chunk_id for p in ordered] == ["a#3", "b#2", "b#10"]  # b#2 before b#10
    assert canonical_order(list(reversed(ranked))) == ordered
    assert prompt_order(ranked, "rank") == ranked and prompt_order(ranked, "rank") is not ranked


def test_two_questions_over_the_same_passages_share_the_prompt_up_to_the_question() -> None:
    first = [passage("x", 0, 0.9), passage("y", 1, 0.6)]
    second = [passage("y", 1, 0.8), passage("x", 0, 0.7)]  # same set, another ranking

    def user_text(question: str, passages: list[Passage]) -> str:
        return build_messages(question, prompt_order(passages, "canonical"))[1]["content"]

    a, b = user_text("Who?", first), user_text("When?", second)
    shared = a.split("Question:")[0]
    assert b.startswith(shared) and "[1] Text of x part 0." in shared
    assert a != b
    ranked_a = build_messages("Who?", first)[1]["content"]
    ranked_b = build_messages("When?", second)[1]["content"]
    assert ranked_a.split("Question:")[0] != ranked_b.split("Question:")[0]
