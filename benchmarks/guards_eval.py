"""Guards measured on labelled data, each against baselines computed in the same run.

    python benchmarks/guards_eval.py --data-dir DIR [--limit N] [--sections a,b,...]

Sections (all by default):

- ``halueval``: HaluEval QA. The right and the hallucinated answer of each item are checked
  against the item's knowledge (grounding, repetition, the answer's token logprobs under the
  generator when the knowledge and question are its prompt). AUROC and F1 of the flag "this
  answer is hallucinated", for the uncalibrated prior confidence and for a confidence fitted by
  2-fold cross-fitting (items split, each half scored by the model fitted on the other), against
  three baselines: answer length, lexical overlap with the knowledge, mean token logprob.
- ``metaqa_claims``: gold MetaQA triples written as sentences with surface noise (case,
  punctuation, a dropped leading "The") go through the knowledge-graph guard's claim extraction
  and check; so do corrupted ones (object replaced by another value of the relation that the
  graph does not hold for that subject).
- ``metaqa_answers``: the default model answers MetaQA 1-hop questions from the graph rendered
  as text passages (one per movie); AUROC of the knowledge-graph guard for answer correctness.
- ``end_to_end``: MuSiQue, HotpotQA and PubMedQA through ``Pipeline.ask`` with the default
  model and ``--num-candidates`` samples per question; AUROC of the confidence for answer
  correctness (prior weights, and cross-fitted) against the mean token logprob, and the
  risk-coverage curve. ``--save-confidence PATH`` writes the model fitted on every answer.
- ``repetition``: prompts that make the default model loop with penalties off; recall of the
  repetition guard and of the engine's loop stop check on the loops, and flags on demo answers.

The last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shlex
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine import EngineConfig, SamplingParams
from engine.hf_generator import HFGenerator
from engine.llm_engine import LLMEngine
from guards import (
    Candidate,
    ClaimVerdict,
    ConfidenceModel,
    Evidence,
    GroundingGuard,
    GuardChain,
    GuardContext,
    KnowledgeGraph,
    LoopStop,
    Outcome,
    RepetitionGuard,
    check_answer,
    expected_calibration_error,
    features,
)
from guards.alignment import AnswerEvidenceGuard
from guards.repetition import LOOP_STOP_REASON
from guards.text import content_words, overlap
from rag.demo import DEMO_QUESTIONS
from rag.eval.datasets import (
    MOVIE_LABELS,
    QADataset,
    load_halueval,
    load_hotpotqa,
    load_metaqa_questions,
    load_musique,
    load_pubmedqa,
    metaqa_kb_path,
    render_movie_passages,
    verdict_of,
)
from rag.eval.metrics import (
    answer_matches,
    area_under_risk_coverage,
    auroc,
    best_threshold,
    f1_score,
    risk_coverage,
)
from rag.eval.movies import MOVIE_FUNCTIONAL_RELATIONS, MOVIE_RELATION_PHRASES
from rag.guarding import DEFAULT_CONFIDENCE_MODEL, AnswerChecker
from rag.pipeline import Pipeline
from rag.prompt import build_messages
from rag.retrieval.documents import Document
from rag.retrieval.embed import Embedder
from rag.settings import Settings
from rag.types import Passage, Result

SEED = 0
SECTIONS = ("halueval", "metaqa_claims", "metaqa_answers", "end_to_end", "repetition")
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOOP_PROMPTS = (
    "Write the letter A fifty times.",
    "Repeat the word cat many times.",
    "Count from 1 to 100.",
    "Say the word yes over and over.",
    "Write 'la la la' as a long song.",
    "Type the number 7 again and again.",
    "Write the alphabet ten times.",
    "List the days of the week, over and over.",
    "Write a poem where every line is 'the end'.",
    "Repeat after me: hello world, hello world, hello world.",
    "Write 'I will not talk in class' a hundred times.",
    "Write the word buffalo as many times as you can.",
    "Continue the pattern: 1 2 1 2 1 2",
    "Continue the pattern: ab ab ab ab",
    "Write a chant for a football team.",
    "Count down from 50 to 1.",
    "List the even numbers up to 200.",
    "Spell the word banana letter by letter, many times.",
    "Write ha ha ha for a long laugh.",
    "Write 'go team go' twenty times.",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--limit", type=int, default=100, help="items per data set")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--num-candidates", type=int, default=5, help="samples per question")
    parser.add_argument("--threads", type=int, default=8, help="questions asked at once")
    parser.add_argument("--save-confidence", type=Path, default=None)
    parser.add_argument("--dump", type=Path, default=None, help="write end-to-end answers here")
    parser.add_argument(
        "--from-dump", type=Path, default=None, help="re-score these end-to-end answers"
    )
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


# ---------------------------------------------------------------- shared helpers
def cross_fitted(rows: list[dict[str, float]], labels: list[int], groups: list[int]) -> list[float]:
    """Out-of-fold confidences: fold k is scored by the model fitted on the other fold."""
    scores = [0.0] * len(rows)
    for fold in (0, 1):
        train = [i for i, g in enumerate(groups) if g % 2 != fold]
        model = ConfidenceModel.fit([rows[i] for i in train], [labels[i] for i in train])
        for i, g in enumerate(groups):
            if g % 2 == fold:
                scores[i] = model.score(rows[i])
    return scores


def flag_f1(scores: list[float], labels: list[int], groups: list[int]) -> float:
    """F1 of the flag "wrong" (score < t), t chosen on the other fold: no peeking."""
    predicted = [False] * len(scores)
    for fold in (0, 1):
        train = [i for i, g in enumerate(groups) if g % 2 != fold]
        t = best_threshold([scores[i] for i in train], [labels[i] == 0 for i in train])
        for i, g in enumerate(groups):
            if g % 2 == fold:
                predicted[i] = scores[i] < t
    return f1_score(predicted, [y == 0 for y in labels])


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def answer_logprobs(hf: HFGenerator, prompt: str, answers: Sequence[str]) -> list[list[float]]:
    """Log-probabilities of each answer's tokens after the prompt (teacher forcing); the
    prompt is run once and its KV cache copied for each answer."""
    tokenizer, model = hf.tokenizer, hf.model
    prompt_ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    scored = []
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


# ---------------------------------------------------------------- HaluEval
def run_halueval(args: argparse.Namespace, embedder: Embedder, hf: HFGenerator) -> dict[str, Any]:
    items = load_halueval(args.data_dir, args.limit)
    chain = GuardChain(
        [RepetitionGuard(fail_on_cutoff=False), GroundingGuard(embedder), AnswerEvidenceGuard()]
    )
    prior = ConfidenceModel.prior()
    shipped = ConfidenceModel.load(DEFAULT_CONFIDENCE_MODEL)
    rows: list[dict[str, float]] = []
    labels: list[int] = []
    groups: list[int] = []
    baselines: dict[str, list[float]] = defaultdict(list)
    started = time.perf_counter()
    for k, item in enumerate(items):
        passage = Passage("knowledge", "knowledge", item.knowledge, 1.0)
        prompt = hf.apply_chat_template(build_messages(item.question, [passage]))
        pair = (item.right_answer, item.hallucinated_answer)
        scored = answer_logprobs(hf, prompt, pair)
        for answer, label, logprobs in zip(pair, (1, 0), scored, strict=True):
            ctx = GuardContext(
                question=item.question,
                answer=answer,
                passages=(Evidence("knowledge", item.knowledge, 1.0),),
                candidates=(Candidate(answer, tuple(logprobs), "stop"),),
            )
            results = chain.run(ctx).results
            rows.append(features(results, token_logprobs=logprobs))
            labels.append(label)
            groups.append(k)
            baselines["answer_length"].append(-len(answer))  # shorter = more likely right
            baselines["lexical_overlap"].append(
                overlap(content_words(answer), content_words(item.knowledge))
            )
            baselines["mean_token_logprob"].append(float(np.mean(logprobs)) if logprobs else 0.0)
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
    for name, scores in {**ours, **baselines}.items():
        record[name] = {
            "auroc": auroc(scores, labels),
            "flag_f1": flag_f1(scores, labels, groups),
        }
    hallucinated = [y == 0 for y in labels]
    record["prior_review_flag_f1_by_threshold"] = {
        t: f1_score([s < t for s in ours["prior"]], hallucinated) for t in (0.3, 0.5, 0.7)
    }
    best = max(baselines, key=lambda b: record[b]["auroc"])
    record["best_baseline"] = best
    record["fitted_minus_best_baseline_auroc"] = record["fitted"]["auroc"] - record[best]["auroc"]
    record["fitted_ece"] = expected_calibration_error(fitted, labels)
    record["target_auroc"] = 0.85
    return record


# ---------------------------------------------------------------- MetaQA
TEMPLATES = {
    "directed_by": "{s} was directed by {o}.",
    "written_by": "{s} was written by {o}.",
    "starred_actors": "{s} starred {o}.",
    "release_year": "{s} was released in {o}.",
    "in_language": "The language of {s} is {o}.",
    "has_genre": "The genre of {s} is {o}.",
    "has_tags": "{s} is tagged {o}.",
    "has_imdb_rating": "{s} has a rating of {o}.",
    "has_imdb_votes": "{s} has {o} votes.",
}
PARAPHRASES = {
    "directed_by": ("{o} directed {s}.", "The director of {s} is {o}."),
    "written_by": ("{o} wrote {s}.", "The screenplay of {s} is by {o}."),
    "starred_actors": ("{o} starred in {s}.", "{s} stars {o}.", "The cast of {s} includes {o}."),
    "release_year": ("{s} came out in {o}.", "The release year of {s} is {o}."),
    "in_language": ("{s} is in {o}.", "{s} is a {o}-language film.", "{s} is spoken in {o}."),
    "has_genre": ("{s} is in the {o} genre.", "{s} belongs to the genre {o}."),
    "has_tags": ("{s} has the tag {o}.", "{s} is about {o}.", "The tags of {s} include {o}."),
    "has_imdb_rating": ("{s} is rated {o}.", "The IMDb rating of {s} is {o}."),
    "has_imdb_votes": ("{s} has {o} IMDb votes.", "The votes for {s} are {o}."),
}
"""Other ways of stating the same claims, measured apart (their own random stream) so that the
main figures stay comparable between runs: a check tuned to TEMPLATES alone shows up here."""
NOISE_KINDS = ("lower", "upper", "no_the", "no_punct", "as_is")


def noisy(name: str, rng: random.Random) -> str:
    """The name as a careless writer would put it: case, punctuation, no leading 'The'."""
    return noised(name, rng.choice(NOISE_KINDS))


def noised(name: str, kind: str) -> str:
    if kind == "lower":
        return name.lower()
    if kind == "upper":
        return name.upper()
    if kind == "no_the":
        return name.removeprefix("The ").removeprefix("the ")
    if kind == "no_punct":
        return "".join(ch for ch in name if ch.isalnum() or ch.isspace())
    return name


def load_movie_graph(data_dir: Path) -> tuple[KnowledgeGraph, float]:
    started = time.perf_counter()
    graph = KnowledgeGraph.from_file(
        metaqa_kb_path(data_dir),
        functional_relations=MOVIE_FUNCTIONAL_RELATIONS,
        relation_phrases=MOVIE_RELATION_PHRASES,
    )
    return graph, time.perf_counter() - started


def claim_triples(
    args: argparse.Namespace, graph: KnowledgeGraph, rng: random.Random
) -> tuple[list[tuple[str, str, str]], int]:
    """Gold triples: those the 1-hop test questions imply (shuffled, seed 0), then, since those
    name four relations only, triples drawn from the graph (own seed) until every relation has
    ``--limit`` of them (or all it has). Returns the triples and how many came from questions."""
    questions = [q for q in load_metaqa_questions(args.data_dir) if q.kb_supported]
    rng.shuffle(questions)
    triples: list[tuple[str, str, str]] = []
    for q in questions:
        triple = q.implied_triples[0] if q.implied_triples else None
        if triple and graph.resolve(triple[0], fuzzy=False) and graph.resolve(triple[2]):
            triples.append(triple)
        if len(triples) >= max(args.limit * 5, 200):
            break
    from_questions = len(triples)
    have: dict[str, int] = defaultdict(int)
    for _, relation, _ in triples:
        have[relation] += 1
    edges: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for s, o, relation in graph.graph.edges(keys=True):
        edges[relation].append((s, relation, o))
    extra_rng = random.Random(SEED + 1)
    for relation in sorted(edges):
        pool = sorted(edges[relation])
        want = min(args.limit, len(pool)) - have[relation]
        if want > 0:
            triples.extend(extra_rng.sample(pool, want))
    return triples, from_questions


def run_metaqa_claims(args: argparse.Namespace, graph: KnowledgeGraph) -> dict[str, Any]:
    rng = random.Random(SEED)
    triples, from_questions = claim_triples(args, graph, rng)
    para_rng = random.Random(SEED + 2)
    ranges: dict[str, list[str]] = {r: sorted(graph.values(r)) for r in graph.relations}
    gold_supported, corrupt_supported, functional_contradicted, functional_total = 0, 0, 0, 0
    gold_questions = 0
    check_ms: list[float] = []
    per_relation: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    corrupt_by_relation: dict[str, int] = defaultdict(int)
    per_noise: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    para_relation: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    misses: dict[str, list[str]] = defaultdict(list)
    para_misses: list[str] = []

    def holds(text: str, triple: tuple[str | None, str, str | None]) -> bool:
        return any(
            c.verdict is ClaimVerdict.SUPPORTED
            and (c.claim.subject, c.claim.relation, c.claim.object) == triple
            for c in check_answer(graph, text)
        )

    for i, (subject, relation, obj) in enumerate(triples):
        s_node, o_node = graph.resolve(subject), graph.resolve(obj)
        kind = rng.choice(NOISE_KINDS)
        text = TEMPLATES[relation].format(s=noised(subject, kind), o=obj)
        t0 = time.perf_counter()
        checks = check_answer(graph, text)
        check_ms.append((time.perf_counter() - t0) * 1000)
        ok = any(
            c.verdict is ClaimVerdict.SUPPORTED
            and (c.claim.subject, c.claim.relation, c.claim.object) == (s_node, relation, o_node)
            for c in checks
        )
        gold_supported += ok
        gold_questions += ok and i < from_questions
        per_relation[relation][0] += ok
        per_relation[relation][1] += 1
        per_noise[kind][0] += ok
        per_noise[kind][1] += 1
        if not ok and len(misses[relation]) < 5:
            misses[relation].append(text)
        known = graph.objects(s_node or "", relation)
        wrong = rng.choice(ranges[relation])
        while wrong in known:
            wrong = rng.choice(ranges[relation])
        text = TEMPLATES[relation].format(s=noisy(subject, rng), o=wrong)
        checks = check_answer(graph, text)
        corrupted = any(
            c.verdict is ClaimVerdict.SUPPORTED and c.claim.object == wrong for c in checks
        )
        corrupt_supported += corrupted
        corrupt_by_relation[relation] += corrupted
        if relation in graph.functional_relations:
            functional_total += 1
            functional_contradicted += any(
                c.verdict is ClaimVerdict.CONTRADICTED
                and (c.claim.subject, c.claim.relation, c.claim.object) == (s_node, relation, wrong)
                for c in checks
            )
        template = para_rng.choice(PARAPHRASES[relation])
        name = noisy(subject, para_rng)
        ok = holds(template.format(s=name, o=obj), (s_node, relation, o_node))
        para_relation[relation][0] += ok
        para_relation[relation][1] += 1
        if not ok and len(para_misses) < 20:
            para_misses.append(template.format(s=name, o=obj))
        para_relation[relation][2] += any(
            c.verdict is ClaimVerdict.SUPPORTED and c.claim.object == wrong
            for c in check_answer(graph, template.format(s=name, o=wrong))
        )
    n = len(triples)
    return {
        "num_claims": n,
        "num_claims_from_questions": from_questions,
        "num_claims_by_relation": {r: tot for r, (_, tot) in sorted(per_relation.items())},
        "gold_supported": gold_supported / n,
        "gold_supported_question_triples": gold_questions / max(1, from_questions),
        "corrupted_supported": corrupt_supported / n,
        "functional_relations": sorted(graph.functional_relations),
        "num_functional": functional_total,
        "corrupted_functional_contradicted": functional_contradicted / max(1, functional_total),
        "gold_supported_by_relation": {
            r: ok / tot for r, (ok, tot) in sorted(per_relation.items())
        },
        "corrupted_supported_by_relation": {
            r: corrupt_by_relation[r] / tot for r, (_, tot) in sorted(per_relation.items())
        },
        "gold_supported_by_noise": {k: ok / tot for k, (ok, tot) in sorted(per_noise.items())},
        "paraphrase_gold_supported_by_relation": {
            r: ok / tot for r, (ok, tot, _) in sorted(para_relation.items())
        },
        "paraphrase_corrupted_supported": sum(c for _, _, c in para_relation.values()) / n,
        "check_ms_p50": float(np.percentile(check_ms, 50)),
        "check_ms_p99": float(np.percentile(check_ms, 99)),
        "unsupported_examples": dict(sorted(misses.items())),
        "paraphrase_unsupported_examples": para_misses,
        "targets": {
            "gold_supported": ">= 0.95 (and for each relation)",
            "corrupted_supported": "<= 0.02",
            "corrupted_functional_contradicted": ">= 0.9",
        },
    }


def movie_passages(graph: KnowledgeGraph, movies: Sequence[str]) -> list[Document]:
    """Each movie's triples written out as one short text (as ``ragguard eval metaqa`` does)."""
    return render_movie_passages(
        (movie, relation, obj)
        for movie in movies
        for relation in MOVIE_LABELS
        for obj in graph.objects(movie, relation)
    )


