"""Labelled generations: the records of ``ragguard eval`` runs as training data for the judgement.

A record holds everything the guards saw (question, whole passages, the answer and the extra
samples with their token log-probabilities, the generator's self-verification probability), and
the run's ``dataset.jsonl`` holds the gold answers. So the guards can be re-run on the records
offline (``rescore``) as they change, without generating again, and a confidence model fitted on
them, validated leave-one-data-set-out (``leave_one_set_out``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guards import (
    Candidate,
    ConfidenceModel,
    GuardChain,
    GuardContext,
    GuardPassage,
    GuardResult,
    expected_calibration_error,
    features,
)
from rag.eval.items import EvalItem, read_items
from rag.eval.judgement import mean_logprob
from rag.eval.metrics import auroc, auroc_interval, ece_noise
from rag.eval.records import read_records
from rag.eval.summary import is_correct
from rag.types import Passage


@dataclass(slots=True)
class LabelledAnswer:
    """One generated answer, what the guards saw, and whether it was right."""

    dataset: str
    item: EvalItem
    record: dict[str, Any]
    correct: int
    signals: dict[str, float] = field(default_factory=dict)
    results: list[GuardResult] = field(default_factory=list)

    @property
    def answer(self) -> str:
        return str(self.record["answer"])

    @property
    def passages(self) -> list[Passage]:
        """The passages its prompt showed, numbered from 1 in this order."""
        return [
            Passage(p["doc_id"], p["chunk_id"], p["text"], p["score"])
            for p in self.record["passages"]
        ]

    @property
    def mean_logprob(self) -> float | None:
        return mean_logprob(self.record)


def load_run(run_dir: Path, config: str | None = None) -> list[LabelledAnswer]:
    """The checked, generated answers of one ``ragguard eval`` output folder (one dataset);
    ``config`` names the configuration's sub-folder (default: the only one)."""
    items = {item.id: item for item in read_items(run_dir / "dataset.jsonl")}
    configs = [p for p in run_dir.iterdir() if (p / "items.jsonl").is_file()]
    if config is not None:
        configs = [p for p in configs if p.name == config]
    if len(configs) != 1:
        raise ValueError(f"{run_dir}: expected one configuration folder, found {len(configs)}")
    name = run_dir.name
    out = []
    for record in read_records(configs[0] / "items.jsonl").values():
        item = items.get(record["id"])
        if item is None or record.get("error") or not record.get("samples"):
            continue  # declined, failed or unchecked: nothing for the guards to judge
        label = is_correct(item, record["answer"])
        if label is None:
            continue
        out.append(LabelledAnswer(str(name), item, record, int(label)))
    return out


@dataclass(frozen=True, slots=True)
class Recorded:
    """How much of a record the guards see: the answer and up to ``samples`` - 1 extra samples
    (None: every one recorded), and the self-verification probability or not. Records made
    with extra samples and self-verification can so be re-scored as a pipeline without them
    (the default) would have scored them: its answer is the same greedy answer."""

    samples: int | None = None
    verification: bool = True
    judgement: bool = False
    """The judge's recorded P(yes) (off by default: the judge's figures fit a second stage)."""


EVERYTHING = Recorded()


def context_of(answer: LabelledAnswer, seen: Recorded = EVERYTHING) -> GuardContext:
    """The guards' view of a recorded answer, as it was when it was generated (or as a
    pipeline that asked fewer samples, or no verification, would have seen it)."""
    r = answer.record
    return GuardContext(
        question=r["question"],
        answer=r["answer"].strip(),
        passages=tuple(GuardPassage(p["chunk_id"], p["text"], p["score"]) for p in r["passages"]),
        candidates=tuple(
            Candidate(s["text"], tuple(s["token_logprobs"]), s.get("finish_reason"))
            for s in r["samples"][: seen.samples]
        ),
        verification=r.get("verification") if seen.verification else None,
        judgement=r.get("judgement") if seen.judgement else None,
    )


def rescore(
    answers: Sequence[LabelledAnswer],
    chain_for: Callable[[LabelledAnswer], GuardChain],
    seen: Recorded = EVERYTHING,
) -> None:
    """Run today's guards on the recorded answers (``chain_for(answer)`` gives the chain, e.g.
    with the data set's own knowledge graph) and
    store their results and signals."""
    for a in answers:
        results = list(chain_for(a).run(context_of(a, seen)).results)
        passages = a.record["passages"]
        a.results = results
        a.signals = features(
            results,
            token_logprobs=a.record["samples"][0]["token_logprobs"],
            retrieval_score=max((p["score"] for p in passages), default=None),
        )


