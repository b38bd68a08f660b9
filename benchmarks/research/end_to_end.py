"""The confidence end to end: MuSiQue, HotpotQA and PubMedQA asked through ``Pipeline.ask``, the
product's checker on every answer, and how well its confidence (prior weights, and
cross-fitted) tells right answers from wrong ones against the answer's mean token logprob.

Generation and scoring are apart: ``generate_end_to_end`` keeps, per question, what the checker
saw (answer, samples with their token logprobs, passages), so ``score_end_to_end`` can re-score
recorded answers as the guards change, without generating again.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.research.crossfit import cross_fitted
from benchmarks.research.guard_sets import SEED
from engine import Generator
from guards import Candidate, ConfidenceModel, expected_calibration_error
from guards.repetition import LOOP_STOP_REASON
from rag.eval.datasets import QADataset, load_hotpotqa, load_musique, load_pubmedqa
from rag.eval.items import EvalItem
from rag.eval.metrics import area_under_risk_coverage, auroc, risk_coverage
from rag.eval.prepare import YES_NO_SUFFIX
from rag.eval.summary import is_correct
from rag.pipeline import Pipeline
from rag.retrieval.embed import Embedder
from rag.settings import Settings
from rag.stages.check import AnswerChecker, Checked
from rag.types import Passage, Result

TARGET_AUROC = 0.75
E2E_LOADERS: dict[str, Callable[[Path, int | None], QADataset]] = {
    "musique": load_musique,
    "hotpotqa": load_hotpotqa,
    "pubmedqa": load_pubmedqa,
}


def ask_all(pipeline: Pipeline, questions: list[str], threads: int) -> list[Result]:
    """Ask from several threads at once: the engine batches them into shared steps."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda q: pipeline.ask(q, seed=SEED), questions))


def dumped_finish_reason(rest: Sequence[Any]) -> str | None:
    """A dumped candidate's finish reason (older dumps: finish reason, then stop reason)."""
    if len(rest) == 2 and rest[1] == LOOP_STOP_REASON:
        return LOOP_STOP_REASON
    return rest[0] if rest and rest[0] not in (None, "None") else None


def record_checks(checker: AnswerChecker) -> dict[str, dict[str, Any]]:
    """What the checker is given for each question, keyed by question (instrumentation)."""
    seen: dict[str, dict[str, Any]] = {}
    check = checker.check

    def capture(
        question: str,
        answer: Candidate,
        samples: Sequence[Candidate],
        passages: Sequence[Passage],
        **kw: Any,
    ) -> Checked:
        seen[question] = {
            "answer_index": list(samples).index(answer),
            "candidates": [[c.text, list(c.token_logprobs), c.finish_reason] for c in samples],
            "passages": [[p.chunk_id, p.text, p.score] for p in passages],
        }
        return check(question, answer, samples, passages, **kw)

    checker.check = capture  # type: ignore[method-assign]
    return seen


def _ask_dataset(
    name: str,
    dataset: QADataset,
    embedder: Embedder,
    generator: Generator,
    *,
    num_candidates: int,
    threads: int,
) -> list[dict[str, Any]]:
    """One data set's questions through a pipeline over its own corpus."""
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
        settings = Settings(
            index_dir=Path(tmp) / "indexes",
            data_dir=Path(tmp) / "data",
            index_name=name,
            build_demo_index=False,
            num_candidates=num_candidates,
            max_tokens=64,
        )
        pipeline = Pipeline(settings, embedder, generator)
        pipeline.collections.get(name, create=True).ingest(dataset.documents)
        assert pipeline.checker is not None
        seen = record_checks(pipeline.checker)
        questions = [e.question for e in dataset.examples]
        if dataset.answer_kind == "yes_no":
            questions = [q + YES_NO_SUFFIX for q in questions]
        started = time.perf_counter()
        results = ask_all(pipeline, questions, threads)
        elapsed = time.perf_counter() - started
        pipeline.close()
    records = []
    for example, question, result in zip(dataset.examples, questions, results, strict=True):
        item = EvalItem(example.id, question, example.answers, answer_type=dataset.answer_kind)
        records.append(
            {
                "dataset": name,
                "id": example.id,
                "question": question,
                "golds": list(example.answers),
                "answer": result.answer,
                "correct": bool(is_correct(item, result.answer)),
                "declined": result.confidence is None,
                "seconds_per_question": elapsed / len(questions),
                **seen.get(result.question, {}),
            }
        )
    return records


def generate_end_to_end(
    data_dir: Path,
    limit: int | None,
    embedder: Embedder,
    generator: Generator,
    *,
    num_candidates: int,
    threads: int,
) -> list[dict[str, Any]]:
    """Ask every question of the three sets through ``Pipeline.ask``; one record per question
    with what the checker saw, so that the answers can be re-scored without generating."""
    records: list[dict[str, Any]] = []
    for name, load in E2E_LOADERS.items():
        dataset = load(data_dir, limit)
        records += _ask_dataset(
            name, dataset, embedder, generator, num_candidates=num_candidates, threads=threads
        )
    return records


