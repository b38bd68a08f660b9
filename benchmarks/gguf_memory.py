"""Peak memory of converting a GGUF to safetensors: transformers' whole-model way vs ours.

Each conversion runs in a fresh subprocess; its peak RSS is the child's ``ru_maxrss`` from
``os.wait4`` (which counts imports too, the same for both ways). Models:

* ``default``: the shipped SmolLM2-135M-Instruct Q4_1 GGUF;
* ``1.5b``: a Qwen2-1.5B-shaped model (``qwen2`` GGUF architecture: hidden 1536, 28 layers,
  12 heads, 2 KV heads, intermediate 8960, q/k/v biases, tied embeddings) with random f16
  weights and the default model's 49,152-token tokenizer, written here with ``gguf.GGUFWriter``.

    .venv/bin/python benchmarks/gguf_memory.py [--models default,1.5b] [--workdir DIR] [--quick]

Prints a markdown table; the big temporary files are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def old_convert(gguf_path: Path, out: Path) -> None:
    """What ``engine.model_loader`` did before: load the whole model, then save_pretrained."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype="float32", **kwargs)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def new_convert(gguf_path: Path, out: Path) -> None:
    """The tensor-by-tensor conversion."""
    from engine.gguf_convert import write_converted_gguf

    write_converted_gguf(gguf_path, out)


def _child(way: str, gguf_path: Path, out: Path) -> None:
    """Run one conversion and print its duration (the parent measures memory)."""
    out.mkdir(parents=True)
    start = time.perf_counter()
    (old_convert if way == "old" else new_convert)(gguf_path, out)
    print(json.dumps({"seconds": time.perf_counter() - start}))


def measure(way: str, gguf_path: Path, out: Path) -> tuple[float, float]:
    """(peak RSS in GiB, conversion seconds) of one conversion in a fresh process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, __file__, "--child", way, str(gguf_path), str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{way} conversion of {gguf_path.name} failed ({proc.returncode})")
    seconds = json.loads(stdout.strip().splitlines()[-1])["seconds"]
    return usage.ru_maxrss / (1 << 20), seconds  # ru_maxrss is in KiB on Linux


def write_qwen2_gguf(path: Path, *, layers: int = 28) -> None:
    """A random f16 Qwen2-1.5B-shaped GGUF, streamed tensor by tensor (never all in memory)."""
    import gguf
    import numpy as np

    from engine.model_loader import resolve_model

    hidden, heads, kv_heads, inter = 1536, 12, 2, 8960
    head_dim = hidden // heads
    shipped = resolve_model(None)
    reader = gguf.GGUFReader(Path(shipped.directory) / str(shipped.gguf_file))
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)

    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name("random-qwen2-1.5b")
    writer.add_block_count(layers)
    writer.add_context_length(32768)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(inter)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(vocab)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            main = field.types[0]
            sub = field.types[-1] if main == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), main, sub)

    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (vocab, hidden)}
    for i in range(layers):
        b = f"blk.{i}."
        shapes |= {
            b + "attn_norm.weight": (hidden,),
            b + "attn_q.weight": (hidden, hidden),
            b + "attn_q.bias": (hidden,),
            b + "attn_k.weight": (kv_heads * head_dim, hidden),
            b + "attn_k.bias": (kv_heads * head_dim,),
            b + "attn_v.weight": (kv_heads * head_dim, hidden),
            b + "attn_v.bias": (kv_heads * head_dim,),
            b + "attn_output.weight": (hidden, hidden),
            b + "ffn_norm.weight": (hidden,),
            b + "ffn_gate.weight": (inter, hidden),
            b + "ffn_up.weight": (inter, hidden),
            b + "ffn_down.weight": (hidden, inter),
        }
    shapes["output_norm.weight"] = (hidden,)
    for name, shape in shapes.items():
        dtype = np.float16 if len(shape) == 2 else np.float32
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * dtype().nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    pool = (np.random.default_rng(0).standard_normal(1 << 22, dtype=np.float32) * 0.02).astype(
        np.float16
    )
    for i, (name, shape) in enumerate(shapes.items()):
        size = int(np.prod(shape))
        values = np.resize(np.roll(pool, i), size)  # cheap, varied, deterministic
        if len(shape) == 1:
            values = values.astype(np.float32) + (1.0 if "norm" in name else 0.0)
        writer.write_tensor_data(values.reshape(shape))
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default,1.5b")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="2 layers for the big model")
    parser.add_argument("--child", nargs=3, metavar=("WAY", "GGUF", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return

    from engine.model_loader import resolve_model

    work = Path(tempfile.mkdtemp(prefix="gguf-memory-", dir=args.workdir))
    rows = []
    try:
        for model in args.models.split(","):
            if model == "default":
                source = resolve_model(None)
                gguf_path = Path(source.directory) / str(source.gguf_file)
                label = "SmolLM2-135M-Instruct Q4_1 (llama)"
            else:
                gguf_path = work / "random-qwen2-1.5b.f16.gguf"
                start = time.perf_counter()
                write_qwen2_gguf(gguf_path, layers=2 if args.quick else 28)
                print(f"wrote {gguf_path} in {time.perf_counter() - start:.0f} s", flush=True)
                label = "random Qwen2-1.5B-shaped f16 (qwen2)"
            size = gguf_path.stat().st_size / (1 << 30)
            results = {}
            for way in ("old", "new"):
                out = work / f"{model}-{way}"
                results[way] = measure(way, gguf_path, out)
                out_size = sum(f.stat().st_size for f in out.iterdir()) / (1 << 30)
                print(f"{model} {way}: {results[way]} ({out_size:.2f} GiB written)", flush=True)
                shutil.rmtree(out)
            (old_rss, old_s), (new_rss, new_s) = results["old"], results["new"]
            rows.append(
                f"| {label} | {size:.2f} GiB | {old_rss:.2f} GiB | {new_rss:.2f} GiB "
                f"| {old_rss / new_rss:.1f}x | {old_s:.0f} s | {new_s:.0f} s |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| model | GGUF size | old peak RSS | new peak RSS | old/new | old s | new s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
