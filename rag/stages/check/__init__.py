"""The check stage (``CheckStage``, ``stage``): self-verification (``verification``), the guards
and the confidence (``checker``), and the judge's second reading (``judge``)."""

from rag.stages.check.checker import (
    AnswerChecker,
    Checked,
    candidate,
    finish_reason,
    shipped_confidence_path,
)
from rag.stages.check.judge import Judge, JudgeBand, build_judge
from rag.stages.check.stage import Check, CheckStage
from rag.stages.check.verification import SelfVerifier, YesNoReader

__all__ = [
    "AnswerChecker",
    "Check",
    "CheckStage",
    "Checked",
    "Judge",
    "JudgeBand",
    "SelfVerifier",
    "YesNoReader",
    "build_judge",
    "candidate",
    "finish_reason",
    "shipped_confidence_path",
]
