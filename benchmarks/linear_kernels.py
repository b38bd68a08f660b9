"""The decoder's matrix products of a model's shapes in each CPU weight format, side by side.

Random weights of the model's shapes (every layer its own, so a pass reads them from memory as
a decode step does, not from cache), quantized by each format's layer; one pass multiplies each
layer's fused q/k/v, output, fused gate/up and down projections and then the LM head, for 1, 8
and 32 activation rows (one decoding sequence, a small and a full batch). Passes of the formats
alternate, and each figure is the median of ``--repeats`` passes. Also each format's error on one
layer's real-sized product against float32.

    python benchmarks/linear_kernels.py --model qwen2.5-coder-1.5b
    python benchmarks/linear_kernels.py --model smollm2-135m --rows 1,8,32

No model file is read: only the shapes (from the models' configs) are used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.layers.int4 import Int4Linear
from engine.layers.quantization import Int8Linear
from engine.layers.w4a8 import BlockInt8Linear, W4A8Linear
from engine.layers.w8a8 import W8A8Linear


@dataclass(frozen=True)
class Shapes:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int
    vocab: int

    def layer(self) -> dict[str, tuple[int, int]]:
        """(out, in) of each product of one decoder layer, as the engine fuses them."""
        head_dim = self.hidden // self.heads
        qkv = (self.heads + 2 * self.kv_heads) * head_dim
        return {
            "qkv_proj": (qkv, self.hidden),
            "o_proj": (self.hidden, self.hidden),
            "gate_up_proj": (2 * self.intermediate, self.hidden),
            "down_proj": (self.hidden, self.intermediate),
        }


MODELS = {
    "qwen2.5-coder-1.5b": Shapes(1536, 8960, 12, 2, 28, 151936),
    "smollm2-135m": Shapes(576, 1536, 9, 3, 30, 49152),
}
"""From the models' own configs."""

Make = Callable[[str, nn.Linear], nn.Module]
FORMATS: dict[str, tuple[Make, Make]] = {
    # (a decoder layer's product, the LM head), as engine.models.llama builds them
    "int8": (
        lambda _, lin: Int8Linear.from_linear(lin),
        lambda _, lin: Int8Linear.from_linear(lin),
    ),
    "int4": (lambda _, lin: Int4Linear(lin), lambda _, lin: Int8Linear.from_linear(lin)),
    "w8a8": (
        lambda name, lin: Int8Linear.from_linear(lin) if name == "down_proj" else W8A8Linear(lin),
        lambda _, lin: Int8Linear.from_linear(lin),
    ),
    "w4a8": (lambda _, lin: W4A8Linear(lin), lambda _, lin: BlockInt8Linear.from_linear(lin)),
}


def build(shapes: Shapes, fmt: str, seed: int) -> list[nn.Module]:
    """Every layer's products and the head, in ``fmt`` (random weights, float32 first)."""
    make_layer, make_head = FORMATS[fmt]
    torch.manual_seed(seed)
    modules: list[nn.Module] = []
    with torch.no_grad():
        for _ in range(shapes.layers):
            for name, (out, inp) in shapes.layer().items():
                modules.append(make_layer(name, nn.Linear(inp, out, bias=False)))
        modules.append(make_head("lm_head", nn.Linear(shapes.hidden, shapes.vocab, bias=False)))
    return modules


def one_pass(modules: list[nn.Module], inputs: dict[int, torch.Tensor]) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        for module in modules:
            module(inputs[module.in_features])  # type: ignore[index]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-coder-1.5b")
    parser.add_argument("--formats", default="int8,int4,w8a8,w4a8")
    parser.add_argument("--rows", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    shapes = MODELS[args.model]
    formats = args.formats.split(",")
    built = {fmt: build(shapes, fmt, seed=0) for fmt in formats}
    figures: dict[str, object] = {
        "model": args.model,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = {width: torch.randn(rows, width) for width in (shapes.hidden, shapes.intermediate)}
        times: dict[str, list[float]] = {fmt: [] for fmt in formats}
        for fmt in formats:  # warm-up
            one_pass(built[fmt], inputs)
        for _ in range(args.repeats):
            for fmt in formats:
                times[fmt].append(one_pass(built[fmt], inputs))
        for fmt in formats:
            figures[f"{fmt}_rows{rows}_ms"] = round(statistics.median(times[fmt]) * 1e3, 2)
    # Error on one real-sized product (layer 0's gate/up) against its float32 weights.
    torch.manual_seed(1)
    out, inp = shapes.layer()["gate_up_proj"]
    linear = nn.Linear(inp, out, bias=False)
    x = torch.randn(8, inp)
    with torch.no_grad():
        exact = linear(x)
        for fmt in formats:
            layer = FORMATS[fmt][0]("gate_up_proj", linear)
            error = (layer(x) - exact).norm() / exact.norm()
            figures[f"{fmt}_relative_error"] = round(float(error), 5)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
