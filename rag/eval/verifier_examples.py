"""The verifier's (``guards.verifier``) training examples, from development data only.

* **generated**: the answers of labelled ``ragguard eval`` runs (the answer and every extra
  sample), labelled by the eval's own matching: the distribution the verifier will judge;
* **gold**: for questions of the built-in sets, the gold answer (right, kept only when the
  retrieved passages state it: a right answer nothing retrieved supports is not something a
  reader of the passages can check, and such examples measured as noise) and wrong ones of the
  same kind: one taken from another question of the set (e.g. another film's year), one *read
  from the passages themselves* (another name or number the passages hold: the wrong answer a
  reader of the passages is tempted by), or for yes/no sets the other verdict; RGB's
  counterfactual answer is a wrong one too. Their passages are retrieved from the set's index as
  the pipeline would.

Training on them is ``rag.eval.verifier_training``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from guards.answers import (
    QuestionKind,
    answer_core,
    is_declined,
    question_kind,
)
from guards.text import normalize, sentences
from guards.verifier import (
    evidence_window,
)
from rag.atomic import atomic_write_bytes
from rag.eval.items import EvalItem
from rag.eval.summary import is_correct
from rag.eval.training import LabelledAnswer


@dataclass(frozen=True, slots=True)
class VerifierExample:
    """One (question, answer, passages) with whether the answer is right."""

    dataset: str
    group: str
    """The question's id within its set: cross-fitting folds never split a question."""
    question: str
    answer: str
    passages: tuple[str, ...]
    label: int
    source: str
    """"generated" (a recorded answer) or "gold" (a gold answer or a made-up wrong one)."""


