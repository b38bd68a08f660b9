"""Engine benchmarks: our paged-KV continuous-batching engine against transformers ``generate``.

    python benchmarks/engine_speed.py            # full run (about 15 minutes on 2 cores)
    python benchmarks/engine_speed.py --quick    # the same nine, smaller
    python benchmarks/engine_speed.py --only f,g # some of them

a. RAG-shaped load: requests with 150-600-token prompts and 64-128 output tokens arriving at once;
   output tokens/s of ours vs HF one request at a time and HF static batches (left-padded, each
   batch run to its longest output). Every variant runs in its own process: peak RSS is its own.
b. Self-consistency: n = 5 samples of one 500-token prompt (shared prefix) vs one sample and vs 5
   independent requests (prefix caching off).
c. Batch-1 decode tokens/s vs HF (median of 3, alternated), and vs the memory-bandwidth bound
   (model bytes / copy rate).
d. Prefix cache: time to first token with a repeated 400-token prefix, hit vs miss.
e. Roofline: decode FLOP/s at the batch of (a) vs plain ``torch.mm`` on the model's own shapes.
f. int8, int4 and w8a8 vs the float model: batch-1 decode tokens/s (median of 3,
   alternated), a batch of 32, weight bytes, and how many of the first 32 greedy tokens on the 21
   parity prompts stay identical (bf16 weights beside it, for scale). int4 and w8a8 on CPU only.
g. Prompt-lookup speculation on RAG answers: MuSiQue questions with four of their own
   paragraphs (the supporting ones first) in our grounded prompt, greedy, one at a time:
   answer time with and without speculation, identical tokens, acceptance rate; and (a)'s load
   with speculation on (``ours-prompt-lookup``), which must not lose throughput.
h. Beam search, k = 4, four beams returned, against ``transformers.generate(num_beams=4)`` on
   the same parity prompts, alternated: total time and identical beams.
(i, RAG prefill: the prompt's layout and the prefix cache on a stream of related questions, and
prefill against ``torch.mm``, is ``benchmarks/rag_prefill.py``: it needs an index.)
j. llama.cpp as a CPU anchor (optional: llama-cpp-python, ``benchmarks/llama_cpp_anchor.py``):
   the same GGUF with as many threads as torch, beside ours in float32, int8 and int4,
   alternated: (c)'s batch-1 decode (decode tokens/s and with the prefill, median of 3) and
   (g)'s RAG answers (up to 64 tokens, greedy, one at a time), and those answers as a 64-request
   load on our int4 engine; ratios ours / llama.cpp. Without the package it prints one line and
   the run goes on.

With ``--device cuda --cuda-graphs``, (a) and (c) also run our engine with decode steps replayed as
CUDA graphs (``ours-cuda-graphs``), side by side with the eager engine; GPU runs report peak GPU
memory beside peak RSS.

Prompts are real text (MuSiQue passages) cut to exact token lengths; outputs ignore end-of-sequence
so that every run produces exactly the requested tokens. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
SEED = 0
DEVICE = "cpu"  # --device; workers get it on their command line


def synchronize() -> None:
    """Wait for queued GPU work, so that a host clock measures it."""
    import torch

    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def decode_seconds(timing: Any, *, with_prefill: bool = False) -> float:
    """A finished request's time after its first token (or from its arrival, ``with_prefill``)."""
    assert timing.e2e_latency_s is not None and timing.time_to_first_token_s is not None
    if with_prefill:
        return float(timing.e2e_latency_s)
    return float(timing.e2e_latency_s - timing.time_to_first_token_s)


def token_stream(data_dir: Path, tokenizer: Any, num_tokens: int) -> list[int]:
    """Real text as token ids: MuSiQue passages, or the embedded demo collection (about 10,000
    tokens, repeated to length) when the data is absent. Not a short repeated sentence: prompts
    cut from it at different offsets would share whole blocks and flatter the prefix cache."""
    corpus = data_dir / "hipporag_multihop_subsets" / "musique_train_corpus.json"
    if corpus.is_file():
        text = " ".join(p["text"] for p in json.loads(corpus.read_text())[:2000])
    else:
        demo = sorted((ROOT / "rag" / "data" / "demo").glob("*.md"))
        text = "\n\n".join(path.read_text(encoding="utf-8") for path in demo)
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise SystemExit(f"no benchmark text: neither {corpus} nor the demo collection")
    while len(ids) < num_tokens:
        ids = ids + ids
    return ids[:num_tokens]


