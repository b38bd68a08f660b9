"""The evaluation data format: one JSON object per line, read and written as ``EvalItem``.

Fields of a line (only ``question`` is required):

    id                 string; default "line-N"
    question           the question asked
    answers            gold answers (strings); empty or absent: the answer metrics are skipped
    answer_type        "free" (default: contains-gold, exact match, token F1) or "yes_no"
                       (right when the answer's yes / no / maybe is the first gold one)
    gold_passage_ids   ids of the documents that hold the evidence (retrieval recall, MRR)
    gold_passages      texts of the evidence, when ids are not known (a retrieved chunk that
                       contains, or is contained in, such a text counts as found)
    wrong_answers      answers known to be wrong (e.g. a counterfactual one): their rate is reported
    label              1 = ``answer`` is right, 0 = it is a hallucination: the item is not
                       generated; the guards check ``answer`` instead (HaluEval style)
    answer             the given answer of a labelled item
    passages           the context of a labelled item (strings); absent: retrieved from the index
    answerable         false: no passage holds an answer (SQuAD 2.0's unanswerable questions);
                       the right outcome is to decline, and any answer given is wrong

A malformed line raises ``DatasetFormatError`` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rag.errors import InvalidInputError

AnswerType = Literal["free", "yes_no"]
ANSWER_TYPES: tuple[AnswerType, ...] = ("free", "yes_no")
_LIST_FIELDS = ("answers", "gold_passage_ids", "gold_passages", "wrong_answers", "passages")


class DatasetFormatError(InvalidInputError):
    """A dataset line is not valid JSON or a field has the wrong type."""


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One question of an evaluation set, with what is known about its right answer."""

    id: str
    question: str
    answers: tuple[str, ...] = ()
    answer_type: AnswerType = "free"
    gold_passage_ids: tuple[str, ...] = ()
    gold_passages: tuple[str, ...] = ()
    wrong_answers: tuple[str, ...] = ()
    label: int | None = None
    answer: str | None = None
    passages: tuple[str, ...] = ()
    answerable: bool = True

    @property
    def is_labelled(self) -> bool:
        """A given answer with a right / hallucinated label: checked, not generated."""
        return self.label is not None

    @property
    def has_gold_passages(self) -> bool:
        return bool(self.gold_passage_ids or self.gold_passages)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this item, without empty optional fields."""
        record: dict[str, Any] = {"id": self.id, "question": self.question}
        for name in _LIST_FIELDS:
            if values := getattr(self, name):
                record[name] = list(values)
        if self.answer_type != "free":
            record["answer_type"] = self.answer_type
        if self.label is not None:
            record["label"] = self.label
        if self.answer is not None:
            record["answer"] = self.answer
        if not self.answerable:
            record["answerable"] = False
        return record


def _strings(value: Any, where: str, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DatasetFormatError(f"{where}: field '{name}' must be a list of strings")
    return tuple(value)


def parse_item(record: Any, where: str, default_id: str) -> EvalItem:
    """Validate one decoded line; ``where`` ("file line N") prefixes every error."""
    if not isinstance(record, dict):
        raise DatasetFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DatasetFormatError(f"{where}: field 'question' must be a non-empty string")
    answer_type = record.get("answer_type", "free")
    if answer_type not in ANSWER_TYPES:
        raise DatasetFormatError(
            f"{where}: field 'answer_type' must be one of {', '.join(ANSWER_TYPES)}, "
            f"got {answer_type!r}"
        )
    label = record.get("label")
    if label is not None and (isinstance(label, bool) or label not in (0, 1)):
        raise DatasetFormatError(f"{where}: field 'label' must be 0 or 1, got {label!r}")
    answer = record.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise DatasetFormatError(f"{where}: field 'answer' must be a string")
    if label is not None and answer is None:
        raise DatasetFormatError(f"{where}: field 'answer' is required when 'label' is given")
    answerable = record.get("answerable", True)
    if not isinstance(answerable, bool):
        raise DatasetFormatError(f"{where}: field 'answerable' must be true or false")
    if not answerable and record.get("answers"):
        raise DatasetFormatError(f"{where}: an item with 'answerable' false has no 'answers'")
    item_id = record.get("id", default_id)
    if not isinstance(item_id, str | int) or isinstance(item_id, bool):
        raise DatasetFormatError(f"{where}: field 'id' must be a string")
    lists = {name: _strings(record[name], where, name) for name in _LIST_FIELDS if name in record}
    return EvalItem(
        id=str(item_id),
        question=question.strip(),
        answer_type=answer_type,
        label=label,
        answer=answer,
        answerable=answerable,
        **lists,
    )


def read_items(path: Path) -> list[EvalItem]:
    """Every item of a JSONL dataset; ids must be unique."""
    if not path.is_file():
        raise InvalidInputError(f"dataset {path} does not exist")
    items: list[EvalItem] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(f"{where}: invalid JSON ({exc.msg})") from exc
            item = parse_item(record, where, f"line-{line_no}")
            if item.id in seen:
                raise DatasetFormatError(
                    f"{where}: field 'id' repeats {item.id!r} of line {seen[item.id]}"
                )
            seen[item.id] = line_no
            items.append(item)
    if not items:
        raise DatasetFormatError(f"{path.name}: the dataset holds no items")
    return items


def write_items(items: Iterable[EvalItem], path: Path) -> None:
    """Write items as JSONL (atomically: a temp file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)


def items_digest(items: Iterable[EvalItem]) -> str:
    """A hash of the items' content: a resumed run must continue on the same data."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps(item.to_dict(), sort_keys=True).encode())
    return digest.hexdigest()[:16]
