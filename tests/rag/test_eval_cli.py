"""``ragguard eval`` end to end with the real model on a tiny dataset and index: the figures
agree with a recomputation from the records, the report renders, an interrupted run resumes to
the same results, and bad input fails with a message that says what to do."""

from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rag.cli import main
from rag.eval.config import EvalConfig
from rag.eval.evaluation import evaluate

DOCS = {
    "tower.md": "# Tower\n\nThe Eiffel Tower is 330 metres tall and stands in Paris. It was completed in 1889.",
    "river.txt": "The Danube flows through ten countries before it reaches the Black Sea.",
    "moon.txt": "Apollo 11 landed on the Moon in July 1969; Neil Armstrong stepped out first.",
}
ITEMS: list[dict[str, Any]] = [  # as the dataset's JSON lines
    {
        "id": "tower",
        "question": "How tall is the Eiffel Tower?",
        "answers": ["330 metres"],
        "gold_passage_ids": ["tower.md"],
    },
    {
        "id": "river",
        "question": "Which sea does the Danube reach?",
        "answers": ["the Black Sea"],
        "gold_passage_ids": ["river.txt"],
    },
    {
        "id": "moon",
        "question": "Who stepped on the Moon first?",
        "answers": ["Neil Armstrong"],
        "gold_passages": ["Neil Armstrong stepped out first"],
    },
    {
        "id": "year",
        "question": "When was the Eiffel Tower completed?",
        "answers": ["1889"],
        "gold_passage_ids": ["tower.md", "moon.txt"],
    },
    {
        "id": "halu",
        "question": "How tall is the Eiffel Tower?",
        "answers": ["330 metres"],
        "label": 0,
        "answer": "It is 512 metres tall.",
        "passages": ["The Eiffel Tower is 330 metres tall."],
    },
]


