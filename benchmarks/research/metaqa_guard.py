"""The knowledge-graph guard on MetaQA, at two levels.

Claims (``run_metaqa_claims``): gold triples written as sentences with surface noise (case,
punctuation, a dropped leading "The") go through the guard's claim extraction and check; so do
corrupted ones (the object replaced by another value of the relation that the graph does not
hold for that subject), and paraphrases of both.

Answers (``run_metaqa_answers``): the default model answers 1-hop questions from the graph
rendered as text passages (one per movie); AUROC of the guard's verdict for answer correctness.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.research.end_to_end import ask_all
from benchmarks.research.guard_sets import (
    NOISE_KINDS,
    PARAPHRASES,
    SEED,
    TEMPLATES,
    Triple,
    claim_triples,
    movie_passages,
    noised,
    noisy,
    shuffled_questions,
)
from engine import Generator
from guards import ClaimCheck, ClaimVerdict, KnowledgeGraph, check_answer
from rag.eval.datasets import MetaQAQuestion
from rag.eval.metrics import answer_matches, auroc
from rag.pipeline import Pipeline
from rag.retrieval.embed import Embedder
from rag.settings import Settings
from rag.stages.check import AnswerChecker
from rag.types import Result

GraphTriple = tuple[str | None, str, str | None]
"""A triple as the graph names it (None: a name the graph does not know)."""
CLAIM_TARGETS = {
    "gold_supported": ">= 0.95 (and for each relation)",
    "corrupted_supported": "<= 0.02",
    "corrupted_functional_contradicted": ">= 0.9",
}
NUM_EXAMPLES = 5
NUM_PARAPHRASE_EXAMPLES = 20


def _per_relation() -> defaultdict[str, list[int]]:
    return defaultdict(lambda: [0, 0])


@dataclass(slots=True)
class ClaimCounts:
    """What the claim check found so far; ``[hits, total]`` pairs unless said otherwise."""

    gold: defaultdict[str, list[int]] = field(default_factory=_per_relation)
    gold_by_noise: defaultdict[str, list[int]] = field(default_factory=_per_relation)
    gold_from_questions: int = 0
    corrupted: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    functional: list[int] = field(default_factory=lambda: [0, 0])
    """Corrupted claims of a functional relation: [contradicted, total]."""
    paraphrase: defaultdict[str, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0, 0])
    )
    """[gold supported, total, corrupted supported]."""
    check_ms: list[float] = field(default_factory=list)
    misses: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    paraphrase_misses: list[str] = field(default_factory=list)


def _has(checks: Sequence[ClaimCheck], verdict: ClaimVerdict, claim: GraphTriple) -> bool:
    return any(
        c.verdict is verdict and (c.claim.subject, c.claim.relation, c.claim.object) == claim
        for c in checks
    )


def _supports_object(checks: Sequence[ClaimCheck], obj: str | None) -> bool:
    """Does some claim with object ``obj`` pass (whatever its subject and relation were read
    as)?"""
    return any(c.verdict is ClaimVerdict.SUPPORTED and c.claim.object == obj for c in checks)


def states(graph: KnowledgeGraph, text: str, claim: GraphTriple) -> bool:
    """Does the guard find ``claim`` in ``text`` and hold it supported by the graph?"""
    return _has(check_answer(graph, text), ClaimVerdict.SUPPORTED, claim)


def _check_gold(
    graph: KnowledgeGraph, text: str, claim: GraphTriple, kind: str, counts: ClaimCounts
) -> bool:
    relation = claim[1]
    started = time.perf_counter()
    checks = check_answer(graph, text)
    counts.check_ms.append((time.perf_counter() - started) * 1000)
    ok = _has(checks, ClaimVerdict.SUPPORTED, claim)
    counts.gold[relation][0] += ok
    counts.gold[relation][1] += 1
    counts.gold_by_noise[kind][0] += ok
    counts.gold_by_noise[kind][1] += 1
    if not ok and len(counts.misses[relation]) < NUM_EXAMPLES:
        counts.misses[relation].append(text)
    return ok


def _check_corrupted(
    graph: KnowledgeGraph, text: str, claim: GraphTriple, is_functional: bool, counts: ClaimCounts
) -> None:
    _, relation, wrong = claim
    checks = check_answer(graph, text)
    counts.corrupted[relation] += _supports_object(checks, wrong)
    if is_functional:
        counts.functional[1] += 1
        counts.functional[0] += _has(checks, ClaimVerdict.CONTRADICTED, claim)


def _check_paraphrase(
    graph: KnowledgeGraph, triple: Triple, gold: GraphTriple, wrong: str, rng: random.Random
) -> tuple[bool, bool, str]:
    """A paraphrase of the gold and of the corrupted claim: (gold supported, corrupted
    supported, the gold sentence)."""
    subject, _, obj = triple
    template = rng.choice(PARAPHRASES[triple[1]])
    name = noisy(subject, rng)
    text = template.format(s=name, o=obj)
    ok = states(graph, text, gold)
    corrupted = _supports_object(check_answer(graph, template.format(s=name, o=wrong)), wrong)
    return ok, corrupted, text


def check_triple(
    graph: KnowledgeGraph,
    triple: Triple,
    ranges: dict[str, list[str]],
    rngs: tuple[random.Random, random.Random],
    counts: ClaimCounts,
) -> bool:
    """The gold claim, a corrupted one and a paraphrase of both; ``rngs``: the main stream and
    the paraphrases' own. Returns whether the gold claim was supported."""
    rng, para_rng = rngs
    subject, relation, obj = triple
    s_node, o_node = graph.resolve(subject), graph.resolve(obj)
    kind = rng.choice(NOISE_KINDS)
    text = TEMPLATES[relation].format(s=noised(subject, kind), o=obj)
    ok = _check_gold(graph, text, (s_node, relation, o_node), kind, counts)
    known = graph.objects(s_node or "", relation)
    wrong = rng.choice(ranges[relation])
    while wrong in known:
        wrong = rng.choice(ranges[relation])
    text = TEMPLATES[relation].format(s=noisy(subject, rng), o=wrong)
    is_functional = relation in graph.functional_relations
    _check_corrupted(graph, text, (s_node, relation, wrong), is_functional, counts)
    para_ok, para_corrupted, para_text = _check_paraphrase(
        graph, triple, (s_node, relation, o_node), wrong, para_rng
    )
    counts.paraphrase[relation][0] += para_ok
    counts.paraphrase[relation][1] += 1
    counts.paraphrase[relation][2] += para_corrupted
    if not para_ok and len(counts.paraphrase_misses) < NUM_PARAPHRASE_EXAMPLES:
        counts.paraphrase_misses.append(para_text)
    return ok


