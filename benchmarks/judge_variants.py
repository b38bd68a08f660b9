"""How the judge is asked: recorded answers judged again another way, side by side.

The labelled runs record the judge's P(yes) as the pipeline asked it (``RAGGUARD_JUDGE_PASSAGES``
= cited, by default). This replays the same answers through the judge model with the passages
it reads changed (``--passages all``), in batches on our engine, and prints per set the AUROC
of the recorded judgement and of the variant on the same answers.

    python benchmarks/judge_variants.py --runs eval-runs/labelled-qwen1.5b --passages all \\
        --sets rgb,hotpotqa,squad2 --per-set 50

``--rewrite`` stores the variant's P(yes) in the records as their ``judgement`` (the records'
other fields untouched, the old value kept as ``judgement_before``): how records made before a
change of the judge's prompt are brought up to date without generating the answers again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.training import load_run  # noqa: E402
from rag.eval.metrics import auroc, auroc_interval  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--passages", choices=("cited", "all"), default="cited")
    parser.add_argument("--sets", default="rgb,hotpotqa,squad2")
    parser.add_argument("--per-set", type=int, default=None, help="default: every answer")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rewrite", action="store_true", help="store the variant's judgement")
    parser.add_argument(
        "--question",
        help="ask this instead of the judge's yes/no question (e.g. one that names contradiction)",
    )
    args = parser.parse_args(argv)

    from engine import EngineConfig, LLMEngine
    from rag.stages.check.judge import JUDGE_QUESTION, judge_messages, judged_passages
    from rag.stages.check.verification import YesNoReader

    engine = LLMEngine(EngineConfig(model=args.judge, quantization="int8", max_num_seqs=8))
    reader = YesNoReader(engine)  # type: ignore[arg-type]  # only its tokenizer is read
    print(f"judge {args.judge}, passages {args.passages}; recorded: as the pipeline asked\n")
    print("| set | answers | right | recorded judge AUROC | variant AUROC (95 %) | s / judgement |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.sets.split(","):
        answers = [a for a in load_run(args.runs / name) if a.record.get("judgement") is not None][
            : args.per_set
        ]
        prompts = []
        for a in answers:
            r = a.record
            passages = a.passages
            shown = judged_passages(a.answer, passages, args.passages)
            messages = judge_messages(r["question"], shown, a.answer)
            if args.question:
                messages[-1]["content"] = messages[-1]["content"].replace(
                    JUDGE_QUESTION, args.question
                )
            prompts.append(engine.apply_chat_template(messages))
        started = time.perf_counter()
        scores: list[float] = []
        for i in range(0, len(prompts), args.batch):
            outputs = engine.generate(prompts[i : i + args.batch], reader.params)
            scores += [reader.read(o.outputs[0]) or 0.5 for o in outputs]
        per = (time.perf_counter() - started) / max(1, len(prompts))
        if args.rewrite:
            rewrite(args.runs / name, {a.item.id: p for a, p in zip(answers, scores, strict=True)})
        labels = [a.correct for a in answers]
        recorded = [float(a.record["judgement"]) for a in answers]
        bounds = auroc_interval(scores, labels)
        shown_bounds = "—" if bounds is None else f"{bounds[0]:.2f}–{bounds[1]:.2f}"
        print(
            f"| {name} | {len(answers)} | {sum(labels)} | {auroc(recorded, labels):.3f} | "
            f"{auroc(scores, labels):.3f} ({shown_bounds}) | {per:.2f} |",
            flush=True,
        )


def rewrite(run_dir: Path, judgements: dict[str, float]) -> None:
    """Replace the ``judgement`` of these records (by item id) in ``run_dir``, atomically."""
    import json

    path = next(run_dir.glob("*/items.jsonl"))
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["id"] in judgements:
            record["judgement_before"] = record.get("judgement")
            record["judgement"] = judgements[record["id"]]
        lines.append(json.dumps(record, ensure_ascii=False))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    main()
