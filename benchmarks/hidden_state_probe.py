"""Does the generator's own hidden state tell right answers from wrong ones? A linear probe.

The issue's "light head on frozen embeddings", on the generator's network rather than the
embedder's: each labelled answer is replayed as self-verification asks it (the answer's
conversation, then "Is your answer correct and supported by the passages?"), and the hidden
state at the prompt's last token, after each decoder layer, is the probe's input. A logistic
regression on one layer's state predicts "right". Everything is validated leave one data set
out; the probe's layer is chosen inside each fold (by leave-one-set-out over the training sets
only), so no held-out label picks it. Printed: the probe alone per layer and per set, then the
fitted confidence (today's guards, as ``benchmarks/judgement.py`` fits it) with and without the
probe's score as one more signal, each training answer's probe score coming from a probe that
never saw its set.

    python benchmarks/hidden_state_probe.py --runs eval-runs/labelled \\
        --cache eval-runs/probe/states.pt

Extraction replays every answer once through transformers (about 1.3 s an answer on 2 cores);
``--cache`` keeps the states for later runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag.eval.metrics import auroc  # noqa: E402
from rag.eval.training import FitOptions, LabelledAnswer, leave_one_set_out, rescore  # noqa: E402

LAYERS = (12, 15, 18, 21, 24, 27, 30)
Scorer = Callable[[str], np.ndarray]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--cache", type=Path, help="states file: read if present, else written")
    parser.add_argument("--c", type=float, default=0.01, help="inverse L2 penalty of the probe")
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args(argv)


def extract(answers: Sequence[LabelledAnswer], threads: int) -> dict[str, np.ndarray]:
    """Per answer id (set:id), the last prompt token's state after every layer (float16)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.model_loader import local_model_dir, resolve_model
    from engine.prompts import PromptTokenizer
    from rag.verification import verification_messages

    torch.set_num_threads(threads)
    directory = local_model_dir(resolve_model(None))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    chat = PromptTokenizer(tokenizer, max_model_len=1 << 30)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    states: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    for k, a in enumerate(answers):
        r = a.record
        passages = a.passages
        messages = verification_messages(r["question"], passages, a.answer.strip())
        ids = torch.tensor([chat.encode(chat.apply_chat_template(messages))])
        with torch.no_grad():
            hidden = model(ids, output_hidden_states=True).hidden_states
        states[key(a)] = torch.stack([h[0, -1] for h in hidden]).half().numpy()
        if (k + 1) % 50 == 0:
            print(f"  {k + 1}/{len(answers)} states, {time.perf_counter() - start:.0f} s")
    return states


def key(answer: LabelledAnswer) -> str:
    return f"{answer.dataset}:{answer.item.id}"


class Probes:
    """Logistic probes on one layer's states, trained on some data sets, scoring another. Each
    (training sets, layer) probe is trained once: the layer choice and the tables reuse them."""

    def __init__(
        self, by_set: dict[str, list[LabelledAnswer]], states: dict[str, np.ndarray], c: float
    ):
        self.by_set, self.c = by_set, c
        self.states = {  # per set: (answers, layers, hidden)
            s: np.stack([states[key(a)] for a in group]).astype(np.float32)
            for s, group in by_set.items()
        }
        self.trained: dict[tuple[frozenset[str], int], Scorer] = {}

    def train(self, sets: Sequence[str], layer: int) -> Scorer:
        cached = self.trained.get((frozenset(sets), layer))
        if cached is not None:
            return cached
        from sklearn.linear_model import LogisticRegression

        x = np.concatenate([self.states[s][:, layer] for s in sets])
        y = np.concatenate([[a.correct for a in self.by_set[s]] for s in sets])
        mean, std = x.mean(0), x.std(0) + 1e-6
        probe = LogisticRegression(C=self.c, max_iter=3000, class_weight="balanced")
        probe.fit((x - mean) / std, y)

        def scorer(s: str) -> np.ndarray:
            return probe.decision_function((self.states[s][:, layer] - mean) / std)

        self.trained[frozenset(sets), layer] = scorer
        return scorer

    def auroc(self, train: Sequence[str], held_out: str, layer: int) -> float:
        labels = [a.correct for a in self.by_set[held_out]]
        return auroc(self.train(train, layer)(held_out).tolist(), labels)

    def choose_layer(self, sets: Sequence[str]) -> int:
        """The layer whose probe does best left out *within* ``sets`` (mean AUROC)."""

        def inner(layer: int) -> float:
            return float(np.mean([self.auroc([t for t in sets if t != s], s, layer) for s in sets]))

        return max(LAYERS, key=inner)


