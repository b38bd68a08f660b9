#!/usr/bin/env bash
# GPU check, for a CUDA machine. First the CUDA tests against transformers (engine eager and with
# CUDA-graph decode, the AsyncEngine, the transformers generator, faiss-gpu when installed), then
# the engine benchmarks (a)-(e) on the GPU, with the CUDA-graph engine side by side in (a) and (c).
# Arguments go to the benchmark; without any it runs --quick, so the whole check stays under
# 5 minutes (on one H200: tests 76 s; the full-size benchmark alone takes about 4 minutes).
# Usage: bash benchmarks/gpu_check.sh   (from a checkout whose `make install` has run)
#   bash benchmarks/gpu_check.sh --data-dir ../shared/data   (the full-size benchmark)
#   PY=python3 TESTS="tests/engine" bash benchmarks/gpu_check.sh   (another interpreter, fewer tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TESTS=${TESTS:-tests}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible"
print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
PY
# shellcheck disable=SC2086  # TESTS is a list of paths
"$PY" -m pytest -q -m gpu $TESTS
if [ $# -eq 0 ]; then set -- --quick; fi
"$PY" benchmarks/engine_speed.py --device cuda --cuda-graphs "$@"