def run_metaqa_answers(
    args: argparse.Namespace, graph: KnowledgeGraph, embedder: Embedder, generator: Any
) -> dict[str, Any]:
    rng = random.Random(SEED)
    questions = [q for q in load_metaqa_questions(args.data_dir) if q.kb_supported]
    rng.shuffle(questions)
    questions = questions[: args.limit]
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
        pipeline.checker = AnswerChecker(settings, embedder, graph=graph)
        pipeline.collections.get("metaqa", create=True).ingest(
            movie_passages(graph, sorted(movies))
        )
        asked = ask_all(
            pipeline,
            [q.question.replace("[", "").replace("]", "") for q in questions],
            args.threads,
        )
        pipeline.close()
    kg_scores, correct = [], []
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
        "accuracy_when_kg_pass": mean_where(correct, kg_scores, 1.0),
        "accuracy_when_kg_fail": mean_where(correct, kg_scores, 0.0),
    }


def mean_where(values: list[int], keys: list[float], key: float) -> float | None:
    chosen = [v for v, k in zip(values, keys, strict=True) if k == key]
    return float(np.mean(chosen)) if chosen else None


# ---------------------------------------------------------------- end to end
def ask_all(pipeline: Pipeline, questions: list[str], threads: int) -> list[Result]:
    """Ask from several threads at once: the engine batches them into shared steps."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda q: pipeline.ask(q, seed=SEED), questions))


def is_correct(dataset: QADataset, answer: str, golds: Sequence[str]) -> bool:
    if dataset.answer_kind == "yes_no":
        return verdict_of(answer) == golds[0]
    return answer_matches(answer, golds)


E2E_LOADERS: dict[str, Callable[[Path, int | None], QADataset]] = {
    "musique": load_musique,
    "hotpotqa": load_hotpotqa,
    "pubmedqa": load_pubmedqa,
}


def _finish(rest: list[Any]) -> str | None:
    """A dumped candidate's finish reason (older dumps: finish reason, then stop reason)."""
    if len(rest) == 2 and rest[1] == LOOP_STOP_REASON:
        return LOOP_STOP_REASON
    return rest[0] if rest and rest[0] not in (None, "None") else None


