"""Evaluation metrics on hand-computed cases, and the data loaders on the shared data sets."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from guards import expected_calibration_error
from rag.eval.datasets import (
    DatasetNotFoundError,
    load_halueval,
    load_hotpotqa,
    load_metaqa_questions,
    load_musique,
    load_pubmedqa,
    verdict_of,
)
from rag.eval.metrics import (
    answer_matches,
    area_under_risk_coverage,
    auroc,
    auroc_interval,
    best_threshold,
    ece_noise,
    f1_score,
    risk_coverage,
    token_f1,
)

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_auroc_counts_ordered_pairs_and_ties_half() -> None:
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 3 of 4 pairs ordered
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert auroc([0.5, 0.5], [0, 1]) == 0.5
    assert auroc([3, 2, 1], [1, 1, 0]) == 1.0
    assert math.isnan(auroc([1, 2], [1, 1]))


def test_the_auroc_interval_holds_the_estimate_and_narrows_with_more_answers() -> None:
    rng = np.random.default_rng(7)

    def sample(n: int) -> tuple[list[float], list[int]]:
        labels = (rng.random(n) < 0.3).astype(int)
        scores = labels + rng.normal(0.0, 1.5, n)  # a weak signal: AUROC about 0.68
        return scores.tolist(), labels.tolist()

    small, big = sample(60), sample(6000)
    small_interval, big_interval = auroc_interval(*small), auroc_interval(*big)
    assert small_interval is not None and big_interval is not None
    low, high = small_interval
    assert low < auroc(*small) < high
    assert auroc_interval(*small) == small_interval  # seeded: the same interval every run
    assert big_interval[0] < auroc(*big) < big_interval[1]
    # 100 times the answers: about a tenth the width
    assert big_interval[1] - big_interval[0] < (high - low) / 4
    assert auroc_interval([0.2, 0.9], [1, 1]) is None


def test_the_ece_noise_is_what_a_calibrated_score_shows_on_so_few_answers() -> None:
    rng = np.random.default_rng(3)
    spread = rng.random(50).tolist()
    (few, few_high), (many, _) = ece_noise(spread), ece_noise(rng.random(5000).tolist())
    assert 0.05 < few < few_high < 0.3  # 50 answers: sampling noise alone is near a 0.1 target
    assert many < 0.02
    # labels drawn from the confidences really do give about that much
    draws = [
        expected_calibration_error(spread, (rng.random(50) < spread).astype(int))
        for _ in range(400)
    ]
    assert abs(float(np.median(draws)) - few) < 0.02


def test_answer_matching_follows_the_squad_normalisation() -> None:
    assert answer_matches("It was The Beatles, of course.", ["the beatles"])
    assert not answer_matches("Beatlemania", ["Beatles"])  # whole words only
    assert answer_matches("Richard Nixon", ["President Richard Nixon"])  # F1 0.8
    assert token_f1("a b c", "d e") == 0.0
    assert verdict_of("Yes, it does.") == "yes" and verdict_of("It is unclear") is None


def test_flags_thresholds_and_risk_coverage() -> None:
    assert f1_score([True, True, False], [True, False, True]) == 0.5
    assert best_threshold([0.9, 0.2, 0.3, 0.8], [False, True, True, False]) == 0.8
    points = risk_coverage([0.9, 0.1, 0.5, 0.7], [1, 0, 0, 1], steps=4)
    assert [(p.coverage, p.accuracy) for p in points] == [
        (0.25, 1.0),
        (0.5, 1.0),
        (0.75, 2 / 3),
        (1.0, 0.5),
    ]
    assert area_under_risk_coverage([0.9, 0.1, 0.5, 0.7], [1, 0, 0, 1]) == pytest.approx(
        (0 + 0 + 1 / 3 + 2 / 4) / 4
    )


def test_a_missing_data_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="musique_train_corpus.json"):
        load_musique(tmp_path)


@pytest.mark.skipif(not DATA.is_dir(), reason="the shared data sets are not present")
def test_loaders_read_the_shared_data_sets() -> None:
    musique = load_musique(DATA, 3)
    assert len(musique.documents) == 1890 and len(musique.examples) == 3
    assert musique.examples[0].answers[0] == "G. Stanley Hall" and musique.examples[0].gold_titles
    hotpot = load_hotpotqa(DATA, 2)
    assert all(e.gold_titles <= {d.doc_id for d in hotpot.documents} for e in hotpot.examples)
    pubmed = load_pubmedqa(DATA, 4)
    assert pubmed.answer_kind == "yes_no" and len(pubmed.documents) == 4
    assert {e.answers[0] for e in pubmed.examples} <= {"yes", "no", "maybe"}
    halu = load_halueval(DATA, 2)
    assert halu[0].right_answer == "Arthur's Magazine"
    metaqa = load_metaqa_questions(DATA, 2)
    assert metaqa[0].implied_triples[0][1] == "starred_actors"
