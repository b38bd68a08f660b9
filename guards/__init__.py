"""ragguard's checks on generated answers (and, as they land, the decision policy and the human
review queue). This package stands alone: it never imports ``rag``."""

from guards.base import (
    Candidate,
    Guard,
    GuardChain,
    GuardContext,
    GuardPassage,
    GuardResult,
    GuardRun,
    Outcome,
)
from guards.claims import check_answer, extract_claims
from guards.confidence import ConfidenceModel, expected_calibration_error, features
from guards.consistency import SelfConsistencyGuard, cluster_answers
from guards.embedder import Embedder
from guards.grounding import GroundingGuard
from guards.kg import Claim, ClaimCheck, ClaimVerdict, KnowledgeGraph
from guards.kg_guard import KnowledgeGraphGuard
from guards.policy import Action, Decision, Policy
from guards.repetition import LoopStop, RepetitionGuard, is_looping

__all__ = [
    "Action",
    "Candidate",
    "Claim",
    "ClaimCheck",
    "ClaimVerdict",
    "ConfidenceModel",
    "Decision",
    "Embedder",
    "GroundingGuard",
    "Guard",
    "GuardChain",
    "GuardContext",
    "GuardPassage",
    "GuardResult",
    "GuardRun",
    "KnowledgeGraph",
    "KnowledgeGraphGuard",
    "LoopStop",
    "Outcome",
    "Policy",
    "RepetitionGuard",
    "SelfConsistencyGuard",
    "check_answer",
    "cluster_answers",
    "expected_calibration_error",
    "extract_claims",
    "features",
    "is_looping",
]