def record_checks(checker: AnswerChecker) -> dict[str, dict[str, Any]]:
    """What the checker is given for each question, keyed by question (instrumentation)."""
    seen: dict[str, dict[str, Any]] = {}
    check = checker.check

    def capture(question, answer, candidates, passages, **kw):  # type: ignore[no-untyped-def]
        seen[question] = {
            "answer_index": candidates.index(answer),
            "candidates": [[c.text, list(c.token_logprobs), c.finish_reason] for c in candidates],
            "passages": [[p.chunk_id, p.text, p.score] for p in passages],
        }
        return check(question, answer, candidates, passages, **kw)

    checker.check = capture  # type: ignore[method-assign]
    return seen


def generate_end_to_end(
    args: argparse.Namespace, embedder: Embedder, generator: Any
) -> list[dict[str, Any]]:
    """Ask every question through ``Pipeline.ask``; one record per question with what the
    checker saw (answer, samples with their token logprobs, passages), so that the answers can
    be re-scored by the guards without generating again (``--from-dump``)."""
    records: list[dict[str, Any]] = []
    for name, load in E2E_LOADERS.items():
        dataset = load(args.data_dir, args.limit)
        with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
            settings = Settings(
                index_dir=Path(tmp) / "indexes",
                data_dir=Path(tmp) / "data",
                index_name=name,
                build_demo_index=False,
                num_candidates=args.num_candidates,
                max_tokens=64,
            )
            pipeline = Pipeline(settings, embedder, generator)
            pipeline.collections.get(name, create=True).ingest(dataset.documents)
            assert pipeline.checker is not None
            seen = record_checks(pipeline.checker)
            questions = [e.question for e in dataset.examples]
            if dataset.answer_kind == "yes_no":
                questions = [f"{q} Answer yes, no or maybe." for q in questions]
            started = time.perf_counter()
            results = ask_all(pipeline, questions, args.threads)
            elapsed = time.perf_counter() - started
            pipeline.close()
        for example, question, result in zip(dataset.examples, questions, results, strict=True):
            records.append(
                {
                    "dataset": name,
                    "id": example.id,
                    "question": question,
                    "golds": list(example.answers),
                    "answer": result.answer,
                    "correct": is_correct(dataset, result.answer, example.answers),
                    "declined": result.confidence is None,
                    "seconds_per_question": elapsed / len(questions),
                    **seen.get(result.question, {}),
                }
            )
    return records