def claim_figures(
    counts: ClaimCounts, num_from_questions: int, functional: Sequence[str]
) -> dict[str, Any]:
    """The ``metaqa_claims`` record of finished counts."""
    relations = sorted(counts.gold.items())
    n = sum(total for _, total in counts.gold.values())
    contradicted, num_functional = counts.functional
    return {
        "num_claims": n,
        "num_claims_from_questions": num_from_questions,
        "num_claims_by_relation": {r: tot for r, (_, tot) in relations},
        "gold_supported": sum(ok for ok, _ in counts.gold.values()) / n,
        "gold_supported_question_triples": counts.gold_from_questions / max(1, num_from_questions),
        "corrupted_supported": sum(counts.corrupted.values()) / n,
        "functional_relations": sorted(functional),
        "num_functional": num_functional,
        "corrupted_functional_contradicted": contradicted / max(1, num_functional),
        "gold_supported_by_relation": {r: ok / tot for r, (ok, tot) in relations},
        "corrupted_supported_by_relation": {
            r: counts.corrupted[r] / tot for r, (_, tot) in relations
        },
        "gold_supported_by_noise": {
            k: ok / tot for k, (ok, tot) in sorted(counts.gold_by_noise.items())
        },
        "paraphrase_gold_supported_by_relation": {
            r: ok / tot for r, (ok, tot, _) in sorted(counts.paraphrase.items())
        },
        "paraphrase_corrupted_supported": sum(c for _, _, c in counts.paraphrase.values()) / n,
        "check_ms_p50": float(np.percentile(counts.check_ms, 50)),
        "check_ms_p99": float(np.percentile(counts.check_ms, 99)),
        "unsupported_examples": dict(sorted(counts.misses.items())),
        "paraphrase_unsupported_examples": counts.paraphrase_misses,
        "targets": dict(CLAIM_TARGETS),
    }


