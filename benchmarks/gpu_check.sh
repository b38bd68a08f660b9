#!/usr/bin/env bash
# GPU check, for a CUDA machine (under 5 minutes): the CUDA correctness tests against transformers
# (engine, generator, faiss-gpu when installed), then the engine benchmarks (a)-(e) on the GPU.
# Usage: bash benchmarks/gpu_check.sh   (from a checkout whose `make install` has run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible"
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
"$PY" -m pytest -q -m gpu tests
"$PY" benchmarks/engine_speed.py --quick --device cuda