def score_end_to_end(
    records: list[dict[str, Any]], embedder: Embedder, num_candidates: int
) -> tuple[dict[str, Any], list[dict[str, float]], list[int]]:
    """The product's checker on each recorded answer; AUROC and risk-coverage of the confidence
    (prior weights and cross-fitted) against the answer's mean token logprob."""
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
        settings = Settings(index_dir=Path(tmp) / "i", data_dir=Path(tmp) / "d")
        checker = AnswerChecker(settings, embedder)
        rows, labels, groups, names = [], [], [], []
        for k, r in enumerate(records):
            if r["declined"] or "candidates" not in r:
                continue
            candidates = [
                Candidate(text.strip(), tuple(logprobs), _finish(rest))
                for text, logprobs, *rest in r["candidates"]
            ]
            passages = [Passage(cid, cid, text, score) for cid, text, score in r["passages"]]
            checked = checker.check(
                r["question"], candidates[r["answer_index"]], candidates, passages
            )
            rows.append(checked.signals)
            labels.append(int(r["correct"]))
            groups.append(k)
            names.append(r["dataset"])
    prior = ConfidenceModel.prior()
    prior_scores = [prior.score(r) for r in rows]
    fitted = cross_fitted(rows, labels, groups)
    logprob = [r["token_prob"] for r in rows]
    per_dataset: dict[str, Any] = {}
    for name in dict.fromkeys(r["dataset"] for r in records):
        mine = [r for r in records if r["dataset"] == name]
        idx = [i for i, n in enumerate(names) if n == name]
        y = [labels[i] for i in idx]
        per_dataset[name] = {
            "num_questions": len(mine),
            "declined": sum(r["declined"] for r in mine),
            "accuracy_of_answered": float(np.mean(y)) if y else 0.0,
            "seconds_per_question": mine[0]["seconds_per_question"],
            "auroc_prior": auroc([prior_scores[i] for i in idx], y),
            "auroc_fitted": auroc([fitted[i] for i in idx], y),
            "auroc_mean_logprob": auroc([logprob[i] for i in idx], y),
        }
    record: dict[str, Any] = {
        "num_candidates": num_candidates,
        "datasets": per_dataset,
        "num_answers": len(rows),
        "accuracy": float(np.mean(labels)) if labels else 0.0,
        "auroc_prior": auroc(prior_scores, labels),
        "auroc_fitted": auroc(fitted, labels),
        "auroc_mean_logprob": auroc(logprob, labels),
        "aurc_fitted": area_under_risk_coverage(fitted, labels),
        "aurc_mean_logprob": area_under_risk_coverage(logprob, labels),
        "ece_fitted": expected_calibration_error(fitted, labels),
        "risk_coverage_fitted": [
            [p.coverage, p.accuracy, p.threshold] for p in risk_coverage(fitted, labels)
        ],
        "risk_coverage_mean_logprob": [
            [p.coverage, p.accuracy] for p in risk_coverage(logprob, labels)
        ],
        "target_auroc": 0.75,
    }
    return record, rows, labels


