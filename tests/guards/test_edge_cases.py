"""Every guard on the edges: empty, unicode and very long answers, aliases, and a title that
names two films (two entities sharing one node)."""

from __future__ import annotations

import pytest

from guards import (
    Candidate,
    ConfidenceModel,
    GroundingGuard,
    GuardChain,
    GuardContext,
    GuardPassage,
    KnowledgeGraph,
    KnowledgeGraphGuard,
    Outcome,
    RepetitionGuard,
    SelfConsistencyGuard,
    features,
)
from rag.eval.movies import MOVIE_RELATION_PHRASES

PASSAGES = (GuardPassage("p1", "Kismet was directed by William Dieterle and released in 1944."),)
GRAPH = KnowledgeGraph(
    [
        ("Kismet", "directed_by", "William Dieterle"),
        ("Kismet", "release_year", "1944"),
        ("Kismet", "release_year", "1955"),  # the 1955 remake shares the title
        ("Kismet", "directed_by", "Vincente Minnelli"),
        ("Amélie", "release_year", "2001"),
        ("Amélie", "directed_by", "Jean-Pierre Jeunet"),
    ],
    aliases={"Le Fabuleux Destin d'Amélie Poulain": "Amélie"},
    functional_relations={"release_year", "directed_by"},
    relation_phrases=MOVIE_RELATION_PHRASES,
)


def chain() -> GuardChain:
    return GuardChain(
        [RepetitionGuard(), GroundingGuard(), SelfConsistencyGuard(), KnowledgeGraphGuard(GRAPH)]
    )


def run(
    answer: str, samples: tuple[str, ...] = (), question: str = "When was Kismet released?"
) -> dict[str, Outcome]:
    candidates = tuple(Candidate(s, finish_reason="stop") for s in (answer, *samples))
    ctx = GuardContext(question, answer, PASSAGES, candidates)
    return {r.name: r.outcome for r in chain().run(ctx).results}


def test_an_empty_answer_fails_repetition_and_nothing_passes_it() -> None:
    outcomes = run("")
    assert outcomes["repetition"] is Outcome.FAIL
    assert outcomes["grounding"] is Outcome.ABSTAIN  # nothing to ground: not a pass
    assert outcomes["knowledge_graph"] is Outcome.ABSTAIN
    assert outcomes["self_consistency"] is Outcome.ABSTAIN


def test_unicode_answers_are_checked_like_any_other() -> None:
    asked = "Who directed Amélie?"
    assert (
        run("Amélie was directed by Jean-Pierre Jeunet.", question=asked)["knowledge_graph"]
        is Outcome.PASS
    )
    assert (
        run("Amelie was directed by Jean Pierre Jeunet.", question=asked.replace("é", "e"))[
            "knowledge_graph"
        ]
        is Outcome.PASS
    )
    # A true fact about another film than the one asked about is no support.
    assert run("Amélie was directed by Jean-Pierre Jeunet.")["knowledge_graph"] is Outcome.ABSTAIN
    cjk = run("《天使爱美丽》是一部电影。")
    assert cjk["repetition"] is Outcome.PASS and cjk["grounding"] is Outcome.FAIL


def test_very_long_answers_are_judged_whole() -> None:
    varied = " ".join(f"Sentence {i} mentions token{i} once." for i in range(2000))
    outcomes = run(varied)
    assert outcomes["repetition"] is Outcome.PASS and outcomes["grounding"] is Outcome.FAIL
    looping = "Kismet was released in 1944. " + "and then " * 3000
    assert run(looping)["repetition"] is Outcome.FAIL


def test_aliases_reach_the_same_node() -> None:
    asked = "When was Amélie released?"
    answer = "Le Fabuleux Destin d'Amélie Poulain was released in 2001."
    assert run(answer, question=asked)["knowledge_graph"] is Outcome.PASS
    wrong = "Le fabuleux destin d'Amelie Poulain was released in 1955."
    assert run(wrong, question=asked)["knowledge_graph"] is Outcome.FAIL


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("Kismet was released in 1944.", Outcome.PASS),
        ("Kismet was released in 1955.", Outcome.PASS),  # the remake: also true of the title
        ("Kismet was released in 2001.", Outcome.FAIL),  # a year the graph knows
        ("Kismet was directed by Vincente Minnelli.", Outcome.PASS),
    ],
)
def test_a_title_shared_by_two_films_accepts_either_films_facts(
    answer: str, expected: Outcome
) -> None:
    assert run(answer)["knowledge_graph"] is expected


def test_the_confidence_of_the_edges_stays_a_probability() -> None:
    for answer in ("", "《天使爱美丽》", "x " * 5000):
        ctx = GuardContext("q", answer, PASSAGES, (Candidate(answer),))
        score = ConfidenceModel.prior().score(features(chain().run(ctx).results))
        assert 0.0 <= score <= 1.0
