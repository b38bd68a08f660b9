#!/usr/bin/env bash
# Labelled generations for the judgement benchmark, one `ragguard eval` run per development set.
# Resumable: run it again and each set continues where its records end.
#
#   bash benchmarks/labelled_generations.sh docs/eval-configs/labelled-qwen1.5b.toml eval-runs/labelled-qwen1.5b
#
# Sets and sizes: the first N questions of each after the eval's fixed shuffle; rgb_noise (no
# passage holds the answer) is asked in full and kept apart, as it has no right answers.
set -euo pipefail
config=${1:?usage: labelled_generations.sh CONFIG.toml OUT_DIR [SET:N ...]}
out=${2:?usage: labelled_generations.sh CONFIG.toml OUT_DIR [SET:N ...]}
shift 2
sets=("$@")
if [ ${#sets[@]} -eq 0 ]; then
    sets=(rgb:50 squad2:100 hotpotqa:50 rgb_noise:50 musique:50 pubmedqa:50 metaqa:40 halueval_ask:40)
fi
bin=${RAGGUARD_BIN:-.venv/bin/ragguard}
for s in "${sets[@]}"; do
    name=${s%%:*}
    "$bin" eval "$name" --limit "${s##*:}" --out "$out/$name" --config "$config" --quiet
done