def rag_requests(
    stream: list[int], count: int, prompt_range: tuple[int, int], output_range: tuple[int, int]
) -> list[tuple[list[int], int]]:
    rng = random.Random(SEED)
    requests = []
    for _ in range(count):
        length = rng.randint(*prompt_range)
        start = rng.randrange(0, len(stream) - length)
        requests.append((stream[start : start + length], rng.randint(*output_range)))
    return requests


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory() -> dict[str, float]:
    """Peak resident memory of this process, and peak GPU memory allocated on a GPU run."""
    peaks = {"peak_rss_mb": peak_rss_mb()}
    if DEVICE.startswith("cuda"):
        import torch

        peaks["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return peaks


# ---------------------------------------------------------------- workers (one process each)
def worker_load(args: argparse.Namespace) -> dict[str, Any]:
    """(a) for one variant: ours, ours-cuda-graphs, ours-prompt-lookup, hf-single, hf-batch-8,
    hf-batch-32."""
    from engine import EngineConfig, SamplingParams

    spec = json.loads(Path(args.requests_file).read_text())
    requests = [(r[0], r[1]) for r in spec["requests"]]
    variant = args.worker_variant
    if variant.startswith("ours"):
        from engine import LLMEngine

        engine = LLMEngine(
            EngineConfig(
                device=DEVICE,
                max_num_seqs=64,
                max_num_batched_tokens=2048,
                kv_cache_memory_bytes=spec["kv_bytes"],
                cuda_graphs=variant == "ours-cuda-graphs",
                speculative="prompt_lookup" if variant == "ours-prompt-lookup" else None,
            )
        )
        params = [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in requests]
        engine.generate([requests[0][0]], SamplingParams(max_tokens=2))  # warm-up
        started = time.perf_counter()
        outputs = engine.generate([p for p, _ in requests], params)
        elapsed = time.perf_counter() - started
        produced = sum(len(o.outputs[0].token_ids) for o in outputs)
        stats = engine.stats()
        extra: dict[str, Any] = {
            "kv_blocks": engine.block_manager.num_blocks,
            "draft_tokens": stats.num_draft_tokens,
            "accepted_tokens": stats.num_accepted_tokens,
            "steps_without_speculation": stats.num_steps_without_speculation,
        }
        graphs = engine.runner.decode_graphs
        if graphs is not None:  # captures happen inside the timed run: say how long they took
            extra |= {"graphs_captured": len(graphs.shapes), "capture_s": graphs.capture_time_s}
    else:
        from engine import HFGenerator

        batch = 1 if variant == "hf-single" else int(variant.rsplit("-", 1)[1])
        subset = requests[: spec["hf_single_count"]] if batch == 1 else requests
        hf = HFGenerator(EngineConfig(device=DEVICE, max_num_seqs=batch))
        hf.generate([subset[0][0]], SamplingParams(max_tokens=2))
        started = time.perf_counter()
        produced = 0
        for i in range(0, len(subset), batch):
            group = subset[i : i + batch]
            longest = max(n for _, n in group)  # a static batch runs to its longest output
            outs = hf.generate(
                [p for p, _ in group], SamplingParams(max_tokens=longest, ignore_eos=True)
            )
            produced += sum(
                min(n, len(o.outputs[0].token_ids)) for (_, n), o in zip(group, outs, strict=True)
            )
        elapsed = time.perf_counter() - started
        extra = {"num_requests": len(subset)}
    return {
        "variant": variant,
        "output_tokens": produced,
        "elapsed_s": elapsed,
        "tokens_per_s": produced / elapsed,
        **peak_memory(),
        **extra,
    }


# ---------------------------------------------------------------- in-process benchmarks
def bench_self_consistency(
    engine_cls: Any, config_cls: Any, params_cls: Any, stream: list[int], max_tokens: int
) -> dict[str, Any]:
    prompt = stream[1000:1500]
    shared = engine_cls(config_cls(device=DEVICE, kv_cache_memory_bytes=256 << 20))
    shared.generate([prompt[:20]], params_cls(max_tokens=2))
    times = {}
    params = params_cls(temperature=0.8, seed=1, max_tokens=max_tokens, ignore_eos=True)
    for name, run in (
        ("one_sample_s", lambda e: e.generate([prompt], params)),
        ("n5_shared_prefix_s", lambda e: e.generate([prompt], params.with_overrides(n=5))),
    ):
        shared.block_manager.hash_to_block.clear()  # no prefix-cache help between runs
        started = time.perf_counter()
        run(shared)
        times[name] = time.perf_counter() - started
    independent = engine_cls(
        config_cls(device=DEVICE, kv_cache_memory_bytes=256 << 20, enable_prefix_caching=False)
    )
    independent.generate([prompt[:20]], params_cls(max_tokens=2))
    started = time.perf_counter()
    independent.generate([prompt] * 5, [params.with_overrides(seed=s) for s in range(5)])
    times["n5_independent_s"] = time.perf_counter() - started
    times["n5_over_one"] = times["n5_shared_prefix_s"] / times["one_sample_s"]
    times["independent_over_shared"] = times["n5_independent_s"] / times["n5_shared_prefix_s"]
    return times


def bench_decode(
    generators: dict[str, Any], params_cls: Any, stream: list[int], max_tokens: int
) -> dict[str, Any]:
    """``generators``: "ours" and "hf", and "ours_cuda_graphs" when measured."""
    import torch

    prompt = stream[3000:3197]
    params = params_cls(max_tokens=max_tokens, ignore_eos=True)
    samples: dict[str, list[float]] = {name: [] for name in generators}
    for _ in range(3):  # alternated, so that a slow spell of the machine hits every side
        for name, gen in generators.items():
            out = gen.generate([prompt], params)[0]
            t = out.timing
            samples[name].append(
                (len(out.outputs[0].token_ids) - 1) / (t.e2e_latency_s - t.time_to_first_token_s)
            )
    rates = {name: statistics.median(rates) for name, rates in samples.items()}
    model = generators["ours"].model
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    src = torch.ones(256 << 20, dtype=torch.uint8, device=DEVICE)
    dst = torch.zeros_like(src)  # allocated and touched beforehand: measure copying, not paging
    copies = []
    for _ in range(5):
        synchronize()
        started = time.perf_counter()
        dst.copy_(src)
        synchronize()
        copies.append(2 * src.numel() / (time.perf_counter() - started))
    bandwidth = statistics.median(copies)
    bound = bandwidth / model_bytes
    figures = {f"{name}_tokens_per_s": rate for name, rate in rates.items()}
    for name in rates:
        if name != "hf":
            figures[f"{name}_over_hf"] = rates[name] / rates["hf"]
    return {
        **figures,
        "model_bytes": model_bytes,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "bandwidth_bound_tokens_per_s": bound,
        "ours_over_bound": rates["ours"] / bound,
    }


def bench_prefix_cache(
    engine: Any, params_cls: Any, stream: list[int], repeats: int
) -> dict[str, Any]:
    misses: list[float] = []
    hits: list[float] = []
    params = params_cls(max_tokens=1, ignore_eos=True)
    for r in range(repeats):
        prefix = stream[5000 + r * 450 : 5400 + r * 450]
        for bucket, suffix in ((misses, [11, 12, 13]), (hits, [21, 22, 23])):
            out = engine.generate([prefix + suffix], params)[0]
            bucket.append(out.timing.time_to_first_token_s)
    miss, hit = statistics.median(misses), statistics.median(hits)
    return {"miss_ttft_s": miss, "hit_ttft_s": hit, "hit_over_miss": hit / miss}


def bench_roofline(engine: Any, params_cls: Any, stream: list[int], batch: int) -> dict[str, Any]:
    """Decode FLOP/s (2 FLOPs per weight per token) at ``batch`` running sequences vs
    ``torch.mm`` on the same weight shapes at the same batch, in this run."""
    import torch

    for i in range(batch):
        engine.add_request(
            stream[i * 100 : i * 100 + 64], params_cls(max_tokens=40, ignore_eos=True)
        )
    while engine.scheduler.waiting or any(
        s.num_output_tokens == 0 for s in engine.scheduler.running
    ):
        engine.step()  # prefill everything first
    steps = 16
    synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        engine.step()
    synchronize()
    decode_tokens_per_s = batch * steps / (time.perf_counter() - started)
    while engine.has_unfinished_requests():
        engine.step()
    weights = [m.weight for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    flops_per_token = sum(2 * w.numel() for w in weights)
    x = {w.shape[1]: torch.randn(batch, w.shape[1]).to(w) for w in weights}
    timings = []
    for _ in range(20):
        synchronize()
        started = time.perf_counter()
        for w in weights:
            torch.mm(x[w.shape[1]], w.t())
        synchronize()
        timings.append(time.perf_counter() - started)
    achieved = decode_tokens_per_s * flops_per_token
    peak = batch * flops_per_token / min(timings)  # the best of 20: the machine's peak
    return {
        "batch": batch,
        "decode_tokens_per_s": decode_tokens_per_s,
        "achieved_gflop_s": achieved / 1e9,
        "mm_peak_gflop_s": peak / 1e9,
        "fraction_of_peak": achieved / peak,
    }


def first_divergence(reference: list[int], other: list[int]) -> int:
    """How many leading tokens two outputs share."""
    return next(
        (i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b),
        min(len(reference), len(other)),
    )


QUANTIZED = ("int8", "int4", "w8a8", "w4a8")
"""The weight formats (f) measures against float32, side by side."""


def bench_int8(stream: list[int], quick: bool) -> dict[str, Any]:
    """(f): fp32, bf16, int8, int4, w8a8 and w4a8 engines side by side in this process."""
    from engine import EngineConfig, LLMEngine, SamplingParams
    from engine.layers.quantization import weight_bytes
    from tests.engine.test_llm_engine import QUESTIONS

    def build(**extra: Any) -> LLMEngine:
        return LLMEngine(EngineConfig(device=DEVICE, kv_cache_memory_bytes=256 << 20, **extra))

    engines = {"float": build(), "bf16": build(dtype="bfloat16")}
    for name in QUANTIZED:
        if name in ("int4", "w8a8", "w4a8") and DEVICE != "cpu":
            continue  # PyTorch's CPU int4 kernel and fbgemm only
        engines[name] = build(quantization=name)
    timed = [name for name in engines if name != "bf16"]
    prompt = stream[3000:3197]
    decode = SamplingParams(max_tokens=32 if quick else 128, ignore_eos=True)
    batch_prompts = [stream[i * 97 : i * 97 + 64] for i in range(32)]
    batch_params = SamplingParams(max_tokens=16 if quick else 40, ignore_eos=True)
    rates: dict[str, list[float]] = {name: [] for name in timed}
    batch_rates: dict[str, list[float]] = {name: [] for name in timed}
    for name in timed:
        engines[name].generate([prompt[:16]], SamplingParams(max_tokens=2))  # warm-up
    for _ in range(3):  # alternated, so that a slow spell of the machine hits every side
        for name in timed:
            engine = engines[name]
            out = engine.generate([prompt], decode)[0]
            rates[name].append((len(out.outputs[0].token_ids) - 1) / decode_seconds(out.timing))
            engine.block_manager.hash_to_block.clear()
            started = time.perf_counter()
            outs = engine.generate(batch_prompts, batch_params)
            produced = sum(len(o.outputs[0].token_ids) for o in outs)
            batch_rates[name].append(produced / (time.perf_counter() - started))
    chats = [
        engines["float"].apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS
    ]
    greedy = SamplingParams(max_tokens=32)
    tokens = {
        name: [o.outputs[0].token_ids for o in engine.generate(chats, greedy)]
        for name, engine in engines.items()
    }
    total = sum(len(t) for t in tokens["float"])
    figures: dict[str, Any] = {}
    for name in engines:
        figures[f"{name}_weight_mb"] = weight_bytes(engines[name].model) / 2**20
        if name != "float":
            shared = sum(
                first_divergence(a, b) for a, b in zip(tokens["float"], tokens[name], strict=True)
            )
            figures[f"{name}_identical_prefix_share"] = shared / total
    for name in timed:
        decode_rate = statistics.median(rates[name])
        batch_rate = statistics.median(batch_rates[name])
        figures[f"{name}_decode_tokens_per_s"] = decode_rate
        figures[f"{name}_batch32_tokens_per_s"] = batch_rate
        if name != "float":
            figures[f"{name}_over_float_batch1"] = decode_rate / statistics.median(rates["float"])
            figures[f"{name}_over_float_batch32"] = batch_rate / statistics.median(
                batch_rates["float"]
            )
            figures[f"{name}_weight_share"] = (
                figures[f"{name}_weight_mb"] / figures["float_weight_mb"]
            )
    return figures


def rag_questions(data_dir: Path, count: int) -> list[tuple[str, list[Any]]]:
    """Questions with the passages the pipeline would show: MuSiQue questions, each with four of
    its own paragraphs (supporting ones first); the demo collection when the data is absent."""
    import ast

    from rag.types import Passage

    path = data_dir / "hipporag_multihop_subsets" / "musique_train.json"
    questions: list[tuple[str, list[Any]]] = []
    if path.is_file():
        for item in json.loads(path.read_text())[:count]:
            paragraphs = item["paragraphs"]
            if isinstance(paragraphs, str):
                paragraphs = ast.literal_eval(paragraphs)
            paragraphs.sort(key=lambda p: (not p.get("is_supporting", False), p["idx"]))
            passages = [
                Passage(p["title"], str(p["idx"]), f"{p['title']}: {p['paragraph_text']}", 1.0)
                for p in paragraphs[:4]
            ]
            questions.append((item["question"], passages))
        return questions
    for doc in sorted((ROOT / "rag" / "data" / "demo").glob("*.md"))[:count]:
        text = doc.read_text(encoding="utf-8")
        question = f"What does the passage say about {doc.stem.replace('-', ' ')}?"
        questions.append((question, [Passage(doc.name, "0", text[:1200], 1.0)]))
    return questions


def rag_answer_prompts(data_dir: Path, apply_template: Any, count: int) -> list[str]:
    """Grounded prompts as the pipeline writes them, for ``rag_questions``."""
    from rag.prompt import build_messages

    return [
        apply_template(build_messages(question, passages))
        for question, passages in rag_questions(data_dir, count)
    ]


def bench_prompt_lookup(data_dir: Path, count: int) -> dict[str, Any]:
    """(g), one request at a time: answer time with and without prompt lookup (alternated)."""
    from engine import EngineConfig, LLMEngine, SamplingParams

    def build(**extra: Any) -> LLMEngine:
        return LLMEngine(EngineConfig(device=DEVICE, kv_cache_memory_bytes=256 << 20, **extra))

    plain, speculative = build(), build(speculative="prompt_lookup")
    prompts = rag_answer_prompts(data_dir, plain.apply_chat_template, count)
    params = SamplingParams(max_tokens=160)  # the pipeline's default answer limit
    for engine in (plain, speculative):
        engine.generate([prompts[0][:200]], SamplingParams(max_tokens=2))  # warm-up
    times: dict[str, list[float]] = {"plain": [], "speculative": []}
    decode_times: dict[str, list[float]] = {"plain": [], "speculative": []}
    identical = 0
    output_tokens = 0
    for prompt in prompts:
        outs = {}
        for name, engine in (("plain", plain), ("speculative", speculative)):
            engine.block_manager.hash_to_block.clear()  # each side prefills the prompt itself
            out = engine.generate([prompt], params)[0]
            times[name].append(decode_seconds(out.timing, with_prefill=True))
            decode_times[name].append(decode_seconds(out.timing))
            outs[name] = out.outputs[0].token_ids
        identical += outs["plain"] == outs["speculative"]
        output_tokens += len(outs["plain"])
    stats = speculative.stats()
    ratios = [p / s for p, s in zip(times["plain"], times["speculative"], strict=True)]
    return {
        "num_prompts": len(prompts),
        "mean_output_tokens": output_tokens / len(prompts),
        "identical_outputs": identical,
        "plain_answer_s_median": statistics.median(times["plain"]),
        "speculative_answer_s_median": statistics.median(times["speculative"]),
        "speedup_median": statistics.median(ratios),
        "speedup_total": sum(times["plain"]) / sum(times["speculative"]),
        "decode_speedup_total": sum(decode_times["plain"]) / sum(decode_times["speculative"]),
        "acceptance_rate": stats.num_accepted_tokens / max(1, stats.num_draft_tokens),
        # Every decode step yields one token plus the drafts it accepted.
        "tokens_per_step": stats.num_generated_tokens
        / max(1, stats.num_generated_tokens - stats.num_accepted_tokens),
    }


def bench_beam_search(engine: Any, count: int, max_tokens: int) -> dict[str, Any]:
    """(h): beam search k = 4 on the parity prompts, ours and transformers alternated."""
    import torch

    from engine import EngineConfig, HFGenerator, SamplingParams
    from tests.engine.test_llm_engine import QUESTIONS

    hf = HFGenerator(EngineConfig(device=DEVICE, dtype=engine.config.resolved_dtype()))
    params = SamplingParams(use_beam_search=True, beam_width=4, n=4, max_tokens=max_tokens)
    times = {"ours": 0.0, "hf": 0.0}
    identical = 0
    for question in QUESTIONS[:count]:
        prompt = engine.apply_chat_template([{"role": "user", "content": question}])
        engine.block_manager.hash_to_block.clear()
        started = time.perf_counter()
        out = engine.generate([prompt], params)[0]
        synchronize()
        times["ours"] += time.perf_counter() - started
        ids = torch.tensor([out.prompt_token_ids], device=DEVICE)
        started = time.perf_counter()
        with torch.inference_mode():
            ref = cast(Any, hf.model).generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                num_beams=4,
                num_return_sequences=4,
            )
        synchronize()
        times["hf"] += time.perf_counter() - started
        beams = []
        for row in ref:
            tokens = row[ids.shape[1] :].tolist()
            end = next((i for i, t in enumerate(tokens) if t in hf.eos_token_ids), len(tokens))
            beams.append(tokens[:end])
        identical += [c.token_ids for c in out.outputs] == beams
    return {
        "num_prompts": count,
        "max_tokens": max_tokens,
        "identical": identical,
        "ours_s": times["ours"],
        "hf_s": times["hf"],
        "ours_over_hf": times["hf"] / times["ours"],
    }


def bench_llama_cpp(engine: Any, data_dir: Path, stream: list[int], quick: bool) -> dict[str, Any]:
    """(j): llama.cpp on the GGUF ``engine`` loaded, beside it (float32), int8 and int4 engines,
    and an int4 engine under a 64-request load; ``{"skipped": line}`` where it cannot run (see
    ``benchmarks/llama_cpp_anchor.py``, which also runs on its own for any model)."""
    import torch

    from benchmarks import llama_cpp_anchor as anchor

    gguf = anchor.engine_gguf(engine)
    skipped = anchor.skip_reason(DEVICE, gguf)
    if skipped is not None or gguf is None:
        return {"skipped": skipped}
    engines = {"float32": engine, **anchor.build_engines(None, ["int8", "int4"], 256 << 20)}
    prompts = rag_answer_prompts(data_dir, engine.apply_chat_template, 4 if quick else 16)
    answer_prompts = [engine.prompts.encode(p) for p in prompts]
    decode_prompt, decode_tokens = stream[3000:3197], 32 if quick else 128  # (c)'s
    threads = torch.get_num_threads()
    n_ctx = anchor.context_size(decode_prompt, decode_tokens, answer_prompts)
    process = anchor.LlamaCppProcess(gguf, threads, n_ctx)
    try:
        figures = anchor.bench(
            process,
            gguf,
            engines,
            decode_prompt,
            decode_tokens,
            answer_prompts,
            threads,
            load_engine=anchor.load_engine_for(None, "int4"),
        )
    finally:
        process.close()
    return {**figures, "llama_cpp_extra_buffers": process.extra_buffers}


def run_worker(variant: str, requests_file: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--device",
        DEVICE,
        "--worker-variant",
        variant,
        "--requests-file",
        str(requests_file),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller versions of the same")
    parser.add_argument(
        "--only",
        default="abcdefghj",
        help="sections to run, e.g. f,g (default: all of a-h and j)",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="also run our engine with CUDA-graph decode in (a) and (c) (CUDA only)",
    )
    parser.add_argument("--worker-variant", help=argparse.SUPPRESS)
    parser.add_argument("--requests-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.cuda_graphs and not DEVICE.startswith("cuda"):
        parser.error("--cuda-graphs needs --device cuda")
    if args.worker_variant:
        print(json.dumps(worker_load(args)))
        return
    sections = {c for c in args.only.replace(",", "") if c.strip()}
    if not sections or not sections <= set("abcdefghj"):
        parser.error("--only takes letters a to h and j")

    import tempfile

    import torch

    from engine import EngineConfig, HFGenerator, LLMEngine, SamplingParams

    torch.manual_seed(SEED)
    q = args.quick
    engine = LLMEngine(EngineConfig(device=DEVICE, kv_cache_memory_bytes=512 << 20))
    stream = token_stream(args.data_dir, engine.tokenizer, 40_000)
    num_requests = 16 if q else 64
    results: dict[str, Any] = {}
    targets: dict[str, bool] = {}
    load: dict[str, Any] = {}
    load_ratios: dict[str, float] = {}
    variants = []
    if "a" in sections:
        variants = ["ours", "hf-single", "hf-batch-8"] + ([] if q else ["hf-batch-32"])
        if args.cuda_graphs:
            variants.insert(1, "ours-cuda-graphs")
    if "g" in sections:
        variants = list(dict.fromkeys(["ours", *variants, "ours-prompt-lookup"]))
    if variants:
        requests = rag_requests(stream, num_requests, (150, 600), (16, 32) if q else (64, 128))
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "requests.json"
            spec.write_text(
                json.dumps(
                    {"requests": requests, "hf_single_count": 2 if q else 8, "kv_bytes": 1 << 30}
                )
            )
            load = {v: run_worker(v, spec) for v in variants}
        ours = load["ours"]["tokens_per_s"]
        load_ratios = {
            f"ours_over_{v.replace('-', '_')}": ours / load[v]["tokens_per_s"]
            for v in variants
            if not v.startswith("ours")
        }
        if args.cuda_graphs and "ours-cuda-graphs" in load:
            graphed = load["ours-cuda-graphs"]["tokens_per_s"]
            load_ratios["cuda_graphs_over_eager"] = graphed / ours
            load_ratios["cuda_graphs_over_hf_single"] = graphed / load["hf-single"]["tokens_per_s"]
        if "ours-prompt-lookup" in load:
            load_ratios["prompt_lookup_over_plain"] = (
                load["ours-prompt-lookup"]["tokens_per_s"] / ours
            )
        results["a_rag_load"] = {"num_requests": num_requests, "runs": load, **load_ratios}
    if "a" in sections:
        targets["a_vs_hf_single>=4"] = load_ratios["ours_over_hf_single"] >= 4
        targets["a_vs_hf_batch_8>=1.5"] = load_ratios["ours_over_hf_batch_8"] >= 1.5
        if not q:
            targets["a_vs_hf_batch_32>=1.2"] = load_ratios["ours_over_hf_batch_32"] >= 1.2
    if "b" in sections:
        results["b_self_consistency"] = bench_self_consistency(
            LLMEngine, EngineConfig, SamplingParams, stream, 16 if q else 64
        )
        targets["b_n5<=2x_one"] = results["b_self_consistency"]["n5_over_one"] <= 2
    if "c" in sections:
        decoders = {"ours": engine, "hf": HFGenerator(EngineConfig(device=DEVICE, max_num_seqs=1))}
        if args.cuda_graphs:
            decoders["ours_cuda_graphs"] = LLMEngine(
                EngineConfig(device=DEVICE, kv_cache_memory_bytes=512 << 20, cuda_graphs=True)
            )
        results["c_decode_batch1"] = bench_decode(
            decoders, SamplingParams, stream, 32 if q else 128
        )
        targets["c_vs_hf>=1"] = results["c_decode_batch1"]["ours_over_hf"] >= 1
    if "d" in sections:
        results["d_prefix_cache"] = bench_prefix_cache(
            engine, SamplingParams, stream, 3 if q else 5
        )
        targets["d_hit<=0.3x_miss"] = results["d_prefix_cache"]["hit_over_miss"] <= 0.3
    if "e" in sections:
        results["e_roofline"] = bench_roofline(
            engine, SamplingParams, stream, min(num_requests, 64)
        )
        targets["e>=50%_of_peak"] = results["e_roofline"]["fraction_of_peak"] >= 0.5
    if "f" in sections:
        results["f_int8"] = f = bench_int8(stream, q)
        targets["f_int8_batch1>=1.7x"] = f["int8_over_float_batch1"] >= 1.7
        targets["f_identical>=90%"] = f["int8_identical_prefix_share"] >= 0.9
        if "int4_decode_tokens_per_s" in f:
            targets["f_int4_weights<=0.3x"] = f["int4_weight_share"] <= 0.3
            targets["f_int4_batch1>=int8"] = (
                f["int4_decode_tokens_per_s"] >= f["int8_decode_tokens_per_s"]
            )
    if "g" in sections:
        results["g_prompt_lookup"] = g = bench_prompt_lookup(args.data_dir, 8 if q else 30)
        targets["g_speedup>=1.5x"] = g["speedup_total"] >= 1.5
        targets["g_identical"] = g["identical_outputs"] == g["num_prompts"]
        targets["g_load>=0.95x"] = load_ratios["prompt_lookup_over_plain"] >= 0.95
    if "h" in sections:
        results["h_beam_search"] = h = bench_beam_search(engine, 8 if q else 21, 16 if q else 32)
        targets["h_beam>=2x_hf"] = h["ours_over_hf"] >= 2
        targets["h_identical"] = h["identical"] == h["num_prompts"]
    if "j" in sections:
        results["j_llama_cpp"] = bench_llama_cpp(engine, args.data_dir, stream, q)
    if load:
        print(f"\n(a) {num_requests} RAG-shaped requests, output tokens/s and peak RSS")
        for variant, r in load.items():
            gpu = f"  GPU {r['peak_gpu_mb']:7.0f} MB" if "peak_gpu_mb" in r else ""
            print(
                f"  {variant:18s} {r['tokens_per_s']:8.1f} tok/s  {r['elapsed_s']:7.1f} s  "
                f"RSS {r['peak_rss_mb']:7.0f} MB{gpu}"
            )
        for k, v in load_ratios.items():
            print(f"  {k}: {v:.2f}x")
    for key, figures in results.items():
        if key == "a_rag_load":
            continue
        if "skipped" in figures:
            print(f"({key[0]}) {figures['skipped']}")
            continue
        print(
            f"({key[0]}) "
            + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
            )
        )
    print("targets: " + ", ".join(f"{k} {'met' if ok else 'MISSED'}" for k, ok in targets.items()))
    print(f"reproduce: python {shlex.join(sys.argv)}")
    print(
        json.dumps(
            {
                "benchmark": "engine",
                "quick": q,
                **results,
                "targets": targets,
                "command": "python " + shlex.join(sys.argv),
            }
        )
    )


if __name__ == "__main__":
    main()
