"""The guard benchmark's parts in ``benchmarks.research``: cross-fitting, the flag's F1, the claims built
from MetaQA triples (noise, gold triples, the knowledge-graph check of them) and the loop label,
on small hand-made data; the MetaQA sample on the shared data when it is present."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from benchmarks.research.crossfit import cross_fitted, flag_f1, fold_of
from benchmarks.research.end_to_end import dumped_finish_reason
from benchmarks.research.guard_sets import (
    NOISE_KINDS,
    PARAPHRASES,
    TEMPLATES,
    claim_triples,
    loops_by_oracle,
    movie_passages,
    noised,
    noisy,
    shuffled_questions,
)
from benchmarks.research.metaqa_guard import ClaimCounts, check_triple, claim_figures
from guards import ConfidenceModel, KnowledgeGraph
from rag.eval.datasets import MetaQAQuestion, load_metaqa_questions
from rag.eval.movies import MOVIE_FUNCTIONAL_RELATIONS, MOVIE_RELATION_PHRASES

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
MOVIES = [
    ("The Big Sleep", "directed_by", "Howard Hawks"),
    ("The Big Sleep", "release_year", "1946"),
    ("Kiss Me Deadly", "directed_by", "Robert Aldrich"),
    ("Kiss Me Deadly", "release_year", "1955"),
    ("Blade Runner", "directed_by", "Ridley Scott"),
    ("Blade Runner", "release_year", "1982"),
    ("Blade Runner", "has_genre", "Science Fiction"),
]


def _graph() -> KnowledgeGraph:
    return KnowledgeGraph(
        MOVIES,
        functional_relations=MOVIE_FUNCTIONAL_RELATIONS,
        relation_phrases=MOVIE_RELATION_PHRASES,
    )


def _question(qid: str, *triples: tuple[str, str, str]) -> MetaQAQuestion:
    return MetaQAQuestion(qid, f"question {qid}", "topic", ("answer",), tuple(triples))


# ---------------------------------------------------------------- cross-fitting
def _symmetric_rows() -> tuple[list[dict[str, float]], list[int], list[int]]:
    """Both folds (even and odd groups) hold the same answers: right at x=+1 and x=-0.5, wrong
    at x=-1 and x=+0.5, and one of each at x=0. Mirroring x and the label maps each fold onto
    itself, so the model fitted on it has no bias: x=0 scores 1/2."""
    xs = [1.0, 1.0, -1.0, -1.0, 0.5, 0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    labels = [1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0]
    return [{"grounding": x} for x in xs], labels, list(range(12))


def test_an_answer_is_scored_by_the_model_fitted_on_the_other_fold() -> None:
    rows, labels, groups = _symmetric_rows()
    scores = cross_fitted(rows, labels, groups)
    for fold in (0, 1):
        train = [i for i in groups if fold_of(i) != fold]
        model = ConfidenceModel.fit([rows[i] for i in train], [labels[i] for i in train])
        for i in groups:
            if fold_of(i) == fold:
                assert scores[i] == model.score(rows[i])
    assert scores[0] == pytest.approx(scores[1])  # the folds' models are the same model
    assert scores[0] > scores[4] > 0.5 > scores[6] > scores[2]  # grounding counts for
    assert scores[0] + scores[2] == pytest.approx(1.0)  # no bias
    assert scores[8:] == pytest.approx([0.5] * 4)


def test_cross_fitted_scores_never_see_their_own_labels() -> None:
    rows, labels, groups = _symmetric_rows()
    before = cross_fitted(rows, labels, groups)
    flipped = [1 - y if fold_of(g) == 0 else y for y, g in zip(labels, groups, strict=True)]
    after = cross_fitted(rows, flipped, groups)
    assert after[0::2] == before[0::2]
    assert after[1] < 0.5 < before[1]  # fold 1 is scored by a model fitted on flipped labels


def test_a_group_stays_in_one_fold() -> None:
    assert [fold_of(g) for g in (0, 0, 1, 1, 6, 7)] == [0, 0, 1, 1, 0, 1]


def test_flag_f1_takes_each_folds_threshold_from_the_other_fold() -> None:
    # fold 1 (odd indices) sets t = 0.8 for fold 0: flags 0.1, 0.3, 0.7 there;
    # fold 0 sets t = 0.7 for fold 1: flags 0.2, 0.35, 0.6.
    # Flagged: indices 0, 1, 4, 5, 6, 7; wrong (label 0): 0, 1, 4, 7 -> tp 4, fp 2, fn 0.
    scores = [0.1, 0.2, 0.9, 0.8, 0.3, 0.35, 0.7, 0.6]
    labels = [0, 0, 1, 1, 0, 1, 1, 0]
    assert flag_f1(scores, labels, list(range(8))) == pytest.approx(2 * 4 / (2 * 4 + 2 + 0))
    # a threshold that is perfect on its own fold can misfire on the other: fold 0 puts it at
    # 0.9 (its lowest right score), which flags fold 1's right answer at 0.8 too: tp 2, fp 1
    assert flag_f1([0.1, 0.2, 0.9, 0.8], [0, 0, 1, 1], [0, 1, 2, 3]) == pytest.approx(0.8)


# ---------------------------------------------------------------- claims
def test_each_kind_of_noise_changes_the_name_as_named() -> None:
    assert noised("The Matrix", "lower") == "the matrix"
    assert noised("The Matrix", "upper") == "THE MATRIX"
    assert noised("The Matrix", "no_the") == "Matrix"
    assert noised("the matrix", "no_the") == "matrix"
    assert noised("Kick-Ass 2: Balls!", "no_punct") == "KickAss 2 Balls"
    assert noised("The Matrix", "as_is") == "The Matrix"
    assert set(NOISE_KINDS) == {"lower", "upper", "no_the", "no_punct", "as_is"}
    # a seeded stream picks the same kind every run: seed 0 draws no_punct, seed 7 no_the
    assert noisy("L.A. Story", random.Random(0)) == "LA Story"
    assert noisy("The Thing", random.Random(7)) == "Thing"


def test_every_relation_has_a_template_and_paraphrases_naming_subject_and_object() -> None:
    assert set(TEMPLATES) == set(PARAPHRASES)
    for relation, template in TEMPLATES.items():
        for text in (template, *PARAPHRASES[relation]):
            assert "{s}" in text and "{o}" in text
    assert TEMPLATES["directed_by"].format(s="Heat", o="Michael Mann") == (
        "Heat was directed by Michael Mann."
    )


def test_gold_triples_come_from_questions_first_then_from_the_graph_per_relation() -> None:
    questions = [
        _question("1", MOVIES[0]),
        _question("2", ("Nowhere Film", "directed_by", "Nobody")),  # not in the graph
        _question("3"),  # implies no triple
        _question("4", MOVIES[2]),
    ]
    gold = claim_triples(questions, _graph(), 2, random.Random(1))
    assert gold.num_from_questions == 2
    # then by relation in name order: directed_by has its 2 already, has_genre has one edge
    # only, release_year draws 2 of its 3 (the second draw of the stream seeded 1)
    assert gold.triples == [
        MOVIES[0],
        MOVIES[2],
        ("Blade Runner", "has_genre", "Science Fiction"),
        ("The Big Sleep", "release_year", "1946"),
        ("Blade Runner", "release_year", "1982"),
    ]


def test_the_question_phase_stops_at_five_times_the_limit_or_200() -> None:
    questions = [_question(str(i), MOVIES[0]) for i in range(300)]
    gold = claim_triples(questions, _graph(), 1, random.Random(1))
    assert gold.num_from_questions == 200
    assert gold.triples[:200] == [MOVIES[0]] * 200
    assert len(gold.triples) == 202  # plus one release_year and the has_genre triple


def test_a_movie_passage_lists_its_triples_under_their_labels() -> None:
    docs = movie_passages(_graph(), ["The Big Sleep", "Blade Runner"])
    assert [d.doc_id for d in docs] == ["Blade Runner", "The Big Sleep"]
    assert docs[1].text == "The Big Sleep. Directed by: Howard Hawks. Released in: 1946."
    assert docs[0].text == (
        "Blade Runner. Directed by: Ridley Scott. Released in: 1982. Genre: Science Fiction."
    )


def test_the_graph_check_supports_gold_claims_and_contradicts_corrupted_ones() -> None:
    graph = _graph()
    ranges = {r: sorted(graph.values(r)) for r in graph.relations}
    counts = ClaimCounts()
    triples = MOVIES[2:5]  # two directors and a year
    rngs = (random.Random(0), random.Random(2))
    supported = [check_triple(graph, t, ranges, rngs, counts) for t in triples]
    assert supported == [True, True, True]
    figures = claim_figures(counts, 0, sorted(graph.functional_relations))
    assert figures["num_claims"] == 3
    assert figures["num_claims_by_relation"] == {"directed_by": 2, "release_year": 1}
    assert figures["gold_supported"] == 1.0
    assert figures["corrupted_supported"] == 0.0
    assert figures["num_functional"] == 3
    assert figures["corrupted_functional_contradicted"] == 1.0
    assert figures["paraphrase_gold_supported_by_relation"] == {
        "directed_by": 1.0,
        "release_year": 1.0,
    }
    assert figures["unsupported_examples"] == {}
    assert sum(n for _, n in counts.gold_by_noise.values()) == 3


# ---------------------------------------------------------------- loops, dumps
def test_a_loop_is_a_full_length_output_whose_second_half_compresses_over_4x() -> None:
    assert loops_by_oracle([1, 2] * 100, 200)
    assert not loops_by_oracle([1, 2] * 50, 200)  # stopped early: no loop
    rng = random.Random(0)
    assert not loops_by_oracle([rng.randrange(50_000) for _ in range(200)], 200)


def test_a_dumped_candidates_finish_reason() -> None:
    assert dumped_finish_reason(["stop"]) == "stop"
    assert dumped_finish_reason(["None"]) is None
    assert dumped_finish_reason([]) is None
    assert dumped_finish_reason(["stop", "repetition loop"]) == "repetition loop"
    assert dumped_finish_reason(["length", None]) == "length"


# ---------------------------------------------------------------- shared data
@pytest.mark.skipif(not DATA.is_dir(), reason="the shared data sets are not present")
def test_the_metaqa_sample_is_the_supported_questions_shuffled_by_the_seed() -> None:
    first = shuffled_questions(DATA, random.Random(0))
    again = shuffled_questions(DATA, random.Random(0))
    supported = [q for q in load_metaqa_questions(DATA) if q.kb_supported]
    assert [q.id for q in first] == [q.id for q in again]
    assert sorted(q.id for q in first) == sorted(q.id for q in supported)
    assert [q.id for q in first[:20]] != [q.id for q in supported[:20]]
