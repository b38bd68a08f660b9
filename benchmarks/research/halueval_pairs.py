"""The guards on HaluEval QA: the right and the hallucinated answer of each item checked against
the item's knowledge (grounding, repetition, answer-evidence alignment, the answer's token
logprobs under the generator when the knowledge and question are its prompt).

AUROC and F1 of the flag "this answer is hallucinated", for the prior and the shipped
confidence and for one fitted by 2-fold cross-fitting (``benchmarks.research.crossfit``),
against three baselines: answer length, lexical overlap with the knowledge, mean token logprob.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.research.crossfit import cross_fitted, flag_f1
from engine.hf_generator import HFGenerator
from guards import (
    Candidate,
    ConfidenceModel,
    GroundingGuard,
    GuardChain,
    GuardContext,
    GuardPassage,
    RepetitionGuard,
    expected_calibration_error,
    features,
)
from guards.alignment import AnswerEvidenceGuard
from guards.text import content_words, overlap
from rag.eval.datasets import HaluEvalItem, load_halueval
from rag.eval.metrics import auroc, f1_score
from rag.prompt import build_messages
from rag.retrieval.embed import Embedder
from rag.stages.check.checker import DEFAULT_CONFIDENCE_MODEL
from rag.types import Passage

TARGET_AUROC = 0.85
REVIEW_THRESHOLDS = (0.3, 0.5, 0.7)


def answer_logprobs(hf: HFGenerator, prompt: str, answers: Sequence[str]) -> list[list[float]]:
    """Log-probabilities of each answer's tokens after the prompt (teacher forcing); the
    prompt is run once and its KV cache copied for each answer."""
    tokenizer, model = hf.tokenizer, hf.model
    prompt_ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    scored: list[list[float]] = []
    with torch.inference_mode():
        out = model(input_ids=prompt_ids.to(hf.device), use_cache=True, logits_to_keep=1)
        # transformers 5 renamed the KV cache from `past_key_values` to `cache`.
        cache_name = "cache" if hasattr(out, "cache") else "past_key_values"
        for answer in answers:
            ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
            if not ids:
                scored.append([])
                continue
            cache = copy.deepcopy(getattr(out, cache_name))
            rest = model(input_ids=torch.tensor([ids], device=hf.device), **{cache_name: cache})
            logits = torch.cat([out.logits[0, -1:], rest.logits[0, :-1]]).float()
            logprobs = torch.log_softmax(logits, dim=-1)
            chosen = logprobs.gather(1, torch.tensor(ids, device=hf.device)[:, None])[:, 0]
            scored.append(chosen.tolist())
    return scored


@dataclass(slots=True)
class CheckedPairs:
    """Both answers of every item, checked: confidence features, labels (1 = right), the item
    each came from (its cross-fitting group) and the baselines' scores."""

    rows: list[dict[str, float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    baselines: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def check_pairs(items: Sequence[HaluEvalItem], chain: GuardChain, hf: HFGenerator) -> CheckedPairs:
    """Run ``chain`` on the right and the hallucinated answer of each item."""
    checked = CheckedPairs()
    for k, item in enumerate(items):
        passage = Passage("knowledge", "knowledge", item.knowledge, 1.0)
        prompt = hf.apply_chat_template(build_messages(item.question, [passage]))
        pair = (item.right_answer, item.hallucinated_answer)
        scored = answer_logprobs(hf, prompt, pair)
        for answer, label, logprobs in zip(pair, (1, 0), scored, strict=True):
            ctx = GuardContext(
                question=item.question,
                answer=answer,
                passages=(GuardPassage("knowledge", item.knowledge, 1.0),),
                candidates=(Candidate(answer, tuple(logprobs), "stop"),),
            )
            results = chain.run(ctx).results
            checked.rows.append(features(results, token_logprobs=logprobs))
            checked.labels.append(label)
            checked.groups.append(k)
            baselines = checked.baselines
            baselines["answer_length"].append(-len(answer))  # shorter = more likely right
            baselines["lexical_overlap"].append(
                overlap(content_words(answer), content_words(item.knowledge))
            )
            baselines["mean_token_logprob"].append(float(np.mean(logprobs)) if logprobs else 0.0)
    return checked


def run_halueval(
    data_dir: Path, limit: int | None, embedder: Embedder, hf: HFGenerator
) -> dict[str, Any]:
    """The ``halueval`` section's figures on the first ``limit`` items."""
    items = load_halueval(data_dir, limit)
    chain = GuardChain(
        [RepetitionGuard(fail_on_cutoff=False), GroundingGuard(embedder), AnswerEvidenceGuard()]
    )
    prior = ConfidenceModel.prior()
    shipped = ConfidenceModel.load(DEFAULT_CONFIDENCE_MODEL)
    started = time.perf_counter()
    checked = check_pairs(items, chain, hf)
    rows, labels, groups = checked.rows, checked.labels, checked.groups
    fitted = cross_fitted(rows, labels, groups)
    ours = {
        "prior": [prior.score(r) for r in rows],
        "shipped": [shipped.score(r) for r in rows],
        "fitted": fitted,
    }
    record: dict[str, Any] = {
        "num_items": len(items),
        "num_answers": len(rows),
        "seconds": time.perf_counter() - started,
    }
    for name, scores in {**ours, **checked.baselines}.items():
        record[name] = {
            "auroc": auroc(scores, labels),
            "flag_f1": flag_f1(scores, labels, groups),
        }
    hallucinated = [y == 0 for y in labels]
    record["prior_review_flag_f1_by_threshold"] = {
        t: f1_score([s < t for s in ours["prior"]], hallucinated) for t in REVIEW_THRESHOLDS
    }
    best = max(checked.baselines, key=lambda b: record[b]["auroc"])
    record["best_baseline"] = best
    record["fitted_minus_best_baseline_auroc"] = record["fitted"]["auroc"] - record[best]["auroc"]
    record["fitted_ece"] = expected_calibration_error(fitted, labels)
    record["target_auroc"] = TARGET_AUROC
    return record
