"""Two generators on the same questions: accuracy, declines and wrong answers per set.

Reads the ``results.json`` of two folders of ``ragguard eval`` runs (one ``<set>/`` per data set,
the same ``--limit``), e.g. the labelled generations of SmolLM2 and of Qwen2.5-Coder-1.5B, and
prints one row per set found in both.

    python benchmarks/generators_side_by_side.py eval-runs/labelled-smollm2-judged \\
        eval-runs/labelled-qwen1.5b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def metrics(run: Path) -> dict[str, Any] | None:
    path = run / "results.json"
    if not path.is_file():
        return None
    configs = json.loads(path.read_text())["configs"]
    return configs[0]["metrics"] if len(configs) == 1 else None


def cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    a_name, b_name = args.first.name, args.second.name
    print(
        f"| set | questions | accuracy {a_name} | accuracy {b_name} | ratio | declined "
        f"{a_name} / {b_name} | unanswerable declined {a_name} / {b_name} | known wrong "
        f"answer {a_name} / {b_name} |"
    )
    print("| --- " * 8 + "|")
    for run in sorted(p for p in args.first.iterdir() if p.is_dir()):
        a, b = metrics(run), metrics(args.second / run.name)
        if a is None or b is None:
            continue
        acc_a, acc_b = a["answers"]["accuracy"], b["answers"]["accuracy"]
        ratio = f"{acc_b / acc_a:.1f}×" if acc_a else "—"
        print(
            f"| {run.name} | {a['answers']['num_items']} | {cell(acc_a)} | {cell(acc_b)} | "
            f"{ratio} | {cell(a['decisions']['declined_rate'])} / "
            f"{cell(b['decisions']['declined_rate'])} | "
            f"{cell(a['answers']['declined_unanswerable'])} / "
            f"{cell(b['answers']['declined_unanswerable'])} | "
            f"{cell(a['answers']['wrong_answer_rate'])} / "
            f"{cell(b['answers']['wrong_answer_rate'])} |"
        )


if __name__ == "__main__":
    main()