@dataclass(frozen=True, slots=True)
class CheckedRecords:
    """The checker's confidence features of every answered record, with its label (1 = right),
    its position among the records (its cross-fitting group) and its data set."""

    rows: list[dict[str, float]]
    labels: list[int]
    groups: list[int]
    datasets: list[str]


def check_records(records: Sequence[dict[str, Any]], embedder: Embedder) -> CheckedRecords:
    """The product's checker on each recorded answer (declined and unrecorded ones skipped)."""
    checked = CheckedRecords([], [], [], [])
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
        settings = Settings(index_dir=Path(tmp) / "i", data_dir=Path(tmp) / "d")
        checker = AnswerChecker(settings, embedder)
        for k, r in enumerate(records):
            if r["declined"] or "candidates" not in r:
                continue
            candidates = [
                Candidate(text.strip(), tuple(logprobs), dumped_finish_reason(rest))
                for text, logprobs, *rest in r["candidates"]
            ]
            passages = [Passage(cid, cid, text, score) for cid, text, score in r["passages"]]
            result = checker.check(
                r["question"], candidates[r["answer_index"]], candidates, passages
            )
            checked.rows.append(result.signals)
            checked.labels.append(int(r["correct"]))
            checked.groups.append(k)
            checked.datasets.append(r["dataset"])
    return checked


def _per_dataset(
    records: Sequence[dict[str, Any]], checked: CheckedRecords, scores: dict[str, list[float]]
) -> dict[str, Any]:
    """Accuracy, speed and each score's AUROC on each data set alone."""
    per_dataset: dict[str, Any] = {}
    for name in dict.fromkeys(r["dataset"] for r in records):
        mine = [r for r in records if r["dataset"] == name]
        idx = [i for i, n in enumerate(checked.datasets) if n == name]
        y = [checked.labels[i] for i in idx]
        per_dataset[name] = {
            "num_questions": len(mine),
            "declined": sum(r["declined"] for r in mine),
            "accuracy_of_answered": float(np.mean(y)) if y else 0.0,
            "seconds_per_question": mine[0]["seconds_per_question"],
            **{f"auroc_{s}": auroc([scores[s][i] for i in idx], y) for s in scores},
        }
    return per_dataset


def score_end_to_end(
    records: Sequence[dict[str, Any]], embedder: Embedder, num_candidates: int
) -> tuple[dict[str, Any], CheckedRecords]:
    """AUROC and risk-coverage of the confidence (prior weights and cross-fitted) against the
    answer's mean token logprob, pooled and by data set; with the checked records."""
    checked = check_records(records, embedder)
    labels = checked.labels
    prior = ConfidenceModel.prior()
    prior_scores = [prior.score(r) for r in checked.rows]
    fitted = cross_fitted(checked.rows, labels, checked.groups)
    logprob = [r["token_prob"] for r in checked.rows]
    scores = {"prior": prior_scores, "fitted": fitted, "mean_logprob": logprob}
    record: dict[str, Any] = {
        "num_candidates": num_candidates,
        "datasets": _per_dataset(records, checked, scores),
        "num_answers": len(checked.rows),
        "accuracy": float(np.mean(labels)) if labels else 0.0,
        **{f"auroc_{s}": auroc(values, labels) for s, values in scores.items()},
        "aurc_fitted": area_under_risk_coverage(fitted, labels),
        "aurc_mean_logprob": area_under_risk_coverage(logprob, labels),
        "ece_fitted": expected_calibration_error(fitted, labels),
        "risk_coverage_fitted": [
            [p.coverage, p.accuracy, p.threshold] for p in risk_coverage(fitted, labels)
        ],
        "risk_coverage_mean_logprob": [
            [p.coverage, p.accuracy] for p in risk_coverage(logprob, labels)
        ],
        "target_auroc": TARGET_AUROC,
    }
    return record, checked


def fit_confidence(
    checked: CheckedRecords, record: dict[str, Any], num_candidates: int
) -> ConfidenceModel | None:
    """The confidence model fitted on every checked answer, its notes saying what it was fitted
    on and how it did cross-fitted; None when the answers are all right or all wrong."""
    if len(set(checked.labels)) != 2:
        return None
    model = ConfidenceModel.fit(checked.rows, checked.labels)
    model.notes.update(
        {
            "data": "musique, hotpotqa, pubmedqa (benchmarks/guards_eval.py end_to_end)",
            "num_candidates": float(num_candidates),
            "cross_fitted_auroc": record["auroc_fitted"],
            "cross_fitted_ece": record["ece_fitted"],
        }
    )
    return model
