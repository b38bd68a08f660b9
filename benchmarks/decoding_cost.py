"""What two-distribution decoding costs: plain against context-aware or contrastive decoding on the
same grounded prompts, one request at a time, alternated, greedy.

The prompts are MuSiQue questions with four of their own paragraphs (supporting ones first), as
the pipeline writes them; context-aware decoding's second prompt is the same question without
passages, as the generate stage writes it. Reported: answer time (median and total) and tokens,
and how many answers differ from plain decoding's.

    python benchmarks/decoding_cost.py                                   # SmolLM2, context_aware
    python benchmarks/decoding_cost.py --model qwen2.5-coder-1.5b --decoding contrastive \\
        --amateur qwen2.5-coder-0.5b --prompts 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"


def prompt_pairs(data_dir: Path, apply_template: Any, count: int) -> list[tuple[str, str]]:
    """(grounded prompt, the same question without passages) for the first MuSiQue questions."""
    from benchmarks.engine_speed import rag_questions
    from rag.prompt import build_messages

    return [
        (
            apply_template(build_messages(question, passages)),
            apply_template(build_messages(question, [])),
        )
        for question, passages in rag_questions(data_dir, count)
    ]


def main(argv: list[str] | None = None) -> None:
    from engine import EngineConfig, LLMEngine, SamplingParams

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="profile, GGUF or model dir (default SmolLM2)"
    )
    parser.add_argument(
        "--decoding", default="context_aware", choices=["context_aware", "contrastive"]
    )
    parser.add_argument("--amateur", default=None, help="decoding=contrastive: the amateur model")
    parser.add_argument(
        "--quantization",
        default="auto",
        choices=["auto", "none", "int8", "int4", "w8a8", "w4a8"],
        help="weights (default auto: each model's CPU default, as the settings' default)",
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    common: dict[str, Any] = {
        "model": args.model,
        "device": "cpu",
        "quantization": None if args.quantization == "none" else args.quantization,
        "kv_cache_memory_bytes": 256 << 20,
        "max_num_seqs": 4,
    }
    plain = LLMEngine(EngineConfig(**common))
    other = LLMEngine(EngineConfig(**common, decoding=args.decoding, amateur_model=args.amateur))
    pairs = prompt_pairs(args.data_dir, plain.apply_chat_template, args.prompts)
    for engine in (plain, other):
        engine.generate([pairs[0][0][:200]], SamplingParams(max_tokens=4))  # warm-up
    times: dict[str, list[float]] = {"plain": [], args.decoding: []}
    tokens: dict[str, list[list[int]]] = {"plain": [], args.decoding: []}
    for prompt, free in pairs:
        for name, engine in (("plain", plain), (args.decoding, other)):
            engine.block_manager.hash_to_block.clear()  # each side prefills the prompt itself
            extra = {"context_free_prompt": free} if name == "context_aware" else {}
            params = SamplingParams(max_tokens=args.max_tokens, **extra)
            out = engine.generate([prompt], params)[0]
            times[name].append(out.timing.e2e_latency_s)
            tokens[name].append(out.outputs[0].token_ids)
    name = args.decoding
    print(
        json.dumps(
            {
                "model": plain.model_name,
                "decoding": name,
                "quantization": plain.quantization,
                "amateur": args.amateur,
                "num_prompts": len(pairs),
                "plain_answer_s_median": statistics.median(times["plain"]),
                f"{name}_answer_s_median": statistics.median(times[name]),
                "cost_total": sum(times[name]) / sum(times["plain"]),
                "cost_median": statistics.median(
                    o / p for o, p in zip(times[name], times["plain"], strict=True)
                ),
                # Per generated token (prefill included): answers of different lengths compared.
                "cost_per_token": (sum(times[name]) / sum(len(t) for t in tokens[name]))
                / (sum(times["plain"]) / sum(len(t) for t in tokens["plain"])),
                "plain_mean_tokens": statistics.mean(len(t) for t in tokens["plain"]),
                f"{name}_mean_tokens": statistics.mean(len(t) for t in tokens[name]),
                "answers_changed": sum(
                    a != b for a, b in zip(tokens["plain"], tokens[name], strict=True)
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
