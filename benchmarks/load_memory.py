"""Peak memory and time of loading a model into our engine, per weight format.

Each load runs in a fresh subprocess (``engine.loaded_model.load_model`` on the CPU, after the
GGUF's converted cache exists); its peak RSS is the child's ``ru_maxrss`` from ``os.wait4``,
imports included. ``--code DIR`` loads with another checkout's engine as well (a worktree of an
earlier commit), side by side in the same run, loads alternated:

    .venv/bin/python benchmarks/load_memory.py --models default,qwen2.5-coder-1.5b \\
        --formats none,int8,int4 [--code /path/to/old/checkout] [--repeats 2]

Prints a markdown table: the median load time and peak RSS of each (code, model, format), and
the weight bytes the loaded model holds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
sys.path.insert(0, {code!r})
import torch
from engine.config import EngineConfig
from engine.layers.quantization import weight_bytes
from engine.loaded_model import load_model
from engine.model_loader import local_model_dir, resolve_model

model = {model!r}
local_model_dir(resolve_model(None if model == "default" else model))  # the cache, not timed
config = EngineConfig(quantization={quantization!r})
start = time.perf_counter()
loaded = load_model(None if model == "default" else model, config, "cpu")
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "weight_bytes": weight_bytes(loaded.model)}}))
"""


def run_child(code: Path, model: str, quantization: str | None) -> dict[str, float]:
    source = CHILD.format(code=str(code), model=model, quantization=quantization)
    process = subprocess.Popen(
        [sys.executable, "-c", source], stdout=subprocess.PIPE, cwd=str(code), text=True
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"load of {model} ({quantization}) with {code} failed: {status}")
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default")
    parser.add_argument("--formats", default="none,int8,int4", help="none = float32")
    parser.add_argument("--code", type=Path, help="another checkout to load with, side by side")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    codes = [("this checkout", ROOT)] + ([("--code", args.code.resolve())] if args.code else [])
    rows: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for model in args.models.split(","):
        for fmt in args.formats.split(","):
            quantization = None if fmt == "none" else fmt
            for _ in range(args.repeats):
                for label, code in codes:
                    result = run_child(code, model, quantization)
                    rows.setdefault((model, fmt, label), []).append(result)
                    print(
                        json.dumps({"model": model, "format": fmt, "code": label, **result}),
                        file=sys.stderr,
                        flush=True,
                    )
    print("| model | format | code | load (median) | peak RSS | weights |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (model, fmt, label), results in rows.items():
        seconds = statistics.median(r["seconds"] for r in results)
        peak = statistics.median(r["peak_rss_bytes"] for r in results)
        weights = results[0]["weight_bytes"]
        print(
            f"| {model} | {'float32' if fmt == 'none' else fmt} | {label} | {seconds:.1f} s "
            f"| {peak / 2**30:.2f} GiB | {weights / 2**20:,.0f} MiB |"
        )


if __name__ == "__main__":
    main()