@pytest.fixture
def workspace(tmp_path: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny index ``tiny`` under ``indexes/``, the dataset ``set.jsonl`` and a short config."""
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.documents import Document

    monkeypatch.chdir(tmp_path)  # no stray .env; default folders land here
    for name in [k for k in os.environ if k.startswith("RAGGUARD_")]:
        monkeypatch.delenv(name)
    registry = CollectionRegistry(tmp_path / "indexes", embedder)
    registry.get("tiny", create=True).ingest(Document(k, v) for k, v in DOCS.items())
    registry.close()
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    (tmp_path / "short.toml").write_text("max_tokens = 16\n")
    (tmp_path / "noguards.toml").write_text("max_tokens = 16\nguards_enabled = false\ntop_k = 2\n")
    return tmp_path


# An independent re-implementation of the answer metrics, to check the report's figures.
def norm(text: str) -> list[str]:
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return [w for w in text.split() if w not in ("a", "an", "the")]


def f1(pred: str, gold: str) -> float:
    p, g = norm(pred), norm(gold)
    common = sum((Counter(p) & Counter(g)).values())
    return 0.0 if not common else 2 * common / (len(p) + len(g))


def ece(conf: list[float], right: list[int]) -> float:
    bins: dict[int, list[int]] = {}
    for k, c in enumerate(conf):
        bins.setdefault(min(int(c * 10), 9), []).append(k)
    return sum(
        abs(sum(right[k] for k in ks) / len(ks) - sum(conf[k] for k in ks) / len(ks)) * len(ks)
        for ks in bins.values()
    ) / len(conf)


def auroc(conf: list[float], right: list[int]) -> float | None:
    pos = [c for c, r in zip(conf, right, strict=True) if r]
    neg = [c for c, r in zip(conf, right, strict=True) if not r]
    if not pos or not neg:
        return None
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def test_the_cli_writes_figures_that_match_the_records_and_a_report(workspace: Path) -> None:
    out = workspace / "out"
    argv = [
        "eval",
        "set.jsonl",
        "--index",
        "tiny",
        "--config",
        "short.toml",
        "--config",
        "noguards.toml",
        "--out",
        str(out),
        "--threads",
        "2",
        "--quiet",
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert [c["name"] for c in results["configs"]] == ["short", "noguards"]
    assert results["dataset"]["num_items"] == 5 and results["index"]["num_documents"] == 3
    assert results["versions"]["model"] and results["configs"][1]["settings"]["top_k"] == 2
    assert "review_db" not in results["configs"][0]["settings"]

    for config in results["configs"]:
        m = config["metrics"]
        records = {
            r["id"]: r
            for r in map(
                json.loads, (out / config["name"] / "items.jsonl").read_text().splitlines()
            )
        }
        assert set(records) == {i["id"] for i in ITEMS}
        free = [i for i in ITEMS if "label" not in i]
        answers = [records[i["id"]]["answer"] for i in free]
        em = [
            any(norm(a) == norm(g) for g in i["answers"])
            for a, i in zip(answers, free, strict=True)
        ]
        f1s = [max(f1(a, g) for g in i["answers"]) for a, i in zip(answers, free, strict=True)]
        contains = [
            any(f" {' '.join(norm(g))} " in f" {' '.join(norm(a))} " for g in i["answers"])
            for a, i in zip(answers, free, strict=True)
        ]
        right = [int(c or f >= 0.6) for c, f in zip(contains, f1s, strict=True)]
        assert m["answers"]["exact_match"] == pytest.approx(sum(em) / 4)
        assert m["answers"]["token_f1"] == pytest.approx(sum(f1s) / 4)
        assert m["answers"]["contains_gold"] == pytest.approx(sum(contains) / 4)
        assert m["answers"]["accuracy"] == pytest.approx(sum(right) / 4)

        ranks = [records[i["id"]]["gold_ranks"] for i in free]
        assert ranks[0] == [1] and ranks[2] == [1]  # the tower and the moon passages come first
        for k in (1, 3):
            expected = sum(sum(r is not None and r <= k for r in g) / len(g) for g in ranks) / 4
            assert m["retrieval"][f"recall@{k}"] == pytest.approx(expected)
        mrr = sum(1 / min(r for r in g if r) if any(g) else 0 for g in ranks) / 4
        assert m["retrieval"]["mrr@10"] == pytest.approx(mrr)

        conf = [records[i["id"]]["confidence"] for i in free]
        if config["name"] == "noguards":
            assert m["confidence"] is None and m["guards"] == {} and conf == [None] * 4
            assert records["halu"]["confidence"] is None
            continue
        assert m["confidence"]["ece"] == pytest.approx(ece(conf, right))
        assert m["confidence"]["auroc"] == (
            pytest.approx(auroc(conf, right)) if auroc(conf, right) is not None else None
        )
        assert set(m["guards"]) >= {"grounding", "repetition"}
        assert (
            records["halu"]["answer"] == "It is 512 metres tall." and "usage" not in records["halu"]
        )
        assert m["labelled"]["num_items"] == 1

    assert (out / "summary.md").read_text().startswith("**set**: 5 items, `ragguard eval set.jsonl")
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4
    assert "Worst failures" in page and "<th>noguards</th>" in page
    wrong = [f["question"] for c in results["configs"] for f in c["metrics"]["failures"]]
    assert all(q.replace("'", "&#x27;") in page for q in wrong)


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items() if k != "timings"}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def test_an_interrupted_run_resumes_to_the_same_results(
    workspace: Path, embedder: Any, llm_engine: Any
) -> None:
    config = [EvalConfig("short", {"max_tokens": 16})]
    common: dict[str, Any] = {
        "index": "tiny",
        "configs": config,
        "threads": 1,
        "show_progress": False,
        "embedder": embedder,
        "generator": llm_engine,
    }
    whole = evaluate(Path("set.jsonl"), workspace / "whole", **common)

    part = evaluate(Path("set.jsonl"), workspace / "part", stop_after=2, **common)
    assert part["configs"][0]["metrics"]["counts"]["done"] == 2
    items_file = workspace / "part" / "short" / "items.jsonl"
    with items_file.open("a") as f:  # killed while writing the third record
        f.write('{"id": "moon", "position": 2, "answ')
    resumed = evaluate(Path("set.jsonl"), workspace / "part", **common)

    def stable(results: dict[str, Any]) -> Any:
        """The figures without the timings, floats rounded (a prefix-cache hit may move the
        last bits of a logprob)."""
        metrics = dict(results["configs"][0]["metrics"])
        metrics.pop("latency")
        return rounded(metrics)

    assert stable(resumed) == stable(whole)
    assert len(items_file.read_text().splitlines()) == len(ITEMS)
    sessions = json.loads((workspace / "part" / "short" / "run.json").read_text())["sessions"]
    assert [s["num_items"] for s in sessions] == [2, 3]

    with pytest.raises(ValueError, match="another dataset, configuration.*--restart"):
        evaluate(
            Path("set.jsonl"),
            workspace / "part",
            **common | {"configs": [EvalConfig("short", {"max_tokens": 8})]},
        )


def test_retry_errors_asks_again_only_the_items_without_an_answer(
    workspace: Path, embedder: Any, llm_engine: Any
) -> None:
    """A record that holds an error (a deadline missed under load) stays on a plain resume; with
    ``retry_errors`` that item alone is asked again, its new record appended and counted."""
    common: dict[str, Any] = {
        "index": "tiny",
        "configs": [EvalConfig("short", {"max_tokens": 16})],
        "threads": 1,
        "show_progress": False,
        "embedder": embedder,
        "generator": llm_engine,
    }
    whole = evaluate(Path("set.jsonl"), workspace / "run", **common)
    items_file = workspace / "run" / "short" / "items.jsonl"
    lines = items_file.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    failed = next(k for k, r in enumerate(records) if r["id"] == "river")
    error = "no answer within the 300 s deadline; the generation was stopped"
    lines[failed] = json.dumps({"id": "river", "position": failed, "error": error})
    items_file.write_text("".join(line + "\n" for line in lines))

    again = evaluate(Path("set.jsonl"), workspace / "run", **common)
    assert again["configs"][0]["metrics"]["counts"]["errors"] == 1
    assert len(items_file.read_text().splitlines()) == len(ITEMS)

    retried = evaluate(Path("set.jsonl"), workspace / "run", retry_errors=True, **common)
    counts = retried["configs"][0]["metrics"]["counts"]
    assert counts["errors"] == 0 and counts == whole["configs"][0]["metrics"]["counts"]
    after = [json.loads(line) for line in items_file.read_text().splitlines()]
    assert len(after) == len(ITEMS) + 1  # the failed record kept, the new one appended
    assert after[-1]["id"] == "river" and "answer" in after[-1]
    sessions = json.loads((workspace / "run" / "short" / "run.json").read_text())["sessions"]
    assert [s["num_items"] for s in sessions] == [len(ITEMS), 0, 1]


def test_a_dataset_without_gold_answers_runs(
    workspace: Path, embedder: Any, llm_engine: Any
) -> None:
    (workspace / "open.jsonl").write_text(
        '{"question": "How tall is the Eiffel Tower?"}\n{"question": "Where is the Danube?"}\n'
    )
    results = evaluate(
        Path("open.jsonl"),
        workspace / "open",
        index="tiny",
        configs=[EvalConfig("short", {"max_tokens": 8})],
        threads=2,
        show_progress=False,
        embedder=embedder,
        generator=llm_engine,
    )
    m = results["configs"][0]["metrics"]
    assert m["answers"] is None and m["retrieval"] is None and m["confidence"] is None
    assert m["decisions"]["num_items"] == 2 and m["latency"]["total_s"]["p50"] > 0
    assert "Worst failures" in (workspace / "open" / "report.html").read_text()


def test_bad_input_fails_with_what_to_do(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "set.jsonl", "--index", "nope", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "index 'nope' does not exist" in err and "`ragguard ingest PATH --index nope`" in err
    (workspace / "bad.jsonl").write_text('{"question": "q"}\n{"question": "q2", "answers": 5}\n')
    assert main(["eval", "bad.jsonl", "--index", "tiny", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"bad.jsonl line 2: field 'answers' must be a list of strings", err)
    (workspace / "ghost.toml").write_text('index_name = "ghost"\n')
    assert main(["eval", "set.jsonl", "--config", "ghost.toml", "--out", "x"]) == 2
    assert "index 'ghost' does not exist" in capsys.readouterr().err
    (workspace / "odd.toml").write_text("abstain_below = 0.8\nreview_below = 0.5\n")
    assert (
        main(
            [
                "eval",
                "set.jsonl",
                "--index",
                "tiny",
                "--config",
                "short.toml",
                "--config",
                "odd.toml",
                "--out",
                "x",
            ]
        )
        == 2
    )
    assert "configuration odd: need 0 <= abstain_below <= review_below" in capsys.readouterr().err
    (workspace / "zero.toml").write_text("top_k = 0\n")
    assert (
        main(["eval", "set.jsonl", "--index", "tiny", "--config", "zero.toml", "--out", "x"]) == 2
    )
    assert "top_k: Input should be greater than or equal to 1" in capsys.readouterr().err
    assert main(["eval", "squad", "--out", "x"]) == 2
    assert "neither a JSONL file nor a built-in set" in capsys.readouterr().err
    assert main(["eval", "set.jsonl", "--index", "tiny", "--out", "x", "--limit", "0"]) == 2
    assert not (workspace / "x").exists()


def fake_metaqa(root: Path) -> Path:
    """The MetaQA layout in miniature: a graph of three movies, their plots, two questions."""
    kb = root / "metaqa_wikimovies" / "kb"
    kb.mkdir(parents=True)
    (kb / "kb_reconstructed.txt").write_text(
        "Kismet|directed_by|William Dieterle\nKismet|release_year|1944\n"
        "Blade Runner|directed_by|Ridley Scott\nBlade Runner|starred_actors|Harrison Ford\n"
        "Alien|directed_by|Ridley Scott\nAlien|release_year|1979\n"
    )
    corpus = root / "metaqa_wikimovies" / "corpus"
    corpus.mkdir()
    plots = [("plot-0", "Kismet", "a beggar schemes to marry his daughter to royalty in baghdad")]
    (corpus / "omdb_plots.jsonl").write_text(
        "".join(
            json.dumps({"doc_id": d, "kb_movie_entities": [m], "text": t}) + "\n"
            for d, m, t in plots
        )
    )
    qa = root / "metaqa_wikimovies" / "qa"
    qa.mkdir()
    questions = [
        {
            "id": "q0",
            "question": "who directed [Kismet]",
            "topic_entity": "Kismet",
            "answers": ["William Dieterle"],
            "implied_triples": [["Kismet", "directed_by", "William Dieterle"]],
            "kb_supported": True,
        },
        {
            "id": "q1",
            "question": "when was [Alien] released",
            "topic_entity": "Alien",
            "answers": ["1979"],
            "implied_triples": [["Alien", "release_year", "1979"]],
            "kb_supported": True,
        },
        {
            "id": "q2",
            "question": "who wrote [Nothing]",
            "topic_entity": "Nothing",
            "answers": ["x"],
            "kb_supported": False,
        },
    ]
    (qa / "metaqa_1hop_test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return root


def test_a_built_in_set_builds_its_index_and_checks_against_its_graph(
    workspace: Path, embedder: Any, llm_engine: Any
) -> None:
    data = fake_metaqa(workspace / "data")
    common: dict[str, Any] = {
        "data_dir": data,
        "configs": [EvalConfig("short", {"max_tokens": 12})],
        "show_progress": False,
        "embedder": embedder,
        "generator": llm_engine,
    }
    results = evaluate("metaqa", workspace / "runs", **common)
    assert results["index"]["name"] == "metaqa" and results["index"]["num_documents"] == 4
    m = results["configs"][0]["metrics"]
    assert m["counts"]["items"] == 2  # the question the graph cannot support is left out
    assert m["retrieval"]["recall@10"] == 1.0
    assert "knowledge_graph" in m["guards"]
    exported = (workspace / "runs" / "dataset.jsonl").read_text().splitlines()
    assert [json.loads(line)["gold_passage_ids"] for line in exported] in (
        [["Kismet"], ["Alien"]],
        [["Alien"], ["Kismet"]],
    )
    # the exported items re-run as a file against the index the first run built
    again = evaluate(
        workspace / "runs" / "dataset.jsonl", workspace / "again", index="metaqa", **common
    )
    assert again["configs"][0]["metrics"]["retrieval"] == m["retrieval"]
