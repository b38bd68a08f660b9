"""guards.risk: the bounds against known values, the threshold rule against a brute-force
check, the guarantee on synthetic deployments, and the calibrator's rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from guards.risk import (
    CalibrationRule,
    Calibrator,
    Label,
    LabelKind,
    Recalibration,
    RiskMode,
    RiskTarget,
    binomial_upper_bound,
    choose_threshold,
    min_labels_for,
)
from guards.risk.bounds import weighted_upper_bound
from guards.risk.thresholds import GRID


def test_clopper_pearson_against_known_values() -> None:
    # No errors in n: 1 - alpha ** (1 / n) exactly.
    assert binomial_upper_bound(0, 10, 0.95) == pytest.approx(1 - 0.05 ** (1 / 10), abs=1e-12)
    # 2 of 20 wrong: the two-sided 95 % Clopper-Pearson interval is (0.0123, 0.3170).
    assert binomial_upper_bound(2, 20, 0.975) == pytest.approx(0.3170, abs=1e-4)
    assert binomial_upper_bound(5, 5, 0.9) == 1.0
    assert binomial_upper_bound(0, 0, 0.9) == 1.0
    assert min_labels_for(0.05, 0.9) == 45  # 0.95 ** 45 = 0.099 < 0.1 < 0.95 ** 44
    with pytest.raises(ValueError):
        binomial_upper_bound(3, 2, 0.9)


def test_equal_weights_change_nothing_and_spread_weights_widen_the_bound() -> None:
    wrong = ([True] * 2 + [False] * 23) * 2  # 8 % wrong in each half
    plain = weighted_upper_bound(wrong, [1.0] * 50, 0.9)
    doubled = weighted_upper_bound(wrong, [2.0] * 50, 0.9)
    assert plain == pytest.approx(doubled)
    assert plain[1] == pytest.approx(binomial_upper_bound(4, 50, 0.9))
    spread = weighted_upper_bound(wrong, [1.0] * 25 + [20.0] * 25, 0.9)
    assert spread[0] == pytest.approx(plain[0])
    assert spread[1] > plain[1]


def _brute_force(scores: np.ndarray, correct: np.ndarray, target: RiskTarget) -> float | None:
    """The rule written out plainly: fixed-sequence Clopper-Pearson tests down the grid from
    each start, every sequence at its Bonferroni share of the error budget."""
    s, y = np.asarray(scores), np.asarray(correct, dtype=bool)
    needed = min_labels_for(target.risk, target.confidence)
    if len(s) < needed:
        return None

    def labels_behind(
        t: float,
    ) -> int:  # selective: the labels the threshold answers; conformal: all
        return int((s >= t).sum()) if target.mode == "selective" else len(s)

    starts: list[int] = []
    count = needed
    while len(starts) < 6 and any(labels_behind(t) >= count for t in GRID):
        first = next(i for i, t in enumerate(GRID) if labels_behind(t) >= count)
        if first not in starts:
            starts.append(first)
        count *= 2
    level = 1 - (1 - target.confidence) / len(starts)
    chosen = None
    for start in starts:
        for t in GRID[start:]:
            answered = s >= t
            k = int((answered & ~y).sum())
            n = int(answered.sum()) if target.mode == "selective" else len(s)
            bound = 1.0 if k >= n else beta.ppf(level, k + 1, n - k)
            if bound > target.risk:
                break
            chosen = float(t) if chosen is None else min(chosen, float(t))
    return chosen


@pytest.mark.parametrize("mode", ["selective", "conformal"])
@pytest.mark.parametrize("risk", [0.05, 0.1, 0.2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_threshold_rule_matches_a_brute_force_check(mode: str, risk: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 600))
    scores = np.round(rng.uniform(0, 1, n), 3)
    correct = rng.random(n) < scores**0.7
    target = RiskTarget(risk, 0.9, RiskMode(mode))
    choice = choose_threshold(scores, correct, target)
    assert choice.threshold == _brute_force(scores, correct, target)
    if choice.calibrated:
        assert choice.bound is not None and choice.bound <= risk
        assert choice.estimate is not None and choice.estimate <= choice.bound


def test_too_few_labels_is_not_calibrated_and_says_so() -> None:
    choice = choose_threshold([0.99] * 20, [True] * 20, RiskTarget(0.05))
    assert not choice.calibrated
    assert choice.reason.startswith("not_calibrated: 20 labels")
    assert "at least 45" in choice.reason
    assert choice.coverage == 0.0


def test_a_confidence_that_knows_nothing_certifies_nothing_at_a_low_risk() -> None:
    rng = np.random.default_rng(3)
    scores = rng.uniform(0, 1, 500)
    correct = rng.random(500) < 0.5  # right half the time, whatever the score says
    choice = choose_threshold(scores, correct, RiskTarget(0.1))
    assert not choice.calibrated and choice.reason.startswith("not_calibrated: no threshold")


def test_the_guarantee_holds_on_synthetic_deployments() -> None:
    """Labels and new questions from one population: the realised risk among answered new
    questions stays at most the target in at least 90 % of deployments."""
    rng = np.random.default_rng(7)
    target = RiskTarget(0.1, 0.9)
    held, answered_any = 0, 0
    trials = 200
    for _ in range(trials):
        scores = rng.uniform(0, 1, 500)
        correct = rng.random(500) < scores**0.25
        choice = choose_threshold(scores, correct, target)
        if not choice.calibrated:
            held += 1  # answering nothing never breaks the risk
            continue
        answered_any += 1
        new = rng.uniform(0, 1, 20000)
        ok = rng.random(20000) < new**0.25
        assert choice.threshold is not None
        out = new >= choice.threshold
        held += int((~ok[out]).mean() <= target.risk)
    assert answered_any > trials // 2
    assert held / trials >= 0.9


def _synthetic_labels(n: int, shift: float, seed: int = 0, weights: bool = False) -> list[Label]:
    rng = np.random.default_rng(seed)
    labels = []
    for i in range(n):
        c = float(rng.uniform(0.05, 0.95))
        signals = {"a": float(rng.normal()), "b": float(rng.normal())}
        z = math.log(c / (1 - c)) + shift
        propensity = 0.05 if weights and i % 4 == 0 else 1.0
        labels.append(
            Label(bool(rng.random() < 1 / (1 + math.exp(-z))), c, signals, propensity, id=f"l{i}")
        )
    return labels


def test_the_calibrator_recovers_a_known_intercept() -> None:
    model = Calibrator().fit(_synthetic_labels(3000, shift=1.0))
    assert model.stage == "offsets"
    assert model.intercept == pytest.approx(1.0, abs=0.2)
    assert model.slope == pytest.approx(1.0, abs=0.15)
    assert all(abs(w) < 0.15 for w in model.offsets.values())  # the signals carry nothing here


def test_how_many_labels_move_what() -> None:
    calibrator = Calibrator(CalibrationRule())
    labels = _synthetic_labels(200, shift=-1.5)
    assert calibrator.fit(labels[:9]).is_identity
    assert calibrator.fit(labels[:9]).apply(0.7) == 0.7
    intercept_only = calibrator.fit(labels[:20])
    assert intercept_only.stage == "intercept" and intercept_only.slope == 1.0
    assert intercept_only.intercept < -0.5 and not intercept_only.offsets
    assert calibrator.fit(labels[:40]).stage == "slope"
    assert calibrator.fit(labels[:40]).offsets == {}
    assert set(calibrator.fit(labels).offsets) == {"a", "b"}


def test_feedback_is_never_fitted() -> None:
    labels = _synthetic_labels(50, shift=0.0)
    feedback = [Label(False, 0.9, {}, kind=LabelKind.FEEDBACK, id=f"f{i}") for i in range(500)]
    assert Calibrator().fit(labels) == Calibrator().fit(labels + feedback)


def test_a_refit_that_is_worse_on_held_back_labels_is_refused() -> None:
    calibrator = Calibrator()
    truth = _synthetic_labels(400, shift=1.0, seed=5)
    current = calibrator.fit(truth, version=1)
    # The labels a careless reviewer gave: every verdict outside the held-back fifth flipped.
    flipped = [
        lb
        if calibrator.is_held_back(lb, i)
        else Label(not lb.correct, lb.confidence, lb.signals, id=lb.id)
        for i, lb in enumerate(truth)
    ]
    outcome = calibrator.refit(flipped, current, version=2)
    assert not outcome.accepted and outcome.reason.startswith("refused")
    assert outcome.current is current and outcome.current.version == 1
    assert outcome.after["log_loss"] > outcome.before["log_loss"]
    better = calibrator.refit(truth, Recalibration(), version=2)
    assert better.accepted and better.current.version == 2
    assert better.current.metrics["held_back_labels"] == better.held_back


def test_inverse_propensity_weights_enter_the_fit() -> None:
    labels = _synthetic_labels(300, shift=0.5, weights=True)
    weighted = Calibrator().fit(labels)
    unweighted = Calibrator().fit(
        [Label(lb.correct, lb.confidence, lb.signals, id=lb.id) for lb in labels]
    )
    assert weighted != unweighted


def test_a_recalibration_survives_json() -> None:
    model = Calibrator().fit(_synthetic_labels(150, shift=0.3), version=4, now=12.5)
    again = Recalibration.from_json(model.to_json())
    assert again == model
    assert again.apply(0.6, {"a": 1.0}) == model.apply(0.6, {"a": 1.0})


def test_bad_labels_and_targets_are_refused() -> None:
    with pytest.raises(ValueError):
        Label(True, 0.5, propensity=0.0)
    with pytest.raises(ValueError):
        Label(True, 1.5)
    with pytest.raises(ValueError):
        RiskTarget(0.0)
    with pytest.raises(ValueError):
        RiskTarget(0.1, 1.0)
    with pytest.raises(ValueError):
        RiskTarget(0.1, mode="sometimes")  # type: ignore[arg-type]


def test_only_labels_a_re_ranking_model_never_saw_certify_its_thresholds() -> None:
    calibrator = Calibrator()
    labels = [
        Label(lb.correct, lb.confidence, lb.signals, id=lb.id, uniform=i % 2 == 0, created_at=i)
        for i, lb in enumerate(_synthetic_labels(300, shift=0.5))
    ]
    shifted = calibrator.fit(labels[:60])  # intercept and slope: every answer keeps its rank
    assert shifted.stage == "slope"
    assert calibrator.certifying(labels, shifted) == [lb for lb in labels if lb.uniform]
    outcome = calibrator.refit(labels[:200], Recalibration(), version=1, now=199.5)
    reranking = outcome.current
    assert reranking.stage == "offsets" and reranking.seen == 200
    certifying = calibrator.certifying(labels, reranking)
    fitted = {lb.id for i, lb in enumerate(labels[:200]) if not calibrator.is_held_back(lb, i)}
    assert certifying and all(lb.uniform and lb.id not in fitted for lb in certifying)
    assert {lb.id for lb in labels[200:] if lb.uniform} <= {lb.id for lb in certifying}


def test_the_slope_never_reverses_the_shipped_ranking() -> None:
    rng = np.random.default_rng(9)
    labels = []
    for i in range(120):  # right answers get the lower shipped confidence here
        c = float(rng.uniform(0.05, 0.95))
        labels.append(Label(bool(rng.random() < 1 - c), c, {}, id=f"r{i}"))
    model = Calibrator().fit(labels)
    assert model.stage == "intercept" and model.slope == 1.0


def test_weighted_auroc_by_ranks_matches_the_pairs() -> None:
    from guards.risk.calibrator import weighted_auroc

    rng = np.random.default_rng(2)
    s = np.round(rng.uniform(0, 1, 300), 2)  # ties on purpose
    y = (rng.random(300) < s).astype(float)
    w = rng.uniform(0.5, 3, 300)
    pos, neg = y > 0.5, y <= 0.5
    sp, sn = s[pos][:, None], s[neg][None, :]
    wins = (sp > sn) + 0.5 * (sp == sn)
    pairs = float((wins * w[pos][:, None] * w[neg][None, :]).sum() / (w[pos].sum() * w[neg].sum()))
    assert weighted_auroc(s, y, w) == pytest.approx(pairs, abs=1e-12)


def test_checkpoints_double_and_their_error_budgets_sum_to_delta() -> None:
    from guards.risk.thresholds import certify_at_checkpoint, checkpoint

    target = RiskTarget(0.1, 0.9)
    m = RiskTarget(0.1, 0.95).min_labels  # the first checkpoint is tested at 1 - delta / 2
    assert checkpoint(m - 1, target)[0] == 0
    seen = []
    for count in (m, 2 * m - 1, 2 * m, 4 * m, 9 * m):
        used, at = checkpoint(count, target)
        seen.append((used, round(1 - at.confidence, 6)))
    assert seen == [(m, 0.05), (m, 0.05), (2 * m, 0.025), (4 * m, 0.0125), (8 * m, 0.00625)]
    # Between checkpoints the certificate does not move, whatever the newer labels say.
    rng = np.random.default_rng(4)
    scores = rng.uniform(0, 1, 3 * m)
    correct = rng.random(3 * m) < scores**0.2
    first = certify_at_checkpoint(scores[: 2 * m], correct[: 2 * m], target)
    later = certify_at_checkpoint(scores, np.r_[correct[: 2 * m], ~correct[2 * m :]], target)
    assert first.threshold == later.threshold and first.target == target
