"""Labelled generations as training data: loading records, re-running the guards offline, and
leave-one-data-set-out fitting."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.research.training import (
    LabelledAnswer,
    cross_fit_by_question,
    leave_one_set_out,
    load_run,
    question_fold,
    rescore,
    selective_accuracy,
)
from guards import GuardChain
from guards.registry import GuardDeps, build_guards
from rag.eval.items import EvalItem, write_items

PASSAGE = {"doc_id": "d", "chunk_id": "d#0", "score": 0.7, "text": "Kismet was released in 1944."}


def _record(item_id: str, answer: str, **extra: object) -> dict[str, object]:
    return {
        "id": item_id,
        "question": "When was Kismet released?",
        "answer": answer,
        "declined": False,
        "decision": "answer",
        "passages": [PASSAGE],
        "samples": [{"text": answer, "token_logprobs": [-0.1, -0.2], "finish_reason": "stop"}],
        "verification": 0.8,
        **extra,
    }


def test_records_become_labelled_answers_and_are_rescored_offline(tmp_path: Path) -> None:
    run = tmp_path / "movies"
    items = [
        EvalItem(id=f"q{i}", question="When was Kismet released?", answers=("1944",))
        for i in range(3)
    ]
    write_items(items, run / "dataset.jsonl")
    (run / "default").mkdir()
    (run / "default" / "run.json").write_text(json.dumps({"fingerprint": {}, "sessions": []}))
    records = [
        _record("q0", "Kismet was released in 1944."),
        _record("q1", "It came out in 1962."),
        {"id": "q2", "answer": "I don't know.", "declined": True},  # nothing to judge
    ]
    (run / "default" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    answers = load_run(run)
    assert [(a.dataset, a.item.id, a.correct) for a in answers] == [
        ("movies", "q0", 1),
        ("movies", "q1", 0),
    ]
    chain = GuardChain(build_guards(None, GuardDeps()), audit=None)
    rescore(answers, lambda answer: chain)
    right, wrong = answers
    assert right.signals["p_true"] == wrong.signals["p_true"] > 0  # from the recorded P(yes)
    assert right.signals["span_in_passages"] > wrong.signals["span_in_passages"]
    assert right.mean_logprob is not None and right.mean_logprob < 0


def test_leave_one_set_out_scores_each_set_with_a_model_that_never_saw_it() -> None:
    rng = np.random.default_rng(0)
    answers = []
    for dataset in ("a", "b", "c"):
        for k in range(200):
            support = float(rng.uniform(-0.5, 0.5))
            correct = int(rng.uniform() < 0.5 + support)
            # A signal that only set "c" has, and that says the opposite there: a model fitted
            # on "c" alone would use it; one fitted without "c" cannot have learnt it.
            quirk = float(correct - 0.5) if dataset == "c" else 0.0
            item = EvalItem(id=f"{dataset}{k}", question="q", answers=("x",))
            answers.append(
                LabelledAnswer(dataset, item, {}, correct, {"support": support, "quirk": quirk})
            )
    scores = leave_one_set_out(answers)
    assert set(scores) == {"a", "b", "c"} and all(len(s) == 200 for s in scores.values())
    held_out_c = [a.correct for a in answers if a.dataset == "c"]
    # Ranked only by the shared signal (the quirk was unseen): far from a perfect ranking.
    assert selective_accuracy(scores["c"], held_out_c, 0.5) < 0.95
    assert selective_accuracy(scores["c"], held_out_c, 0.5) > np.mean(held_out_c) + 0.1


def test_cross_fitting_by_question_learns_a_set_s_own_signal_but_never_from_the_question() -> None:
    # A signal only set "c" has: left out, "c" cannot learn it; cross-fitted by question, the
    # other questions of "c" teach it. Each answer is scored by a model that never saw it.
    rng = np.random.default_rng(1)
    answers = []
    for dataset in ("a", "b", "c"):
        for k in range(200):
            support = float(rng.uniform(-0.5, 0.5))
            correct = int(rng.uniform() < 0.5 + support * 0.5)
            graph = float(correct - 0.5) + float(rng.normal(0, 0.3)) if dataset == "c" else 0.0
            item = EvalItem(id=f"{dataset}{k}", question="q", answers=("x",))
            answers.append(
                LabelledAnswer(dataset, item, {}, correct, {"support": support, "graph": graph})
            )
    labels_c = [a.correct for a in answers if a.dataset == "c"]
    left_out = leave_one_set_out(answers)["c"]
    new_questions = cross_fit_by_question(answers, folds=5)
    assert [len(new_questions[s]) for s in ("a", "b", "c")] == [200, 200, 200]
    # Half the answers of "c" are right: its own signal ranks them well, the shared one barely.
    assert selective_accuracy(new_questions["c"], labels_c, 0.5) > 0.85
    assert selective_accuracy(left_out, labels_c, 0.5) < 0.65
    assert {question_fold(a, 5) for a in answers} == set(range(5))
    assert question_fold(answers[0], 5) == question_fold(answers[0], 5)  # stable