def fmt(v: float) -> str:
    return f"{v:.3f}"


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from judgement import DEFAULT_DATA_DIR, DEFAULT_L2, chains, default_seen, load_answers

    from guards.registry import signal_directions

    args = parse_args(argv)
    answers = load_answers(args.runs)
    if args.cache is not None and args.cache.is_file():
        loaded = np.load(args.cache)
        states = {k: loaded[k] for k in loaded.files}
    else:
        states = extract(answers, args.threads)
        if args.cache is not None:
            args.cache.parent.mkdir(parents=True, exist_ok=True)
            with args.cache.open("wb") as f:
                np.savez(f, **states)
    missing = [key(a) for a in answers if key(a) not in states]
    if missing:
        raise SystemExit(f"{len(missing)} answers have no cached state (first: {missing[0]})")
    sets = list(dict.fromkeys(a.dataset for a in answers))
    by_set = {s: [a for a in answers if a.dataset == s] for s in sets}
    probes = Probes(by_set, states, args.c)

    print(f"{len(answers)} labelled answers; probe C {args.c}\n")
    print("Probe alone, left out (AUROC; trained on the other sets):\n")
    print("| layer | " + " | ".join(sets) + " | mean |")
    print("| --- " * (len(sets) + 2) + "|")
    for layer in LAYERS:
        cells = [probes.auroc([t for t in sets if t != s], s, layer) for s in sets]
        print(f"| {layer} | " + " | ".join(map(fmt, cells)) + f" | {fmt(float(np.mean(cells)))} |")

    chain_for = chains(DEFAULT_DATA_DIR, None)
    rescore(answers, chain_for, default_seen())
    directions = dict(signal_directions([g for a in answers for g in chain_for(a).guards]))
    directions["hidden_probe"] = 1
    options = FitOptions(
        directions=directions, l2=DEFAULT_L2, standardize=True, per_set_intercepts=True
    )
    base = leave_one_set_out(answers, options)
    print("\nThe fitted confidence, left out, without and with the probe as a signal:\n")
    print("| set | layer chosen | probe alone | confidence | with the probe | probe weight |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for held_out in sets:
        rest = [s for s in sets if s != held_out]
        layer = probes.choose_layer(rest)
        scores = {held_out: probes.train(rest, layer)(held_out)}
        for s in rest:  # each training answer scored by a probe that never saw its set
            scores[s] = probes.train([t for t in rest if t != s], layer)(s)
        for s in sets:
            for a, v in zip(by_set[s], scores[s], strict=True):
                a.signals["hidden_probe"] = float(v)
        model = options.fit([a for a in answers if a.dataset != held_out])
        labels = [a.correct for a in by_set[held_out]]
        row = (
            auroc(scores[held_out].tolist(), labels),
            auroc(base[held_out], labels),
            auroc([model.score(a.signals) for a in by_set[held_out]], labels),
        )
        rows.append(row)
        weight = model.weights.get("hidden_probe", 0.0)
        print(f"| {held_out} | {layer} | " + " | ".join(map(fmt, row)) + f" | {weight:+.2f} |")
    means = [fmt(float(np.mean([r[i] for r in rows]))) for i in range(3)]
    print("| mean | | " + " | ".join(means) + " | |")


if __name__ == "__main__":
    main()
