"""``ragguard eval``'s figures on hand-made records, each checked against a value computed by
hand, and the report rendered from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rag.errors import InvalidInputError
from rag.eval.items import EvalItem
from rag.eval.metrics import reliability_bins
from rag.eval.records import gold_ranks, read_records
from rag.eval.report import render_html, render_markdown, write_results
from rag.eval.summary import summarise
from rag.types import Passage

ITEMS = [
    EvalItem("a", "Capital of France?", ("Paris",), gold_passage_ids=("d1", "d2")),
    EvalItem("b", "Where does the Danube end?", ("Black Sea",), gold_passage_ids=("d3",)),
    EvalItem("c", "When was the tower built?", ("1889",), gold_passage_ids=("d4",)),
    EvalItem("d", "Is it tall?", ("yes",), answer_type="yes_no", gold_passage_ids=("d5",)),
]


def record(item_id: str, answer: str, confidence: float, decision: str, ranks: list) -> dict:
    return {
        "id": item_id,
        "answer": answer,
        "confidence": confidence,
        "decision": decision,
        "declined": False,
        "gold_ranks": ranks,
        "gold_ranks_in_context": ranks,
        "guards": [
            {
                "name": "grounding",
                "outcome": "pass" if confidence > 0.5 else "fail",
                "score": confidence,
                "reason": "r",
            }
        ],
        "passages": [
            {"doc_id": "d1", "chunk_id": "d1#0", "score": 0.8, "text": "Paris is the capital."}
        ],
        "timings": {"total_s": 2.0 * confidence, "generate_s": 1.0, "time_to_first_token_s": 0.1},
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
    }


RECORDS = {
    # a: exact; gold documents at ranks 1 and 4
    "a": record("a", "Paris", 0.9, "answer", [1, 4]),
    # b: contains the gold; F1 = 2 * (2/3 * 1) / (2/3 + 1) = 0.8; its gold document not retrieved
    "b": record("b", "the Black Sea coast", 0.7, "answer", [None]),
    # c: wrong, F1 0; gold at rank 2
    "c": record("c", "in 1890", 0.8, "review", [2]),
    # d: yes/no item answered "no": wrong; gold at rank 3
    "d": record("d", "No, it does not.", 0.3, "abstain", [3]),
}


def test_every_figure_matches_its_hand_computed_value() -> None:
    m = summarise(ITEMS, RECORDS, elapsed_s=8.0)
    answers, retrieval = m["answers"], m["retrieval"]
    assert answers["accuracy"] == 0.5  # a and b
    assert answers["exact_match"] == pytest.approx(1 / 3)  # free items a, b, c: only a
    assert answers["token_f1"] == pytest.approx((1 + 0.8 + 0) / 3)
    assert answers["contains_gold"] == pytest.approx(2 / 3)
    assert retrieval["recall@1"] == pytest.approx((0.5 + 0 + 0 + 0) / 4)
    assert retrieval["recall@3"] == pytest.approx((0.5 + 0 + 1 + 1) / 4)
    assert retrieval["recall@5"] == retrieval["recall@10"] == pytest.approx((1 + 0 + 1 + 1) / 4)
    assert retrieval["mrr@10"] == pytest.approx((1 + 0 + 1 / 2 + 1 / 3) / 4)
    assert retrieval["all_gold@10"] == 0.75

    decisions = m["decisions"]
    assert (decisions["answer_rate"], decisions["review_rate"], decisions["abstain_rate"]) == (
        0.5,
        0.25,
        0.25,
    )
    assert decisions["accuracy_answered"] == 1.0 and decisions["accuracy_flagged"] == 0.0

    confidence = m["confidence"]
    # right answers score 0.9 and 0.7, wrong ones 0.8 and 0.3: 3 of 4 pairs ordered
    assert confidence["auroc"] == 0.75
    # one answer per bin: |1 - 0.9|, |1 - 0.7|, |0 - 0.8|, |0 - 0.3|
    assert confidence["ece"] == pytest.approx((0.1 + 0.3 + 0.8 + 0.3) / 4)
    # by confidence: right, wrong, right, wrong -> error rates 0, 1/2, 1/3, 2/4
    assert confidence["aurc"] == pytest.approx((0 + 1 / 2 + 1 / 3 + 2 / 4) / 4)
    low, high = confidence["auroc_interval"]  # two answers a class: anything from 0 to 1
    assert low < 0.75 < high
    median, high = confidence["ece_noise"]
    assert 0.0 < median < confidence["ece"] and median <= high
    assert m["guards"] == {"grounding": {"fail": 1, "pass": 3}}

    latency = m["latency"]
    assert latency["total_s"]["p50"] == pytest.approx(2 * 0.75)  # median of 1.8, 1.4, 1.6, 0.6
    assert latency["throughput_tokens_per_s"] == 40 / 8.0
    assert latency["tokens_per_s"]["p50"] == 10.0
    # the confidently wrong answer the policy would have let through comes first: none here,
    # so the reviewed one (c), then the withheld one (d)
    assert [f["id"] for f in m["failures"]] == ["c", "d"]


def test_reliability_bins_match_the_calibration_error_binning() -> None:
    bins = reliability_bins([0.05, 0.15, 0.12, 0.95], [0, 1, 0, 1])
    assert [(b.lower, b.count, b.accuracy) for b in bins] == [
        (0.0, 1, 0.0),
        (0.1, 2, 0.5),
        (0.9, 1, 1.0),
    ]
    assert bins[1].mean_confidence == pytest.approx(0.135)


def test_labelled_answers_and_known_wrong_answers() -> None:
    labelled = [
        EvalItem(str(k), "q", ("right",), label=label, answer="x")
        for k, label in enumerate((1, 0, 1, 0))
    ]
    records = {
        str(k): {
            "id": str(k),
            "answer": "x",
            "confidence": c,
            "decision": "answer",
            "declined": False,
            "guards": [],
        }
        for k, c in enumerate((0.8, 0.6, 0.4, 0.2))
    }
    m = summarise(labelled, records)
    assert m["labelled"]["auroc"] == 0.75 and m["answers"] is None and m["confidence"] is None
    assert m["labelled"]["decisions"]["accuracy_answered"] == 0.5
    assert (
        m["labelled"]["hallucinations_passed"] == 1.0
        and m["labelled"]["right_answers_flagged"] == 0.0
    )

    rgb = [
        EvalItem("r", "Super Bowl 2021 location", ("Tampa",), wrong_answers=("Glendale, Arizona",))
    ]
    answered = {
        "r": {
            "id": "r",
            "answer": "It was in Glendale, Arizona.",
            "confidence": None,
            "decision": "answer",
            "declined": False,
        }
    }
    m = summarise(rgb, answered)
    assert m["answers"]["wrong_answer_rate"] == 1.0 and m["answers"]["accuracy"] == 0.0


def test_a_dataset_without_gold_answers_reports_what_needs_none() -> None:
    items = [EvalItem("q1", "What is ragguard?"), EvalItem("q2", "Who wrote it?")]
    records = {
        i.id: record(i.id, "An answer.", 0.6, "answer", []) | {"gold_ranks": None} for i in items
    }
    m = summarise(items, records, elapsed_s=2.0)
    assert m["answers"] is None and m["confidence"] is None and m["retrieval"] is None
    assert m["decisions"]["answer_rate"] == 1.0 and m["decisions"]["accuracy_answered"] is None
    assert m["latency"]["total_s"]["p50"] == pytest.approx(1.2) and m["failures"] == []


def test_gold_ranks_count_distinct_documents_and_match_gold_texts() -> None:
    ranked = [
        Passage("d1", "d1#0", "Paris is the capital of France.", 0.9),
        Passage("d1", "d1#1", "It has many museums.", 0.8),
        Passage("d2", "d2#0", "The Danube ends in the Black Sea.", 0.7),
        Passage("d3", "d3#0", "Rome is in Italy.", 0.6),
    ]
    item = EvalItem(
        "x",
        "q",
        gold_passage_ids=("d2", "d9"),
        gold_passages=("The  Danube ends in the Black Sea. It is long.",),
    )
    assert gold_ranks(item, ranked) == [2, None, 2]


def test_the_report_embeds_its_plots_and_escapes_the_failure_table(tmp_path: Path) -> None:
    items = [*ITEMS, EvalItem("e", "<script>alert(1)</script>?", ("x",))]
    records = RECORDS | {"e": record("e", "<b>bold</b>", 0.95, "answer", [1])}
    metrics = summarise(items, records, elapsed_s=8.0)
    results = {
        "created_at": "2026-01-01T00:00:00+00:00",
        "command": "ragguard eval tiny.jsonl --out x",
        "dataset": {"name": "tiny", "num_items": 5, "num_items_total": 5, "limit": None, "seed": 0},
        "index": {"name": "tiny", "num_documents": 5, "num_chunks": 5, "embedding_model": "m"},
        "versions": {"ragguard": "0.1.0"},
        "threads": 2,
        "configs": [
            {"name": "default", "overrides": {}, "metrics": metrics},
            {"name": "n5", "overrides": {"num_candidates": 5}, "metrics": metrics},
        ],
    }
    page = render_html(results, {"default": [1.0, 2.0, 3.0], "n5": [2.0, 2.5]})
    assert page.count("data:image/png;base64,") == 4  # no labelled items: no second diagram
    assert "&lt;script&gt;alert(1)&lt;/script&gt;?" in page and "<script>" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<th>n5</th>" in page
    assert "recall@5" in page and "accuracy of flagged" in page

    table = render_markdown(results).splitlines()
    assert table[2] == "| metric | default | n5 |"
    assert "| Retrieval: MRR@10 | 0.567 | 0.567 |" in table  # (1 + 0 + 1/2 + 1/3 + 1) / 5
    interval = next(row for row in table if "AUROC 95% interval" in row)
    assert interval.count("–") == 2  # "low–high" for each configuration

    write_results(results | {"nan": float("nan")}, tmp_path / "results.json")
    assert json.loads((tmp_path / "results.json").read_text())["nan"] is None


def test_a_torn_last_record_is_cut_off_and_a_bad_one_elsewhere_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    good = json.dumps({"id": "a", "answer": "café"}, ensure_ascii=False).encode()
    torn = b'{"id": "b", "answer": "caf' + "é".encode()[:1]  # cut inside a character
    path.write_bytes(good + b"\n" + torn)
    assert list(read_records(path)) == ["a"]
    assert path.read_bytes() == good + b"\n"
    path.write_bytes(b"not json\n" + good + b"\n")
    with pytest.raises(InvalidInputError, match="line 1: not a record"):
        read_records(path)
