"""Draft-model speculation against plain decoding, one RAG answer at a time (batch 1).

The target (default Qwen2.5-Coder-1.5B-Instruct) answers grounded prompts as the pipeline writes
them (MuSiQue questions with four of their paragraphs, ``engine_speed.rag_answer_prompts``),
greedy, up to ``--max-tokens``; plain decoding and each speculative variant (the draft model
with k guesses a step; the draft model after prompt lookup) take turns on every prompt, each
with its prefix cache emptied first so that every side prefills the prompt itself. Reported per
variant: answer time and decode-phase time (after the first token) against plain, medians and
totals; the draft's acceptance rate and the tokens each target step yields; and whether every
answer is token for token plain decoding's.

    python benchmarks/draft_speculation.py                         # int8, k = 4, 8 prompts
    python benchmarks/draft_speculation.py --quantization none --num-draft-tokens 3,5
    python benchmarks/draft_speculation.py --prompts 3 --max-tokens 96 --ignore-eos
    python benchmarks/draft_speculation.py --quantization w8a8 --draft-quantization int8 \
        --also-plain int8          # a w8a8 target verifying an int8 draft, and int8 alone
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--quantization", default="int8", choices=["none", "int8", "int4", "w8a8", "w4a8"]
    )
    parser.add_argument(
        "--draft-quantization",
        default="same",
        choices=["same", "none", "int8", "int4", "w8a8", "w4a8"],
        help="the draft model's weight format (same: --quantization)",
    )
    parser.add_argument(
        "--also-plain",
        choices=["none", "int8", "int4", "w8a8", "w4a8"],
        help="also plain decoding in this weight format (against plain in --quantization)",
    )
    parser.add_argument("--num-draft-tokens", default="4", help="comma-separated k values")
    parser.add_argument(
        "--with-prompt-lookup", action="store_true", help="also draft+prompt_lookup"
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="generate --max-tokens every time (the decode phase, not the short answers)",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.engine_speed import rag_answer_prompts
    from engine import EngineConfig, LLMEngine, SamplingParams

    args = parse_args(argv)

    def weight_format(name: str) -> str | None:
        return None if name == "none" else name

    def build(**extra: Any) -> LLMEngine:
        started = time.perf_counter()
        options = {"quantization": weight_format(args.quantization)} | extra
        engine = LLMEngine(
            EngineConfig(
                model=args.target,
                device="cpu",
                kv_cache_memory_bytes=512 << 20,
                max_num_seqs=4,
                **options,
            )
        )
        print(f"built {extra or 'plain'} in {time.perf_counter() - started:.1f} s", flush=True)
        return engine

    variants: dict[str, LLMEngine] = {"plain": build()}
    if args.also_plain:
        variants[f"plain {args.also_plain}"] = build(quantization=weight_format(args.also_plain))
    draft_format = args.draft_quantization
    for k in (int(v) for v in args.num_draft_tokens.split(",")):
        draft = {
            "draft_model": args.draft,
            "num_draft_tokens": k,
            "draft_quantization": draft_format
            if draft_format == "same"
            else weight_format(draft_format),
        }
        variants[f"draft k={k}"] = build(speculative="draft", **draft)
        if args.with_prompt_lookup:
            variants[f"draft+lookup k={k}"] = build(speculative="draft+prompt_lookup", **draft)
    plain = variants["plain"]
    prompts = rag_answer_prompts(args.data_dir, plain.apply_chat_template, args.prompts)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=args.ignore_eos)
    for engine in variants.values():
        engine.generate([prompts[0][:200]], SamplingParams(max_tokens=4))  # warm-up
    before = {name: engine.stats() for name, engine in variants.items()}
    answer: dict[str, list[float]] = {name: [] for name in variants}
    decode: dict[str, list[float]] = {name: [] for name in variants}
    tokens: dict[str, list[list[int]]] = {name: [] for name in variants}
    for index, prompt in enumerate(prompts):
        for name, engine in variants.items():
            engine.block_manager.hash_to_block.clear()  # each side prefills the prompt itself
            out = engine.generate([prompt], params)[0]
            timing = out.timing
            answer[name].append(timing.e2e_latency_s)
            decode[name].append(timing.e2e_latency_s - timing.time_to_first_token_s)
            tokens[name].append(out.outputs[0].token_ids)
        line = ", ".join(f"{n} {answer[n][-1]:.1f} s" for n in variants)
        print(f"prompt {index + 1}/{len(prompts)}: {len(tokens['plain'][-1])} tokens; {line}")
    results: dict[str, Any] = {
        "target": args.target,
        "draft": args.draft,
        "quantization": args.quantization,
        "draft_quantization": args.draft_quantization,
        "ignore_eos": args.ignore_eos,
        "num_prompts": len(prompts),
        "mean_prompt_tokens": statistics.mean(plain.count_tokens(p) for p in prompts),
        "mean_output_tokens": statistics.mean(len(t) for t in tokens["plain"]),
        "plain_answer_s_median": statistics.median(answer["plain"]),
        "plain_decode_tok_s": sum(len(t) - 1 for t in tokens["plain"]) / sum(decode["plain"]),
    }
    for name, engine in variants.items():
        if name == "plain":
            continue
        stats, start = engine.stats(), before[name]
        drafted = stats.num_draft_tokens - start.num_draft_tokens
        accepted = stats.num_accepted_tokens - start.num_accepted_tokens
        generated = stats.num_generated_tokens - start.num_generated_tokens
        ratios = [p / s for p, s in zip(answer["plain"], answer[name], strict=True)]
        results[name] = {
            "identical_answers": sum(
                a == b for a, b in zip(tokens["plain"], tokens[name], strict=True)
            ),
            "answer_speedup_median": statistics.median(ratios),
            "answer_speedup_total": sum(answer["plain"]) / sum(answer[name]),
            "decode_speedup_total": sum(decode["plain"]) / sum(decode[name]),
            "decode_tok_s": sum(len(t) - 1 for t in tokens[name]) / sum(decode[name]),
            # Guesses verification agreed with (those past an end of sequence included).
            "acceptance_rate": accepted / max(1, drafted),
            # One request at a time, each prompt prefilled in one step giving the first token:
            # the other tokens over the other steps.
            "tokens_per_decode_step": (generated - len(prompts))
            / max(1, stats.num_steps - start.num_steps - len(prompts)),
        }
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