def fold_of(dataset: str, group: str, folds: int) -> int:
    """A question's fold: a stable hash of its set and id."""
    digest = hashlib.sha256(f"{dataset}\x00{group}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % folds


def generated_examples(answers: Sequence[LabelledAnswer]) -> list[VerifierExample]:
    """Every recorded answer and extra sample, labelled by the eval's matching (declined and
    empty answers are left out: the verifier is not asked about them)."""
    out = []
    for a in answers:
        passages = tuple(p["text"] for p in a.record["passages"])
        texts = [a.answer] + [s["text"] for s in a.record["samples"][1:]]
        for text in dict.fromkeys(t.strip() for t in texts):
            label = is_correct(a.item, text)
            if label is None or is_declined(text):
                continue
            out.append(
                VerifierExample(
                    a.dataset, a.item.id, a.item.question, text, passages, int(label), "generated"
                )
            )
    return out


_YES_NO = ("yes", "no", "maybe")


def _phrasings(answer: str, rng: random.Random) -> str:
    """A gold or wrong answer written the ways the generator writes its answers."""
    return rng.choice((answer, f"{answer}.", f"The answer is: {answer}."))


def gold_examples(
    dataset: str,
    items: Sequence[EvalItem],
    passages_of: Callable[[EvalItem], Sequence[str]],
    *,
    seed: int = 0,
) -> list[VerifierExample]:
    """For each item: its gold answer (right) and a wrong answer of the same kind (another
    item's gold answer, preferring one whose question opens with the same words; the other
    verdicts for yes/no items; the known wrong answers, such as RGB's counterfactual)."""
    rng = random.Random(f"{dataset}:{seed}")
    by_opening: dict[tuple[str, ...], list[EvalItem]] = {}
    by_kind: dict[QuestionKind, list[EvalItem]] = {}
    for item in items:
        if item.answers:
            by_opening.setdefault(tuple(item.question.casefold().split()[:3]), []).append(item)
            by_kind.setdefault(question_kind(item.question), []).append(item)
    out = []
    for item in items:
        if not item.answers:
            continue
        passages = tuple(passages_of(item))
        right = item.answers[0]
        if item.answer_type == "yes_no":
            wrongs = [rng.choice([v for v in _YES_NO if v != right.casefold()]).capitalize()]
        else:
            gold = {a.casefold() for a in item.answers}
            pool = by_opening.get(tuple(item.question.casefold().split()[:3]), [])
            pool = [o for o in pool if o.id != item.id and o.answers[0].casefold() not in gold]
            if not pool:
                pool = [
                    o
                    for o in by_kind.get(question_kind(item.question), [])
                    if o.id != item.id and o.answers[0].casefold() not in gold
                ]
            wrongs = [rng.choice(pool).answers[0]] if pool else []
            wrongs += misreadings(item, passages, rng)
            wrongs += list(item.wrong_answers)
        for text, label in [(right, 1)] + [(w, 0) for w in wrongs]:
            answer = _phrasings(text, rng)
            if is_correct(item, answer) != bool(label):
                continue  # a "wrong" answer the eval would count as right: not a negative
            if label and item.answer_type == "free" and not _in_evidence(item, answer, passages):
                continue  # right, but nothing retrieved says so: nothing a reader could check
            out.append(
                VerifierExample(dataset, item.id, item.question, answer, passages, label, "gold")
            )
    return out


_SPAN = re.compile(
    r"\b(?:\d[\d,.]*\d|\d)\b"  # a number or year
    r"|\b[A-Z][\w'.-]*(?:\s+(?:(?:of|the|de|von|van)\s+)*[A-Z][\w'.-]*){0,4}"  # a name
)
_SPAN_STOP = frozenset(
    {"the", "a", "an", "in", "on", "it", "he", "she", "they", "this", "that", "his", "her", "its"}
)


def passage_spans(text: str) -> list[str]:
    """The names and numbers ``text`` (a sentence) holds, in order, once each: the candidate
    answers a reader of the passage could give. One capitalised word opening the sentence is
    not taken for a name ("Starring", "Directed by"), nor is a capitalised stop word, nor an
    opening participle before a name ("Starring Tom Hanks" gives "Tom Hanks")."""
    found: dict[str, None] = {}
    opening = len(text) - len(text.lstrip())
    for match in _SPAN.finditer(text):
        span = match.group().strip(" .,'")
        if not span or span.casefold() in _SPAN_STOP:
            continue
        if match.start() == opening and not span[0].isdigit():
            first, _, rest = span.partition(" ")
            if not rest:
                continue
            if first.casefold() in _SPAN_STOP or first.endswith(("ing", "ed")):
                span = rest
        found.setdefault(span, None)
    return list(found)


def _same_shape(gold: str, span: str) -> bool:
    """A number for a number, a name for a name."""
    return any(c.isdigit() for c in gold) == any(c.isdigit() for c in span)


def misreadings(
    item: EvalItem, passages: Sequence[str], rng: random.Random, *, limit: int = 1
) -> list[str]:
    """Up to ``limit`` wrong answers of the gold answer's shape read from ``passages``:
    preferring the sentences that hold the gold answer (the spans beside the right one), never a
    span the eval would count as right or that overlaps a gold answer."""
    if item.answer_type != "free" or not item.answers:
        return []
    gold = item.answers[0]
    if not (gold[:1].isupper() or any(c.isdigit() for c in gold)):
        return []  # a lower-case answer (a genre, a tag): no span of its shape to take
    golds = [normalize(a) for a in item.answers]
    near: list[str] = []
    far: list[str] = []
    for passage in passages:
        for sentence in sentences(passage):
            holds_gold = any(f" {g} " in f" {normalize(sentence)} " for g in golds if g)
            for span in passage_spans(sentence):
                norm = normalize(span)
                if not norm or not _same_shape(gold, span) or is_correct(item, span):
                    continue
                if any(norm in g or g in norm for g in golds):
                    continue
                (near if holds_gold else far).append(span)
    pool = list(dict.fromkeys(near)) or list(dict.fromkeys(far))
    rng.shuffle(pool)
    return pool[:limit]


def _in_evidence(item: EvalItem, answer: str, passages: Sequence[str]) -> bool:
    window = f" {normalize(evidence_window(item.question, answer, passages))} "
    return f" {normalize(answer_core(answer))} " in window


def write_examples(examples: Sequence[VerifierExample], path: Path) -> None:
    """The examples as JSONL, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(asdict(e), ensure_ascii=False) + "\n" for e in examples)
    atomic_write_bytes(path, "".join(lines).encode())


def read_examples(path: Path) -> list[VerifierExample]:
    with path.open(encoding="utf-8") as lines:
        return [
            VerifierExample(**{**r, "passages": tuple(r["passages"])})
            for r in map(json.loads, lines)
        ]