def run_metaqa_claims(data_dir: Path, limit: int, graph: KnowledgeGraph) -> dict[str, Any]:
    """The ``metaqa_claims`` section: ``claim_triples`` written as claims and checked."""
    rng = random.Random(SEED)
    questions = shuffled_questions(data_dir, rng)
    gold = claim_triples(questions, graph, limit, random.Random(SEED + 1))
    para_rng = random.Random(SEED + 2)
    ranges = {r: sorted(graph.values(r)) for r in graph.relations}
    counts = ClaimCounts()
    for i, triple in enumerate(gold.triples):
        ok = check_triple(graph, triple, ranges, (rng, para_rng), counts)
        counts.gold_from_questions += ok and i < gold.num_from_questions
    return claim_figures(counts, gold.num_from_questions, sorted(graph.functional_relations))


def _mean_where(values: list[int], keys: list[float], key: float) -> float | None:
    chosen = [v for v, k in zip(values, keys, strict=True) if k == key]
    return float(np.mean(chosen)) if chosen else None


def answer_figures(questions: Sequence[MetaQAQuestion], asked: Sequence[Result]) -> dict[str, Any]:
    """The ``metaqa_answers`` record: accuracy, the guard's outcomes and their AUROC."""
    kg_scores: list[float] = []
    correct: list[int] = []
    outcomes: dict[str, int] = defaultdict(int)
    for q, result in zip(questions, asked, strict=True):
        if result.abstained:
            continue
        kg = next((g for g in result.guard_results if g.name == "knowledge_graph"), None)
        outcome = kg.outcome if kg else "abstain"
        outcomes[outcome] += 1
        kg_scores.append({"pass": 1.0, "fail": 0.0}.get(outcome, 0.5))
        correct.append(int(answer_matches(result.answer, q.answers)))
    judged = [i for i, s in enumerate(kg_scores) if s != 0.5]
    return {
        "num_questions": len(questions),
        "num_answered": len(correct),
        "accuracy": float(np.mean(correct)) if correct else 0.0,
        "kg_outcomes": dict(outcomes),
        "kg_auroc": auroc(kg_scores, correct),
        "kg_auroc_judged_only": auroc([kg_scores[i] for i in judged], [correct[i] for i in judged]),
        "accuracy_when_kg_pass": _mean_where(correct, kg_scores, 1.0),
        "accuracy_when_kg_fail": _mean_where(correct, kg_scores, 0.0),
    }


def run_metaqa_answers(
    data_dir: Path,
    limit: int | None,
    graph: KnowledgeGraph,
    embedder: Embedder,
    generator: Generator,
    *,
    threads: int,
) -> dict[str, Any]:
    """The ``metaqa_answers`` section: the first ``limit`` shuffled questions asked over the
    passages of the movies they name, their answers checked against ``graph``."""
    questions = shuffled_questions(data_dir, random.Random(SEED))[:limit]
    movies: set[str] = set()
    for q in questions:
        for subject, _, _ in q.implied_triples:
            node = graph.resolve(subject, fuzzy=False)
            if node:
                movies.add(node)
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
        settings = Settings(
            index_dir=Path(tmp) / "indexes",
            data_dir=Path(tmp) / "data",
            index_name="metaqa",
            build_demo_index=False,
            top_k=4,
            max_tokens=48,
        )
        pipeline = Pipeline(settings, embedder, generator)
        pipeline.use_checker(AnswerChecker(settings, embedder, graph=graph))
        pipeline.collections.get("metaqa", create=True).ingest(
            movie_passages(graph, sorted(movies))
        )
        asked = ask_all(
            pipeline,
            [q.question.replace("[", "").replace("]", "") for q in questions],
            threads,
        )
        pipeline.close()
    return answer_figures(questions, asked)
