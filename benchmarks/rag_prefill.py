"""RAG is prefill-bound: how much of the grounded prompt the prefix cache serves, and how fast
the rest is computed (engine_speed.py's section i).

    python benchmarks/rag_prefill.py            # full run (about 12 minutes on 2 cores)
    python benchmarks/rag_prefill.py --quick    # smaller

i1. A stream of related questions: MetaQA 1-hop questions grouped by their topic entity (a user
    asking who directed a film, then who stars in it, then its genre), one at a time, retrieved
    over the movies' passages (those the questions are about and 2,000 others) with the default
    top_k and min_score, answered greedily with the default engine. Four engines side by side,
    question by question (the order among them rotating), each with its own ``PassageLayout``:
    "reuse" (the default), "canonical" and "rank" order with prefix caching, and rank order
    without prefix caching. Reported: the share of prompt tokens served from the cache, time to
    first token (median and mean), and the answers' accuracy (the eval's answer matching), since
    the order of the passages may change what the model says.
i2. Prefill at the machine's matmul rate: a fresh prompt of 128, 256 and 512 tokens of real text
    (prefix caching off), tokens/s and FLOP/s against ``torch.mm`` on the same weight shapes with
    as many rows, in this run (as (e) does for decode); beside it, the time of the causal
    ``scaled_dot_product_attention`` of every layer on the same shapes, and what is left (norms,
    rotary, the step's bookkeeping).

The last line printed is one JSON object. Without ../shared/data, i1 runs on the packaged demo
collection and a fixed list of related questions.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from rag.prompt import PassageOrder
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
SEED = 0
VARIANTS: dict[str, tuple[PassageOrder, bool]] = {
    "reuse": ("reuse", True),
    "canonical": ("canonical", True),
    "rank": ("rank", True),
    "no-cache": ("rank", False),
}
"""Name: (passage order, prefix caching)."""
DEMO_QUESTIONS = [
    ["What does a KV cache avoid recomputing?", "What does the KV cache store?"],
    ["Why is a KV cache faster?", "How much memory does a KV cache use?"],
    ["What is paged attention?", "How does paged attention manage KV cache memory?"],
]


def metaqa_stream(data_dir: Path, sessions: int) -> tuple[list[tuple[str, list[str]]], list[Any]]:
    """(question, gold answers) in sessions of one topic entity each, and the documents to
    retrieve from: the movies those questions are about and 2,000 others."""
    from rag.eval.datasets import load_metaqa_questions, read_metaqa_triples, render_movie_passages

    by_entity: dict[str, list[Any]] = defaultdict(list)
    for q in load_metaqa_questions(data_dir):
        by_entity[q.topic_entity].append(q)
    chosen = [e for e, qs in by_entity.items() if len(qs) >= 2][:sessions]
    stream = [(q.question, list(q.answers)) for e in chosen for q in by_entity[e]]
    triples = list(read_metaqa_triples(data_dir))
    wanted = set(chosen)
    related = {s for s, _, o in triples if s in wanted or o in wanted}
    docs = render_movie_passages(triples)
    rng = random.Random(SEED)
    others = [d for d in docs if d.doc_id not in related]
    picked = [d for d in docs if d.doc_id in related] + rng.sample(others, 2000)
    return stream, picked


def demo_stream() -> tuple[list[tuple[str, list[str]]], list[Any]]:
    from rag.demo import demo_collection_path
    from rag.retrieval.documents import load_path

    stream = [(q, []) for session in DEMO_QUESTIONS for q in session]
    return stream, list(load_path(demo_collection_path()))


def bench_stream(data_dir: Path, sessions: int, max_tokens: int) -> dict[str, Any]:
    """i1: the three engines on one stream of related questions."""
    from engine import LLMEngine, SamplingParams
    from rag.eval.metrics import answer_matches
    from rag.prompt import PassageLayout, build_messages
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.embed import Embedder
    from rag.retrieval.retriever import CollectionRetriever
    from rag.settings import Settings

    settings = Settings(_env_file=None)
    has_data = (data_dir / "metaqa_wikimovies" / "qa" / "metaqa_1hop_test.jsonl").is_file()
    stream, docs = metaqa_stream(data_dir, sessions) if has_data else demo_stream()
    with tempfile.TemporaryDirectory() as tmp:
        registry = CollectionRegistry(
            Path(tmp),
            Embedder(),
            chunk_size=settings.retrieval.chunk_size,
            chunk_overlap=settings.retrieval.chunk_overlap,
        )
        collection = registry.get("stream", create=True)
        collection.ingest(docs)
        retriever = CollectionRetriever(collection)
        retrieved = [
            [
                p
                for p in retriever.retrieve(q, settings.retrieval.top_k)
                if p.score >= settings.retrieval.min_score
            ]
            for q, _ in stream
        ]
        registry.close()
    config = settings.engine.engine_config()
    engines = {
        name: LLMEngine(replace(config, enable_prefix_caching=caching))
        for name, (_, caching) in VARIANTS.items()
    }
    layouts = {name: PassageLayout(order) for name, (order, _) in VARIANTS.items()}
    params = SamplingParams(max_tokens=max_tokens)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    names = list(engines)
    for i, ((question, golds), passages) in enumerate(zip(stream, retrieved, strict=True)):
        if not passages:
            continue
        for name in names[i % len(names) :] + names[: i % len(names)]:
            engine = engines[name]
            shown = layouts[name].arrange(passages)
            layouts[name].remember(shown)
            prompt = engine.apply_chat_template(build_messages(question, shown))
            out = engine.generate([prompt], params)[0]
            rows[name].append(
                {
                    "ttft_s": out.timing.time_to_first_token_s,
                    "prompt_tokens": out.num_prompt_tokens,
                    "cached_tokens": out.num_cached_tokens,
                    "right": answer_matches(out.outputs[0].text, golds) if golds else None,
                }
            )
    same_set = sum(
        1
        for a, b in itertools.pairwise(retrieved)
        if a and {p.chunk_id for p in a} == {p.chunk_id for p in b}
    )
    result: dict[str, Any] = {
        "data": "metaqa-1hop" if has_data else "demo",
        "questions": len(rows["reuse"]),
        "sessions": sessions if has_data else len(DEMO_QUESTIONS),
        "documents": len(docs),
        "next_question_retrieves_the_same_set": same_set / max(len(retrieved) - 1, 1),
        "mean_prompt_tokens": statistics.mean(r["prompt_tokens"] for r in rows["reuse"]),
    }
    for name, got in rows.items():
        ttft = [r["ttft_s"] for r in got]
        labelled = [r["right"] for r in got if r["right"] is not None]
        result[name] = {
            "cached_share": sum(r["cached_tokens"] for r in got)
            / sum(r["prompt_tokens"] for r in got),
            "median_ttft_s": statistics.median(ttft),
            "mean_ttft_s": statistics.mean(ttft),
            "accuracy": sum(labelled) / len(labelled) if labelled else None,
        }
    base = result["no-cache"]
    for name in ("reuse", "canonical", "rank"):
        result[name]["mean_ttft_over_no_cache"] = result[name]["mean_ttft_s"] / base["mean_ttft_s"]
    return result


def bench_prefill_roofline(data_dir: Path, lengths: list[int], repeats: int) -> dict[str, Any]:
    """i2: prefill tokens/s and FLOP/s of fresh prompts against ``torch.mm`` on the model's
    linear layers with as many rows (the LM head runs on the last row only: left out of both)."""
    import torch
    import torch.nn.functional as F

    from benchmarks.engine_speed import token_stream
    from engine import LLMEngine, SamplingParams
    from rag.settings import Settings

    config = Settings(_env_file=None).engine_config()
    engine = LLMEngine(replace(config, enable_prefix_caching=False))
    stream = token_stream(data_dir, engine.tokenizer, 8000)
    head = engine.model.lm_head.weight
    weights = [
        m.weight
        for m in engine.model.modules()
        if isinstance(m, torch.nn.Linear) and m.weight is not head
    ]
    flops_per_token = sum(2 * w.numel() for w in weights)
    layers = engine.model.model.layers
    attn, num_layers = layers[0].self_attn, len(layers)
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    engine.generate([stream[:32]], params)  # warm-up
    out: dict[str, Any] = {}
    for length in lengths:
        times = []
        for r in range(repeats):
            start = 500 + r * 1000
            got = engine.generate([stream[start : start + length]], params)[0]
            times.append(got.timing.time_to_first_token_s)
        prefill_s = statistics.median(times)
        x = {w.shape[1]: torch.randn(length, w.shape[1]).to(w) for w in weights}
        mm = []
        for _ in range(10):
            started = time.perf_counter()
            for w in weights:
                torch.mm(x[w.shape[1]], w.t())
            mm.append(time.perf_counter() - started)
        attention = []
        q = torch.randn(1, attn.num_heads, length, attn.head_dim).to(head)
        kv = torch.randn(1, attn.num_kv_heads, length, attn.head_dim).to(head)
        gqa = attn.num_heads != attn.num_kv_heads
        for _ in range(10):
            started = time.perf_counter()
            for _layer in range(num_layers):
                F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=gqa)
            attention.append(time.perf_counter() - started)
        achieved = length * flops_per_token / prefill_s
        peak = length * flops_per_token / min(mm)
        out[str(length)] = {
            "prefill_tokens_per_s": length / prefill_s,
            "prefill_s": prefill_s,
            "mm_s": min(mm),
            "attention_s": min(attention),
            "rest_s": prefill_s - min(mm) - min(attention),
            "achieved_gflop_s": achieved / 1e9,
            "mm_peak_gflop_s": peak / 1e9,
            "fraction_of_mm": achieved / peak,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="i1,i2", help="comma-separated: i1, i2")
    args = parser.parse_args()
    only = set(args.only.split(","))
    result: dict[str, Any] = {"quick": args.quick}
    if "i1" in only:
        sessions = 8 if args.quick else 40
        result["stream"] = bench_stream(args.data_dir, sessions, max_tokens=32)
        print(json.dumps({"stream": result["stream"]}, indent=2))
    if "i2" in only:
        lengths = [128, 512] if args.quick else [128, 256, 512]
        result["prefill"] = bench_prefill_roofline(args.data_dir, lengths, repeats=3)
        print(json.dumps({"prefill": result["prefill"]}, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
