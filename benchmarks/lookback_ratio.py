"""Attention as evidence: the lookback ratio of Lookback Lens (Chuang et al. 2024), measured.

Each labelled answer is replayed through transformers (eager attention, every map kept) as it
was generated: the grounded prompt, then the answer's tokens. For every answer token, layer and
head, the lookback ratio is the mean attention the token gives to the prompt (the passages and
the question) over that plus the mean attention it gives to the answer so far (itself
included); averaged over the answer's tokens it is one number per head. A logistic regression
on the per-head ratios predicts "right". Validated leave one data set out; then, as one more
signal of the fitted confidence (today's guards, as ``benchmarks/judge_cascade.py`` fits the
first stage), each answer's lookback score coming from a classifier that never saw its set.

    python benchmarks/lookback_ratio.py --runs eval-runs/labelled-smollm2-judged \\
        --cache eval-runs/lookback/smollm2.npz
    python benchmarks/lookback_ratio.py --runs eval-runs/labelled-qwen1.5b \\
        --model qwen2.5-coder-1.5b --cache eval-runs/lookback/qwen1.5b.npz

Off the serving path: the engine's attention kernels never materialise the maps, and this
measures whether doing so would earn its cost before anything is built into the engine.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from judgement import DEFAULT_L2, chains, load_answers  # noqa: E402

from benchmarks.research.training import (  # noqa: E402
    FitOptions,
    LabelledAnswer,
    leave_one_set_out,
    rescore,
)
from benchmarks.research.training import Recorded as Seen  # noqa: E402
from guards.registry import signal_directions  # noqa: E402
from rag.eval.metrics import auroc  # noqa: E402

SKIP_SETS = ("rgb_noise",)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--model", default=None, help="the generator's profile (default SmolLM2)")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--cache", type=Path, help="ratios file: read, completed, written")
    parser.add_argument("--c", type=float, default=0.05, help="inverse L2 penalty")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-per-set", type=int, default=None, help="replay at most N a set")
    return parser.parse_args(argv)


def key(answer: LabelledAnswer) -> str:
    return f"{answer.dataset}:{answer.item.id}"


def extract(
    answers: Sequence[LabelledAnswer], model_name: str | None, threads: int
) -> dict[str, np.ndarray]:
    """Per answer (set:id), the (layers, heads) lookback ratios averaged over its tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.model_loader import local_model_dir, resolve_model
    from rag.prompt import build_messages, system_prompt_for

    torch.set_num_threads(threads)
    directory = local_model_dir(resolve_model(model_name))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    rule = system_prompt_for(model_name)
    ratios: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    for k, a in enumerate(answers):
        r = a.record
        passages = a.passages
        prompt = tokenizer.apply_chat_template(
            build_messages(r["question"], passages, rule),
            add_generation_prompt=True,
            tokenize=False,
        )
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(a.answer.strip(), add_special_tokens=False)["input_ids"]
        if not answer_ids:
            continue
        ids = torch.tensor([prompt_ids + answer_ids])
        with torch.no_grad():
            maps = model(ids, output_attentions=True).attentions  # layers x (1, heads, T, T)
        n = len(prompt_ids)
        per_layer = []
        for layer in maps:
            att = layer[0, :, n:, :]  # heads x answer tokens x keys
            context = att[:, :, :n].mean(-1)
            steps = torch.arange(1, len(answer_ids) + 1, dtype=att.dtype)
            own = (
                torch.stack(
                    [att[:, t, n : n + t + 1].sum(-1) for t in range(len(answer_ids))], dim=1
                )
                / steps
            )
            per_layer.append((context / (context + own + 1e-12)).mean(-1))
        ratios[key(a)] = torch.stack(per_layer).numpy().astype(np.float32)
        if (k + 1) % 25 == 0:
            print(f"  {k + 1}/{len(answers)} replayed, {time.perf_counter() - start:.0f} s")
    return ratios


def classifier_scores(
    by_set: dict[str, list[LabelledAnswer]], ratios: dict[str, np.ndarray], c: float
) -> dict[str, np.ndarray]:
    """Each set's answers scored by a classifier trained on every other set."""
    from sklearn.linear_model import LogisticRegression

    x = {s: np.stack([ratios[key(a)].ravel() for a in g]) for s, g in by_set.items()}
    y = {s: np.array([a.correct for a in g]) for s, g in by_set.items()}
    out = {}
    for held in by_set:
        train = [s for s in by_set if s != held]
        xt, yt = np.concatenate([x[s] for s in train]), np.concatenate([y[s] for s in train])
        mean, std = xt.mean(0), xt.std(0) + 1e-6
        model = LogisticRegression(C=c, max_iter=3000, class_weight="balanced")
        model.fit((xt - mean) / std, yt)
        out[held] = model.decision_function((x[held] - mean) / std)
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    answers = load_answers(args.runs, skip=SKIP_SETS, per_set=args.max_per_set)
    ratios: dict[str, np.ndarray] = {}
    if args.cache is not None and args.cache.is_file():
        ratios = dict(np.load(args.cache))
    missing = [a for a in answers if key(a) not in ratios]
    if missing:  # the cache grows with the runs: only new answers are replayed
        ratios.update(extract(missing, args.model, args.threads))
        if args.cache is not None:
            args.cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(args.cache, **ratios)
    answers = [a for a in answers if key(a) in ratios]
    sets = list(dict.fromkeys(a.dataset for a in answers))
    by_set = {s: [a for a in answers if a.dataset == s] for s in sets}
    scores = classifier_scores(by_set, ratios, args.c)

    chain_for = chains(args.data_dir)
    rescore(answers, chain_for, Seen(samples=1, verification=False, judgement=False))
    directions = signal_directions([g for a in answers for g in chain_for(a).guards])
    options = FitOptions(
        directions=directions, l2=DEFAULT_L2, standardize=True, per_set_intercepts=True
    )
    base = leave_one_set_out(answers, options)
    for s in sets:
        for a, v in zip(by_set[s], scores[s], strict=True):
            a.signals["lookback"] = float(v)
    with_options = replace(options, directions={**directions, "lookback": 1})
    with_lookback = leave_one_set_out(answers, with_options)
    weight = with_options.fit(answers).weights.get("lookback", 0.0)
    print(f"{len(answers)} answers replayed ({args.runs.name}); classifier C {args.c}\n")
    print("| set | answers | right | lookback alone (left out) | confidence | with lookback |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in sets:
        y = [a.correct for a in by_set[s]]
        print(
            f"| {s} | {len(y)} | {sum(y)} | {auroc(scores[s].tolist(), y):.3f} | "
            f"{auroc(base[s], y):.3f} | {auroc(with_lookback[s], y):.3f} |"
        )
    print(f"\nweight of the lookback score, fitted on every set: {weight:+.3f} (0: dropped)")


if __name__ == "__main__":
    main()
