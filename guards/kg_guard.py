"""The knowledge-graph guard: the answer's claims about the question's entities, judged against
the graph (``guards.kg``, ``guards.claims``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, ClassVar

from guards.base import Guard, GuardContext, GuardResult, Outcome
from guards.claims import check_answer
from guards.kg import ClaimVerdict, KnowledgeGraph


class KnowledgeGraphGuard(Guard):
    """FAIL when the answer contradicts the graph, PASS when the graph supports its claims,
    ABSTAIN when the graph cannot judge it (no claims, or only claims it does not hold)."""

    name = "knowledge_graph"
    signals: ClassVar[Mapping[str, int]] = {
        "kg_supported": 1,
        "kg_contradicted": -1,
        "kg_off_topic": -1,
    }

    def __init__(self, graph: KnowledgeGraph):
        self.graph = graph

    def check(self, ctx: GuardContext) -> GuardResult:
        if not ctx.answer.strip():
            return self.abstain("the answer is empty")
        checks = check_answer(self.graph, ctx.answer, ctx.question)
        evidence: dict[str, Any] = {
            "claims": [
                {**asdict(c.claim), "verdict": c.verdict.value, "graph_says": list(c.known_objects)}
                for c in checks
            ]
        }
        # A true fact about another entity than the question's is no support for the answer
        # ("asked for one film's year, gave another film's"): claims must touch the topic.
        topic = {m.node for m in self.graph.link(ctx.question)}
        on_topic = [
            c for c in checks if not topic or c.claim.subject in topic or c.claim.object in topic
        ]
        supported = sum(c.verdict is ClaimVerdict.SUPPORTED for c in on_topic)
        contradicted = [c for c in on_topic if c.verdict is ClaimVerdict.CONTRADICTED]
        evidence["question_entities"] = sorted(topic)
        judged = supported + len(contradicted)
        if contradicted:
            first = contradicted[0]
            reason = (
                f"the graph says {first.claim.subject} {first.claim.relation.replace('_', ' ')} "
                f"{', '.join(first.known_objects)}, not {first.claim.object}"
            )
            return GuardResult(
                self.name,
                Outcome.FAIL,
                supported / judged,
                reason,
                evidence,
                {"kg_supported": 0.0, "kg_contradicted": 1.0, "kg_off_topic": 0.0},
            )
        if supported:
            return GuardResult(
                self.name,
                Outcome.PASS,
                1.0,
                f"{supported} claim(s) supported by the graph",
                evidence,
                {"kg_supported": 1.0, "kg_contradicted": 0.0, "kg_off_topic": 0.0},
            )
        if any(c.verdict is not ClaimVerdict.UNKNOWN for c in checks):
            return GuardResult(
                self.name,
                Outcome.ABSTAIN,
                None,
                "the graph judges only claims about other entities than the question's",
                evidence,
                {"kg_off_topic": 1.0},
            )
        if checks:
            return self.abstain(
                "the graph holds none of the answer's claims (unknown is not false)", **evidence
            )
        return self.abstain("no claim in the answer that the graph can judge")
