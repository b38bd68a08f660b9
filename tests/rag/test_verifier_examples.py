"""The verifier's training examples: names and numbers read from passages, and the wrong answers
a reader of the passages is tempted by (no model is loaded)."""

from __future__ import annotations

import random

from rag.eval.items import EvalItem
from rag.eval.verifier_examples import gold_examples, misreadings, passage_spans

FILM = (
    "Directed by John Ford, the film was released in 1948 by RKO Pictures. "
    "Starring Henry Fonda and John Wayne. It was remade in 1971."
)
OTHER = "The Searchers is a 1956 western directed by John Ford, starring John Wayne."


def test_passage_spans_are_names_and_numbers_not_sentence_openings() -> None:
    assert passage_spans("Starring Tom Hanks and Meg Ryan in 1998.") == [
        "Tom Hanks",
        "Meg Ryan",
        "1998",
    ]
    assert passage_spans("Directed by John Ford, it grossed 3,400,000 dollars.") == [
        "John Ford",
        "3,400,000",
    ]
    assert passage_spans("The University of Oxford was founded before 1096.") == [
        "University of Oxford",
        "1096",
    ]
    assert passage_spans("It rained. He left.") == []


def test_misreadings_take_the_gold_answers_shape_from_its_own_sentence_first() -> None:
    rng = random.Random(0)
    who = EvalItem("q1", "who directed Fort Apache", answers=("John Ford",))
    # the name beside the gold answer, not a year, nor a name of a sentence without the gold
    assert misreadings(who, [FILM], rng, limit=5) == ["RKO Pictures"]
    assert set(misreadings(who, [FILM, OTHER], rng, limit=5)) == {
        "RKO Pictures",
        "Searchers",
        "John Wayne",
    }
    when = EvalItem("q2", "when was Fort Apache released", answers=("1948",))
    assert set(misreadings(when, [FILM], rng, limit=5)) == {"1971"}
    # never the gold answer or a span the eval would count as right
    starring = EvalItem("q3", "who starred in Fort Apache", answers=("Henry Fonda", "John Wayne"))
    assert "John Wayne" not in misreadings(starring, [FILM], rng, limit=5)
    # a lower-case gold answer (a genre) and yes/no items have no misreading
    genre = EvalItem("q4", "what genre is Fort Apache", answers=("western",))
    assert misreadings(genre, [FILM, OTHER], rng) == []
    verdict = EvalItem("q5", "Is it a western?", answers=("yes",), answer_type="yes_no")
    assert misreadings(verdict, [OTHER], rng) == []


def test_gold_examples_add_a_misreading_beside_the_right_answer_and_another_questions() -> None:
    items = [
        EvalItem("q1", "who directed Fort Apache", answers=("John Ford",)),
        EvalItem("q2", "who directed Vertigo", answers=("Alfred Hitchcock",)),
    ]
    examples = gold_examples("films", items, lambda item: [FILM] if item.id == "q1" else [])
    first = [e for e in examples if e.group == "q1"]
    assert [e.label for e in first] == [1, 0, 0]
    assert "John Ford" in first[0].answer
    assert "Alfred Hitchcock" in first[1].answer and "RKO Pictures" in first[2].answer
    # q2's right answer is not in its (empty) passages: only its wrong one is kept
    assert [e.label for e in examples if e.group == "q2"] == [0]
