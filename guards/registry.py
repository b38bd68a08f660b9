"""The guard registry: each guard registers a factory under its name; settings pick the names.

A new guard plugs in with its own file and one ``register_guard`` call: the checker builds it
from the configured names, its declared signals reach the confidence model through
``GuardResult.signals``, and its verdicts reach the API, with no other file edited.

    @register_guard("my_check")
    def _build(deps: GuardDeps) -> Guard | None:
        return MyCheck(deps.embedder)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from guards.alignment import AnswerEvidenceGuard
from guards.base import Guard
from guards.confidence import GENERATOR_SIGNALS
from guards.conflict import EvidenceConflictGuard
from guards.consistency import SelfConsistencyGuard
from guards.embedder import Embedder
from guards.grounding import GroundingGuard
from guards.judge import JudgeGuard
from guards.kg import KnowledgeGraph
from guards.kg_guard import KnowledgeGraphGuard
from guards.repetition import RepetitionGuard
from guards.verification import SelfVerificationGuard


@dataclass(frozen=True, slots=True)
class GuardDeps:
    """What a guard factory may use: the embedder and the knowledge graph, when there are."""

    embedder: Embedder | None = None
    graph: KnowledgeGraph | None = None


GuardFactory = Callable[[GuardDeps], Guard | None]
"""Builds a guard, or returns None when what it needs is missing (no graph: no graph check)."""

_FACTORIES: dict[str, GuardFactory] = {}


class UnknownGuardError(ValueError):
    """A configured guard name that no factory is registered under."""


def register_guard(name: str) -> Callable[[GuardFactory], GuardFactory]:
    """Decorator: register ``factory`` under ``name`` (a later registration replaces it)."""

    def decorate(factory: GuardFactory) -> GuardFactory:
        _FACTORIES[name] = factory
        return factory

    return decorate


def unregister_guard(name: str) -> None:
    """Remove a registration (tests, plug-ins being unloaded); unknown names are ignored."""
    _FACTORIES.pop(name, None)


def registered_guards() -> list[str]:
    """Every registered name, in registration order (the default configuration runs all)."""
    return list(_FACTORIES)


def build_guards(names: Sequence[str] | None, deps: GuardDeps) -> list[Guard]:
    """The guards named (default: all registered), in that order, skipping those whose factory
    finds what it needs missing."""
    chosen = registered_guards() if names is None else list(names)
    unknown = [n for n in chosen if n not in _FACTORIES]
    if unknown:
        raise UnknownGuardError(
            f"unknown guard(s) {unknown}; registered: {', '.join(registered_guards())}"
        )
    guards = [_FACTORIES[n](deps) for n in chosen]
    return [g for g in guards if g is not None]


def signal_directions(guards: Sequence[Guard]) -> dict[str, int]:
    """Every signal these guards (and the generator) emit, with the way it should push."""
    return {**GENERATOR_SIGNALS, **{k: v for g in guards for k, v in g.signals.items()}}


register_guard("repetition")(lambda deps: RepetitionGuard())
register_guard("grounding")(lambda deps: GroundingGuard(deps.embedder))
register_guard("self_consistency")(lambda deps: SelfConsistencyGuard(deps.embedder))
register_guard("answer_evidence")(lambda deps: AnswerEvidenceGuard())
register_guard("evidence_conflict")(lambda deps: EvidenceConflictGuard())
register_guard("self_verification")(lambda deps: SelfVerificationGuard())
register_guard("judge")(lambda deps: JudgeGuard())
register_guard("knowledge_graph")(
    lambda deps: KnowledgeGraphGuard(deps.graph) if deps.graph is not None else None
)
