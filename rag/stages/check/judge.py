"""The judge: a second reading of an answer by a model asked only whether it is right.

The judge model (``RAGGUARD_JUDGE_MODEL``; by default the generator itself when it is
Qwen2.5-Coder-1.5B) is shown the passages the answer rests on, then the question and the
proposed answer, and asked whether the answer is correct and supported; the signal is its
P(yes) / (P(yes) + P(no)) at the first reply token (``YesNoReader``). Passages come first so
that judgements of one question share their KV prefix. It runs as a cascade
(``Judge.should_judge``): only answers whose first-stage confidence falls in an uncertain band
are judged, so confident answers cost nothing extra.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from engine import EngineClient, ModelLoadError, ModelNotFoundError, build_engine_client
from rag.citations import attribute
from rag.errors import InvalidInputError
from rag.stages.check.verification import YesNoReader
from rag.types import Passage

if TYPE_CHECKING:
    from rag.settings import Settings
    from rag.stages.check.checker import AnswerChecker

logger = logging.getLogger(__name__)

JudgePassages = Literal["cited", "all"]
JUDGE_SYSTEM_PROMPT = (
    "You are a careful fact checker. You decide whether a proposed answer to a question is "
    "correct and fully supported by the given passages."
)
JUDGE_QUESTION = "Is the proposed answer correct and supported by the passages? Reply yes or no."


Numbered = list[tuple[int, Passage]]
"""Passages with the numbers the answer's prompt gave them (the numbers its citations use)."""


def judged_passages(answer: str, passages: Sequence[Passage], which: JudgePassages) -> Numbered:
    """The passages the judge reads, with their numbers in the answer's prompt: those the answer
    cites (explicitly, else by word overlap), in that order; all of them when it cites none or
    ``which`` is "all". Keeping the numbers keeps the answer's "[3]" pointing at passage 3."""
    numbered = list(enumerate(passages, start=1))
    if which == "cited":
        cited = {c.number for c in attribute(answer, list(passages))}
        chosen = [(n, p) for n, p in numbered if n in cited]
        if chosen:
            return chosen
    return numbered


def judge_messages(question: str, passages: Numbered, answer: str) -> list[dict[str, str]]:
    """The judge's conversation: the passages first (a prefix shared by every judgement of the
    question that reads the same passages), then the question, the proposed answer and the
    yes/no question."""
    shown = "\n\n".join(f"[{n}] {p.text.strip()}" for n, p in passages)
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Passages:\n{shown}\n\nQuestion: {question.strip()}\n"
            f"Proposed answer: {answer.strip()}\n\n{JUDGE_QUESTION}",
        },
    ]


@dataclass(frozen=True, slots=True)
class JudgeBand:
    """Judge an answer only when its first-stage confidence is within [low, high]."""

    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError(f"the judge band needs 0 <= low <= high <= 1, got {self}")

    def contains(self, confidence: float) -> bool:
        return self.low <= confidence <= self.high


class Judge:
    """P(yes) that an answer is correct and supported, asked of a judge model."""

    def __init__(
        self,
        engine: EngineClient,
        *,
        band: JudgeBand | None = None,
        passages: JudgePassages = "cited",
    ):
        self.engine = engine
        self.reader = YesNoReader(engine)
        self.band = band or JudgeBand()
        self.passages = passages

    def should_judge(self, confidence: float) -> bool:
        """The cascade: is this first-stage confidence uncertain enough to ask the judge?"""
        return self.band.contains(confidence)

    def prompt(self, question: str, passages: Sequence[Passage], answer: str) -> str:
        shown = judged_passages(answer, passages, self.passages)
        return self.engine.apply_chat_template(judge_messages(question, shown, answer))

    async def score(
        self,
        question: str,
        passages: Sequence[Passage],
        answer: str,
        request_id: str | None = None,
    ) -> float | None:
        """The judge's P(yes); None when it gave neither yes nor no any weight."""
        return await self.reader.p_yes(self.prompt(question, passages, answer), request_id)


def build_judge(
    settings: Settings,
    generator: EngineClient,
    checker: AnswerChecker | None,
    judge_engine: EngineClient | None = None,
) -> tuple[Judge | None, EngineClient | None]:
    """The judge cascade the settings ask for (None when off, or when the guard 'judge' is not
    among the checker's), and the judge engine loaded for it, which the caller shuts down (None
    when it judges on ``generator`` or on the given ``judge_engine``)."""
    model = settings.resolved_judge_model()
    if model is None or checker is None or not checker.has_judge_guard:
        return None, None
    owned = None
    if model == "generator":
        engine = generator
        if engine.tokenizer is None:  # a remote generator without a local tokenizer
            message = (
                f"the generator ({type(engine).__name__}) exposes no tokenizer, so it cannot "
                "judge (set RAGGUARD_GENERATOR_TOKENIZER, or name a local RAGGUARD_JUDGE_MODEL)"
            )
            if settings.guards.judge_model:
                raise InvalidInputError(message)
            logger.warning("%s: the judge is off", message)
            return None, None
    elif judge_engine is not None:
        engine = judge_engine
    else:
        config = replace(
            settings.engine.engine_config(),
            model=model,
            quantization=settings.guards.judge_quantization,
            speculative=None,
            max_model_len=None,
        )
        try:
            engine = owned = build_engine_client(config, "engine")
        except (ModelNotFoundError, ModelLoadError) as exc:
            raise type(exc)(f"{exc} [settings: RAGGUARD_JUDGE_MODEL]") from exc
    try:
        band = JudgeBand(*checker.judge_band(settings))
        return Judge(engine, band=band, passages=settings.guards.judge_passages), owned
    except ValueError as exc:
        if owned is not None:
            owned.shutdown()
        raise InvalidInputError(f"the judge cannot start: {exc}") from exc
