"""The model profiles side by side on this machine: load time, peak memory, first token, decode.

Each (profile, weights) variant runs in a process of its own, so its peak RSS is its own:

- load: engine construction from the converted cache (the one-time join, hash and conversion
  are timed apart, by ``--cold``, which empties a private cache first);
- TTFT: a grounded prompt of ~800 tokens (four real MuSiQue paragraphs and a question in our
  prompt, as an answer's prompt is), prefix cache cold; median of 3;
- decode: 128 tokens at batch 1 after a 197-token prompt, end of sequence ignored; median of 3;
  and a batch of 8 such requests at once (combined tokens/s);
- weights: the bytes the model's parameters and buffers hold once loaded (and quantized).

Variants: float32, int8, int4, w8a8 (``EngineConfig.quantization``; int4 and w8a8 on the CPU only).

    python benchmarks/model_speed.py                       # smollm2-135m and qwen2.5-coder-1.5b
    python benchmarks/model_speed.py --profiles qwen2.5-coder-1.5b --variants int8
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
VARIANTS = ("float32", "int8", "int4", "w8a8", "w4a8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="smollm2-135m,qwen2.5-coder-1.5b")
    parser.add_argument("--variants", default="float32,int8")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def rag_prompt_messages(data_dir: Path) -> list[dict[str, str]]:
    from rag.eval import datasets as ds
    from rag.prompt import build_messages
    from rag.types import Passage

    question = ds.read_json(data_dir / ds.MULTIHOP / "musique_train.json")[0]
    paragraphs = [p for p in question["paragraphs"] if p["is_supporting"]]
    paragraphs += [p for p in question["paragraphs"] if not p["is_supporting"]]
    passages = [
        Passage(p["title"], f"{p['title']}#0", p["paragraph_text"], 0.5) for p in paragraphs[:4]
    ]
    return build_messages(question["question"], passages)


def judge_conversation(data_dir: Path) -> list[dict[str, str]]:
    """A judgement as the judge is asked it: the two supporting paragraphs, the question, an
    answer."""
    from rag.eval import datasets as ds
    from rag.stages.check.judge import judge_messages
    from rag.types import Passage

    question = ds.read_json(data_dir / ds.MULTIHOP / "musique_train.json")[0]
    cited = [p for p in question["paragraphs"] if p["is_supporting"]][:2]
    passages = [
        (n, Passage(p["title"], p["title"], p["paragraph_text"], 0.5))
        for n, p in enumerate(cited, 1)
    ]
    return judge_messages(question["question"], passages, f"{question['answer']} [1].")


def worker(profile: str, variant: str, data_dir: Path, repeats: int) -> dict[str, object]:
    from engine import EngineConfig, LLMEngine, SamplingParams
    from engine.layers.quantization import weight_bytes

    started = time.perf_counter()
    engine = LLMEngine(
        EngineConfig(
            model=profile,
            dtype="float32",
            quantization=None if variant == "float32" else variant,
            enable_prefix_caching=False,
        )
    )
    load_s = time.perf_counter() - started
    rag = engine.apply_chat_template(rag_prompt_messages(data_dir))
    words = " ".join(rag.split()[:150])
    short = engine.apply_chat_template([{"role": "user", "content": words}])
    ttft, decode = [], []
    for _ in range(repeats):
        out = engine.generate([rag], SamplingParams(max_tokens=1, temperature=0.0))[0]
        ttft.append(out.timing.time_to_first_token_s)
        params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
        out = engine.generate([short], params)[0]
        marks = out.timing.token_times
        decode.append((len(marks) - 1) / (marks[-1] - marks[0]))
    judge_s = []
    judge_prompt = engine.apply_chat_template(judge_conversation(data_dir))
    for _ in range(repeats):  # the judge: one prefill and one token (prefix cache off)
        out = engine.generate([judge_prompt], SamplingParams(max_tokens=1, logprobs=20))[0]
        judge_s.append(out.timing.e2e_latency_s)
    began = time.perf_counter()
    outs = engine.generate(
        [short] * 8, SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
    )
    batch_tps = sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - began)
    return {
        "profile": profile,
        "variant": variant,
        "load_s": load_s,
        "weight_mib": weight_bytes(engine.model) / 2**20,
        "rag_prompt_tokens": engine.count_tokens(rag),
        "ttft_s": statistics.median(ttft),
        "judge_s": statistics.median(judge_s),
        "judge_prompt_tokens": engine.count_tokens(judge_prompt),
        "decode_tok_s": statistics.median(decode),
        "batch8_tok_s": batch_tps,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.data_dir, args.repeats)))
        return
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")
    rows = []
    for profile in args.profiles.split(","):
        for variant in args.variants.split(","):
            command = [sys.executable, __file__, "--worker", profile, variant]
            command += ["--data-dir", str(args.data_dir), "--repeats", str(args.repeats)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| model | weights | weight MiB | load (cached) | peak RSS | TTFT, RAG prompt "
        "| one judgement | decode, batch 1 | batch 8 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['profile']} | {r['variant']} | {r['weight_mib']:.0f} | {r['load_s']:.1f} s | "
            f"{r['peak_rss_gib']:.2f} GiB | "
            f"{r['ttft_s']:.2f} s ({r['rag_prompt_tokens']} tokens) | "
            f"{r['judge_s']:.2f} s ({r['judge_prompt_tokens']} tokens) | "
            f"{r['decode_tok_s']:.1f} tok/s | {r['batch8_tok_s']:.1f} tok/s |"
        )
    print(
        f"\ncommand: python benchmarks/model_speed.py --profiles {args.profiles} "
        f"--variants {args.variants}"
    )


if __name__ == "__main__":
    main()
