"""Does the answer lean on the passages? Two generator-side signals measured on labelled answers.

For each recorded answer of labelled ``ragguard eval`` runs (one folder per data set, as for
benchmarks/judgement.py), the default generator scores the answer's tokens (teacher-forced, the
first ``--max-answer-tokens``) twice: after the grounded prompt the pipeline sent (system prompt,
passages, question) and after the question alone. It prints, per data set, the AUROC for answer
correctness of:

    with_passages      mean token log-probability after the grounded prompt
    without_passages   the same after the question alone
    pmi                their difference per token, averaged (how much the passages raise it)
    pmi_first          the same over the first 8 tokens
    min_with_passages  the least likely token's log-probability after the grounded prompt
    tokens             the answer's length in tokens (the length artefact of lenient matching)

    python benchmarks/context_reliance.py --runs eval-runs/labelled
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.training import LabelledAnswer, load_run  # noqa: E402
from rag.eval.metrics import auroc  # noqa: E402
from rag.prompt import build_messages  # noqa: E402
from rag.types import Passage  # noqa: E402

SIGNALS = (
    "with_passages",
    "without_passages",
    "pmi",
    "pmi_first",
    "min_with_passages",
    "tokens",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder of <set>/ eval outputs")
    parser.add_argument("--max-answer-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, help="write every answer's signals here (JSON)")
    return parser.parse_args(argv)


def prompts(answer: LabelledAnswer) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The grounded chat the pipeline sent (passages in the recorded order) and the same chat
    with the question alone."""
    passages = [
        Passage(str(j), str(j), p["text"], 1.0) for j, p in enumerate(answer.record["passages"])
    ]
    question = answer.item.question.strip()
    grounded = build_messages(question, passages)
    bare = [grounded[0], {"role": "user", "content": f"Question: {question}\nAnswer:"}]
    return grounded, bare


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from engine.model_loader import load_model_and_tokenizer, resolve_model

    model, tokenizer = load_model_and_tokenizer(resolve_model(None), device="cpu", dtype="float32")

    def answer_logprobs(messages: list[dict[str, str]], answer_ids: list[int]) -> torch.Tensor:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + answer_ids])
        with torch.inference_mode():
            logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
        chosen = torch.tensor(answer_ids)[:, None]
        return torch.log_softmax(logits, -1).gather(1, chosen)[:, 0]

    answers: list[LabelledAnswer] = []
    for run_dir in sorted(p for p in args.runs.iterdir() if (p / "dataset.jsonl").is_file()):
        answers += load_run(run_dir)
    rows = []
    for k, a in enumerate(answers):
        text = a.answer.strip()
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: args.max_answer_tokens]
        if not ids:
            continue
        grounded, bare = prompts(a)
        with_p, without_p = answer_logprobs(grounded, ids), answer_logprobs(bare, ids)
        gain = with_p - without_p
        rows.append(
            {
                "set": a.dataset,
                "id": a.item.id,
                "correct": a.correct,
                "with_passages": float(with_p.mean()),
                "without_passages": float(without_p.mean()),
                "pmi": float(gain.mean()),
                "pmi_first": float(gain[:8].mean()),
                "min_with_passages": float(with_p.min()),
                "tokens": len(ids),
            }
        )
        if k % 100 == 0:
            print(f"{k}/{len(answers)} answers scored", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows) + "\n")
    print("\n| set | answers | " + " | ".join(SIGNALS) + " |")
    print("| --- " * (len(SIGNALS) + 2) + "|")
    for name in sorted({r["set"] for r in rows}):
        group = [r for r in rows if r["set"] == name]
        labels = [r["correct"] for r in group]
        values = [auroc([r[s] for r in group], labels) for s in SIGNALS]
        print(f"| {name} | {len(group)} | " + " | ".join(f"{v:.3f}" for v in values) + " |")


if __name__ == "__main__":
    main()
