"""The grounded prompt's layout: passages in a canonical order, so that questions retrieving the
same passages share the prompt's prefix (and its KV, through the prefix cache)."""

from __future__ import annotations

from dataclasses import replace

from rag.prompt import PassageLayout, build_messages, canonical_order
from rag.types import Passage


def passage(doc: str, chunk: int, score: float) -> Passage:
    return Passage(doc, f"{doc}#{chunk}", f"Text of {doc} part {chunk}.", score)


def test_canonical_order_is_by_document_then_position_whatever_the_scores() -> None:
    ranked = [passage("b", 10, 0.9), passage("a", 3, 0.8), passage("b", 2, 0.7)]
    ordered = canonical_order(ranked)
    assert [p.chunk_id for p in ordered] == ["a#3", "b#2", "b#10"]  # b#2 before b#10
    assert canonical_order(list(reversed(ranked))) == ordered
    assert PassageLayout("canonical").arrange(ranked) == ordered
    by_rank = PassageLayout("rank").arrange(ranked)
    assert by_rank == ranked and by_rank is not ranked


def test_two_questions_over_the_same_passages_share_the_prompt_up_to_the_question() -> None:
    first = [passage("x", 0, 0.9), passage("y", 1, 0.6)]
    second = [passage("y", 1, 0.8), passage("x", 0, 0.7)]  # same set, another ranking

    def user_text(question: str, passages: list[Passage]) -> str:
        return build_messages(question, PassageLayout("canonical").arrange(passages))[1]["content"]

    a, b = user_text("Who?", first), user_text("When?", second)
    shared = a.split("Question:")[0]
    assert b.startswith(shared) and "[1] Text of x part 0." in shared
    assert a != b
    ranked_a = build_messages("Who?", first)[1]["content"]
    ranked_b = build_messages("When?", second)[1]["content"]
    assert ranked_a.split("Question:")[0] != ranked_b.split("Question:")[0]


def test_reuse_keeps_a_recent_prompts_leading_passages_in_front() -> None:
    layout = PassageLayout("reuse")
    film, cast, other, more = (passage(d, 0, 0.5) for d in ("film", "cast", "other", "more"))
    first = layout.arrange([replace(film, score=0.9), cast, other])
    assert [p.doc_id for p in first] == ["film", "cast", "other"]  # nothing remembered: by rank
    layout.remember(first)
    # The next question ranks the shared passages differently: the remembered order comes
    # first as far as this question also shows those passages, the rest follow by rank.
    second = layout.arrange([replace(cast, score=0.8), replace(film, score=0.7), more])
    assert [p.doc_id for p in second] == ["film", "cast", "more"]
    # The same set as a remembered prompt gets that prompt's order exactly.
    assert [p.doc_id for p in layout.arrange([other, cast, film])] == ["film", "cast", "other"]
    # Without a shared leading passage, rank order.
    assert [p.doc_id for p in layout.arrange([more, cast])] == ["more", "cast"]
    # Only prompts actually sent are remembered, and the memory is bounded.
    small = PassageLayout("reuse", memory=1)
    small.remember([film, cast])
    small.remember([other, more])
    assert [p.doc_id for p in small.arrange([cast, film])] == ["cast", "film"]
