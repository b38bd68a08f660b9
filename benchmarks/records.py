"""Keep labelled generations in the repository, and rebuild run folders from them.

    python benchmarks/records.py pack eval-runs/labelled-qwen1.5b benchmarks/records/qwen1.5b
    python benchmarks/records.py unpack benchmarks/records/qwen1.5b eval-runs/labelled-qwen1.5b

``pack`` writes one ``<set>.jsonl.gz`` per run folder (the model's outputs, no data set text);
``unpack`` rebuilds the run folders from those and the public data sets (``--data-dir``), so
``benchmarks/judge_cascade.py`` and ``benchmarks/judgement.py`` rerun anywhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.research.archive import pack, unpack  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args(argv)
    if args.action == "pack":
        for run_dir in sorted(p for p in args.source.iterdir() if (p / "dataset.jsonl").is_file()):
            count = pack(run_dir, args.target / f"{run_dir.name}.jsonl.gz")
            print(f"{run_dir.name}: {count} records")
    else:
        for archive in sorted(args.source.glob("*.jsonl.gz")):
            print(f"rebuilt {unpack(archive, args.data_dir, args.target)}")


if __name__ == "__main__":
    main()
