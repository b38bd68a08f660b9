"""ragguard's checks on generated answers (and, as they land, the decision policy and the human
review queue). This package stands alone: it never imports ``rag``."""

from guards.base import (
    Candidate,
    Evidence,
    Guard,
    GuardChain,
    GuardContext,
    GuardResult,
    GuardRun,
    Outcome,
)
from guards.consistency import SelfConsistencyGuard, cluster_answers
from guards.embedder import Embedder
from guards.grounding import GroundingGuard
from guards.kg import Claim, ClaimCheck, KnowledgeGraph, KnowledgeGraphGuard, Verdict
from guards.repetition import RepetitionGuard, is_looping

__all__ = [
    "Candidate",
    "Claim",
    "ClaimCheck",
    "Embedder",
    "Evidence",
    "GroundingGuard",
    "Guard",
    "GuardChain",
    "GuardContext",
    "GuardResult",
    "GuardRun",
    "KnowledgeGraph",
    "KnowledgeGraphGuard",
    "Outcome",
    "RepetitionGuard",
    "SelfConsistencyGuard",
    "Verdict",
    "cluster_answers",
    "is_looping",
]