def run_end_to_end(args: argparse.Namespace, embedder: Embedder, generator: Any) -> dict[str, Any]:
    if args.from_dump:
        records = [json.loads(line) for line in args.from_dump.read_text().splitlines()]
    else:
        records = generate_end_to_end(args, embedder, generator)
        if args.dump:
            args.dump.write_text("".join(json.dumps(r) + "\n" for r in records))
    record, rows, labels = score_end_to_end(records, embedder, args.num_candidates)
    if args.save_confidence and len(set(labels)) == 2:
        model = ConfidenceModel.fit(rows, labels)
        model.notes.update(
            {
                "data": "musique, hotpotqa, pubmedqa (benchmarks/guards_eval.py end_to_end)",
                "num_candidates": float(args.num_candidates),
                "cross_fitted_auroc": record["auroc_fitted"],
                "cross_fitted_ece": record["ece_fitted"],
            }
        )
        model.save(args.save_confidence)
        record["saved_confidence_model"] = str(args.save_confidence)
        record["fitted_weights"] = model.weights
    return record


# ---------------------------------------------------------------- repetition
def loops_by_oracle(token_ids: list[int], max_tokens: int) -> bool:
    """Independent label of a degenerate loop: ran to max_tokens, and the second half of the
    tokens compresses more than 4x (a statistic our detector does not use)."""
    if len(token_ids) < max_tokens:
        return False
    tail = np.asarray(token_ids[len(token_ids) // 2 :], dtype=np.int32).tobytes()
    return len(tail) / len(zlib.compress(tail, 9)) > 4.0


def run_repetition(
    args: argparse.Namespace, embedder: Embedder, generator: Any, demo_pipeline: Pipeline | None
) -> dict[str, Any]:
    max_tokens = 160
    prompts = [
        generator.apply_chat_template([{"role": "user", "content": p}]) for p in LOOP_PROMPTS
    ]
    free = generator.generate(prompts, SamplingParams(max_tokens=max_tokens))
    stopped = generator.generate(
        prompts, SamplingParams(max_tokens=max_tokens, stop_check=LoopStop())
    )
    guard = RepetitionGuard()
    loops = flagged = stop_hits = 0
    tokens_free = tokens_stopped = 0
    false_flags = 0
    for out, early in zip(free, stopped, strict=True):
        c, e = out.outputs[0], early.outputs[0]
        label = loops_by_oracle(c.token_ids, max_tokens)
        ctx = GuardContext("q", c.text, candidates=(Candidate(c.text, (), str(c.finish_reason)),))
        fail = guard.check(ctx).outcome is Outcome.FAIL
        loops += label
        flagged += label and fail
        false_flags += (not label) and fail
        stop_hits += label and e.stop_reason == "repetition loop"
        if label:
            tokens_free += len(c.token_ids)
            tokens_stopped += len(e.token_ids)
    demo_flags = []
    if demo_pipeline is not None:
        for question in DEMO_QUESTIONS:
            result = demo_pipeline.ask(question)
            rep = next((g for g in result.guard_results if g.name == "repetition"), None)
            if rep is not None and rep.outcome == "fail":
                demo_flags.append(f"{question} -> {rep.reason}")
    return {
        "num_prompts": len(prompts),
        "loops_by_oracle": loops,
        "guard_recall": flagged / loops if loops else float("nan"),
        "guard_flags_on_non_loops": false_flags,
        "stop_check_recall": stop_hits / loops if loops else float("nan"),
        "loop_tokens_saved_by_stop_check": 1 - tokens_stopped / tokens_free if tokens_free else 0.0,
        "demo_questions": len(DEMO_QUESTIONS) if demo_pipeline is not None else 0,
        "demo_flags": demo_flags,
    }


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sections = args.sections.split(",")
    torch.manual_seed(SEED)
    config = EngineConfig()
    embedder = Embedder()
    generator = LLMEngine(config)
    record: dict[str, Any] = {
        "benchmark": "guards_eval",
        "command": "python benchmarks/guards_eval.py " + shlex.join(sys.argv[1:]),
        "limit": args.limit,
    }
    if "halueval" in sections:
        hf = HFGenerator(config)
        record["halueval"] = run_halueval(args, embedder, hf)
        print(json.dumps({"halueval": rounded(record["halueval"])}), flush=True)
        del hf
    if "metaqa_claims" in sections or "metaqa_answers" in sections:
        graph, load_s = load_movie_graph(args.data_dir)
        record["metaqa_graph"] = {"triples": len(graph), "load_s": load_s}
        if "metaqa_claims" in sections:
            record["metaqa_claims"] = run_metaqa_claims(args, graph)
            print(json.dumps({"metaqa_claims": rounded(record["metaqa_claims"])}), flush=True)
        if "metaqa_answers" in sections:
            record["metaqa_answers"] = run_metaqa_answers(args, graph, embedder, generator)
            print(json.dumps({"metaqa_answers": rounded(record["metaqa_answers"])}), flush=True)
        del graph
    if "end_to_end" in sections:
        record["end_to_end"] = run_end_to_end(args, embedder, generator)
        print(json.dumps({"end_to_end": rounded(record["end_to_end"])}), flush=True)
    if "repetition" in sections:
        with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as tmp:
            settings = Settings(index_dir=Path(tmp) / "indexes", data_dir=Path(tmp) / "data")
            demo = Pipeline(settings, embedder, generator)
            from rag.demo import ensure_demo_index

            ensure_demo_index(demo.collections)
            record["repetition"] = run_repetition(args, embedder, generator, demo)
            demo.close()
    print(json.dumps(rounded(record)))


if __name__ == "__main__":
    main()