@dataclass(slots=True)
class SetFigures:
    """How well one score separates right from wrong answers on one data set."""

    dataset: str
    num_answers: int
    accuracy: float
    auroc: float
    ece: float
    accuracy_at_half: float
    """Accuracy of the 50 % most confident answers (selective accuracy at 50 % coverage)."""
    auroc_interval: tuple[float, float] | None = None
    """95 % bootstrap interval of ``auroc`` (``rag.eval.metrics.auroc_interval``)."""
    ece_noise: tuple[float, float] | None = None
    """The ECE a perfectly calibrated score would show here by chance, median and 95th
    percentile (``rag.eval.metrics.ece_noise``)."""


def selective_accuracy(scores: Sequence[float], labels: Sequence[int], coverage: float) -> float:
    """Accuracy of the ``coverage`` share of answers with the highest scores."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    keep = max(1, round(coverage * len(order)))
    return float(np.asarray(labels, dtype=float)[order[:keep]].mean())


def figures(
    dataset: str, scores: Sequence[float], labels: Sequence[int], *, uncertainty: bool = True
) -> SetFigures:
    """The figures of ``scores`` on one set; with ``uncertainty``, the AUROC's bootstrap interval
    and the ECE's noise too (a second or so of resampling)."""
    return SetFigures(
        dataset,
        len(labels),
        float(np.mean(labels)) if labels else math.nan,
        auroc(scores, labels),
        expected_calibration_error(scores, labels),
        selective_accuracy(scores, labels, 0.5) if labels else math.nan,
        auroc_interval(scores, labels) if uncertainty else None,
        ece_noise(scores) if uncertainty and labels else None,
    )


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How a confidence model is fitted (``ConfidenceModel.fit``'s options): the signals, their
    declared directions, the ridge penalty, standardised signals, an intercept per data set."""

    names: Sequence[str] | None = None
    directions: Mapping[str, int] | None = None
    l2: float = 1.0
    standardize: bool = False
    per_set_intercepts: bool = False

    def fit(self, train: Sequence[LabelledAnswer]) -> ConfidenceModel:
        return ConfidenceModel.fit(
            [a.signals for a in train],
            [a.correct for a in train],
            names=self.names,
            directions=self.directions,
            l2=self.l2,
            standardize=self.standardize,
            groups=[a.dataset for a in train] if self.per_set_intercepts else None,
        )


def leave_one_set_out(
    answers: Sequence[LabelledAnswer], options: FitOptions = FitOptions()
) -> dict[str, list[float]]:
    """Each answer's confidence from a model fitted on every *other* data set: the scores a
    fitted default would give on a set it never saw. By data set, in the order of ``answers``."""
    sets = list(dict.fromkeys(a.dataset for a in answers))
    scores: dict[str, list[float]] = {}
    for held_out in sets:
        model = options.fit([a for a in answers if a.dataset != held_out])
        scores[held_out] = [model.score(a.signals) for a in answers if a.dataset == held_out]
    return scores


def question_fold(answer: LabelledAnswer, folds: int) -> int:
    """The fold of an answer's question: a stable hash of its set and id."""
    digest = hashlib.sha1(f"{answer.dataset}:{answer.item.id}".encode()).hexdigest()
    return int(digest, 16) % folds


def cross_fit_by_question(
    answers: Sequence[LabelledAnswer], options: FitOptions = FitOptions(), *, folds: int = 5
) -> dict[str, list[float]]:
    """Each answer's confidence from a model fitted on every set but without its question's
    fold: what the shipped default gives on *new questions* of the sets it was fitted on (the
    held-out questions of the same sources), where ``leave_one_set_out`` measures a set never
    seen at all. By data set, in the order of ``answers``."""
    scores: dict[int, float] = {}
    for fold in range(folds):
        model = options.fit([a for a in answers if question_fold(a, folds) != fold])
        for k, a in enumerate(answers):
            if question_fold(a, folds) == fold:
                scores[k] = model.score(a.signals)
    by_set: dict[str, list[float]] = {}
    for k, a in enumerate(answers):
        by_set.setdefault(a.dataset, []).append(scores[k])
    return by_set


def signal_auroc(answers: Sequence[LabelledAnswer], name: str) -> float:
    """AUROC of one signal alone (absent counts as 0, its neutral value)."""
    return auroc([a.signals.get(name, 0.0) for a in answers], [a.correct for a in answers])
