"""The evaluation JSONL format, configurations, and the built-in sets prepared from the shared
data (skipped when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.cli.eval import BUILTIN_NAMES
from rag.errors import InvalidInputError
from rag.eval.config import EvalConfig, load_config, load_configs
from rag.eval.items import DatasetFormatError, EvalItem, read_items, write_items
from rag.eval.prepare import BUILTIN, prepare

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"question": "q", "answers": ["a"]', "set.jsonl line 2: invalid JSON"),
        ('["not", "an", "object"]', "set.jsonl line 2: expected a JSON object"),
        ('{"answers": ["a"]}', "set.jsonl line 2: field 'question' must be a non-empty string"),
        (
            '{"question": "q", "answers": [1, 2]}',
            "set.jsonl line 2: field 'answers' must be a list of strings",
        ),
        (
            '{"question": "q", "gold_passage_ids": {"a": 1}}',
            "line 2: field 'gold_passage_ids' must be a list",
        ),
        (
            '{"question": "q", "answer_type": "number"}',
            "line 2: field 'answer_type' must be one of free, yes_no",
        ),
        ('{"question": "q", "label": 2, "answer": "a"}', "line 2: field 'label' must be 0 or 1"),
        (
            '{"question": "q", "label": 1}',
            "line 2: field 'answer' is required when 'label' is given",
        ),
        ('{"id": "one", "question": "again"}', "line 2: field 'id' repeats 'one' of line 1"),
    ],
)
def test_a_malformed_line_names_its_line_and_field(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    path = write(tmp_path, '{"id": "one", "question": "What?", "answers": ["this"]}', bad_line)
    with pytest.raises(DatasetFormatError, match=message.replace("[", r"\[")):
        read_items(path)


def test_items_round_trip_and_ids_default_to_the_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '{"question": " How tall? ", "answers": "330 metres"}',
        "",
        '{"id": 7, "question": "Right?", "label": 1, "answer": "yes", "passages": ["ctx"], "extra": 1}',
    )
    items = read_items(path)
    assert items[0] == EvalItem("line-1", "How tall?", ("330 metres",))
    assert items[1].id == "7" and items[1].is_labelled and items[1].passages == ("ctx",)
    write_items(items, tmp_path / "copy.jsonl")
    assert read_items(tmp_path / "copy.jsonl") == items
    with pytest.raises(DatasetFormatError, match="holds no items"):
        read_items(write(tmp_path, ""))


def test_configs_are_named_by_their_stem_and_checked(tmp_path: Path) -> None:
    (tmp_path / "n5.toml").write_text("num_candidates = 5\ntop_k = 8\n")
    config = load_config(tmp_path / "n5.toml")
    assert config == EvalConfig("n5", {"num_candidates": 5, "top_k": 8})
    settings = config.settings({"top_k": 3, "max_tokens": 10, "_env_file": None})
    assert (
        settings.retrieval.top_k,
        settings.guards.num_candidates,
        settings.generation.max_tokens,
    ) == (8, 5, 10)
    assert load_configs([]) == [EvalConfig("default")]

    (tmp_path / "typo.toml").write_text("top_kk = 3\n")
    with pytest.raises(InvalidInputError, match=r"unknown setting\(s\) top_kk; known: .*top_k"):
        load_config(tmp_path / "typo.toml")
    (tmp_path / "broken.toml").write_text("top_k = \n")
    with pytest.raises(InvalidInputError, match="broken.toml: invalid TOML"):
        load_config(tmp_path / "broken.toml")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "n5.toml").write_text("top_k = 2\n")
    with pytest.raises(InvalidInputError, match="must differ"):
        load_configs([tmp_path / "n5.toml", tmp_path / "a" / "n5.toml"])


@pytest.mark.skipif(not DATA.is_dir(), reason="the shared data sets are not present")
@pytest.mark.parametrize(
    ("name", "num_items", "kind"),
    [
        ("musique", 100, "free"),
        ("hotpotqa", 50, "free"),
        ("pubmedqa", 500, "yes_no"),
        ("rgb", 50, "free"),
        ("halueval", 600, "labelled"),
        ("halueval_ask", 300, "mixed"),
        ("metaqa", 4987, "free"),
    ],
)
def test_built_in_sets_have_gold_in_their_own_corpus(name: str, num_items: int, kind: str) -> None:
    prepared = prepare(name, DATA)
    assert len(prepared.items) == num_items
    doc_ids = {d.doc_id for d in prepared.documents}
    assert len(doc_ids) == len(prepared.documents)  # ids are unique
    for item in prepared.items:
        assert item.answers
        assert set(item.gold_passage_ids) <= doc_ids
        assert item.is_labelled == (kind == "labelled")
        if kind == "mixed":  # free answers and yes/no verdicts
            assert item.answer_type in ("free", "yes_no")
        else:
            assert item.answer_type == ("yes_no" if kind == "yes_no" else "free")
    if kind != "labelled":
        with_gold = sum(bool(i.gold_passage_ids) for i in prepared.items)
        assert with_gold >= 0.95 * num_items
    if name == "rgb":
        assert all(i.wrong_answers for i in prepared.items)
        kinds = {d.metadata["kind"] for d in prepared.documents}
        assert kinds == {"true", "counterfactual", "noise"}
    if name == "halueval_ask":  # the same questions as `halueval`, each with its own paragraph
        assert [i.question for i in prepared.items] == [
            i.question for i in prepare("halueval", DATA).items[::2]
        ]
        assert all(len(i.gold_passage_ids) == 1 for i in prepared.items)
        verdicts = [i for i in prepared.items if i.answer_type == "yes_no"]
        assert verdicts and all(i.answers[0] in ("yes", "no") for i in verdicts)
    if name == "metaqa":
        assert prepared.load_graph is not None
        assert "[" not in prepared.items[0].question
        assert any(d.doc_id.startswith("plot-") for d in prepared.documents)


def test_an_unknown_built_in_name_lists_the_known_ones(tmp_path: Path) -> None:
    assert tuple(BUILTIN) == BUILTIN_NAMES  # the command line's list, kept free of imports
    with pytest.raises(
        InvalidInputError, match="musique, hotpotqa, pubmedqa, metaqa, halueval, halueval_ask, rgb"
    ):
        prepare("squad", tmp_path)


@pytest.mark.skipif(not (DATA / "squad2").is_dir(), reason="the shared SQuAD 2.0 part is absent")
def test_squad2_mixes_answerable_and_unanswerable_questions_over_its_paragraphs() -> None:
    prepared = prepare("squad2", DATA)
    assert len(prepared.items) == 2828 and len(prepared.documents) == 301
    unanswerable = [i for i in prepared.items if not i.answerable]
    assert len(unanswerable) == 1529 and not any(i.answers for i in unanswerable)
    assert all(i.answers for i in prepared.items if i.answerable)
    doc_ids = {d.doc_id for d in prepared.documents}
    assert all(
        len(i.gold_passage_ids) == 1 and i.gold_passage_ids[0] in doc_ids for i in prepared.items
    )
    first = prepared.items[:100]  # shuffled: any --limit mixes both kinds
    assert 30 < sum(i.answerable for i in first) < 70


def test_an_unanswerable_item_is_right_only_when_declined(tmp_path: Path) -> None:
    from rag.eval.summary import answer_metrics, is_correct

    path = write(
        tmp_path,
        '{"id": "u", "question": "Who won in 1492?", "answerable": false}',
        '{"id": "a", "question": "Who won in 1789?", "answers": ["Ada"]}',
    )
    unanswerable, answerable = read_items(path)
    assert not unanswerable.answerable and unanswerable.to_dict()["answerable"] is False
    assert is_correct(unanswerable, "I don't know.") is True
    assert is_correct(unanswerable, "Who won is not mentioned in the passages.") is True
    assert is_correct(unanswerable, "Ada won [1].") is False
    assert is_correct(answerable, "Ada won [1].") is True
    metrics = answer_metrics(
        [(unanswerable, {"answer": "I don't know."}), (answerable, {"answer": "Bo won."})]
    )
    assert metrics is not None
    assert metrics["num_unanswerable"] == 1 and metrics["declined_unanswerable"] == 1.0
    assert metrics["accuracy"] == 0.5 and metrics["num_items"] == 2
    bad = write(tmp_path, '{"question": "q", "answerable": false, "answers": ["x"]}')
    with pytest.raises(DatasetFormatError, match="'answerable' false has no 'answers'"):
        read_items(bad)
