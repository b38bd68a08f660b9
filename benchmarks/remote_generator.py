"""The remote generator path against the in-process engine: same answers, and what it costs.

    python benchmarks/remote_generator.py --repeats 3

Starts ``ragguard serve`` on a free port (the demo index in a temporary folder) as the remote
OpenAI-compatible server; then, in this process and one at a time, the demo questions through
two pipelines with the same settings: ``RAGGUARD_GENERATOR=engine`` (our engine in process) and
``RAGGUARD_GENERATOR=openai`` over the server (``RAGGUARD_GENERATOR_TOKENIZER=default``). Greedy
decoding, so the two must give the same answer tokens. The in-process pipeline runs while the
server is idle, the remote one while this process's engine is idle, alternating per question.
Reports the share of identical answers and token ids, and per question the median end-to-end
and generation time of each path and their difference (the remote path's overhead: HTTP, SSE,
the second process). The last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag.demo import DEMO_QUESTIONS as QUESTIONS  # noqa: E402
from rag.pipeline import Pipeline  # noqa: E402
from rag.settings import Settings  # noqa: E402
from rag.types import AskOptions, Result  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the questions")
    parser.add_argument("--max-tokens", type=int, default=64)
    return parser.parse_args(argv)


def start_server(root: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "RAGGUARD_INDEX_DIR": str(root / "server-indexes"),
        "RAGGUARD_DATA_DIR": str(root / "server-data"),
    }
    log = root / "server.log"
    command = [sys.executable, "-m", "rag.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit("the server was not ready in 300 s")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        time.sleep(0.5)


def ask(pipeline: Pipeline, question: str, max_tokens: int) -> tuple[Result, float]:
    started = time.perf_counter()
    result = pipeline.ask_with(question, AskOptions(max_tokens=max_tokens, temperature=0.0, seed=1))
    return result, time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragguard-remote-") as tmp:
        root = Path(tmp)
        proc, url, _ = start_server(root)
        try:
            # The server built the demo index on start; the local pipelines search a copy of it.
            shutil.copytree(root / "server-indexes", root / "indexes")
            common: dict[str, Any] = {
                "index_dir": root / "indexes",
                "data_dir": root / "data",
                "max_tokens": args.max_tokens,
                "_env_file": None,
            }
            local = Pipeline.from_settings(Settings(**common))
            remote = Pipeline.from_settings(
                Settings(
                    **common,
                    generator="openai",
                    generator_url=f"{url}/v1",
                    generator_tokenizer="default",
                )
            )
            rows: list[dict[str, Any]] = []
            ask(local, QUESTIONS[0], args.max_tokens)  # warm-up: first-call costs on both sides
            ask(remote, QUESTIONS[0], args.max_tokens)
            for round_ in range(args.repeats):
                for question in QUESTIONS:
                    here, here_s = ask(local, question, args.max_tokens)
                    far, far_s = ask(remote, question, args.max_tokens)
                    rows.append(
                        {
                            "round": round_,
                            "question": question,
                            "same_answer": here.answer == far.answer,
                            "same_decision": here.decision == far.decision,
                            "same_confidence": here.confidence is not None
                            and far.confidence is not None
                            and abs(here.confidence - far.confidence) < 1e-3,
                            "local_s": here_s,
                            "remote_s": far_s,
                            "local_generate_s": here.timings.get("generate_s"),
                            "remote_generate_s": far.timings.get("generate_s"),
                            "completion_tokens": here.usage.completion_tokens,
                            "remote_completion_tokens": far.usage.completion_tokens,
                        }
                    )
            local.close()
            remote.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    overhead = [r["remote_s"] - r["local_s"] for r in rows]
    summary = {
        "benchmark": "remote_generator",
        "questions": len(QUESTIONS),
        "repeats": args.repeats,
        "max_tokens": args.max_tokens,
        "same_answer": sum(r["same_answer"] for r in rows) / len(rows),
        "same_decision": sum(r["same_decision"] for r in rows) / len(rows),
        "same_confidence": sum(r["same_confidence"] for r in rows) / len(rows),
        "same_token_count": sum(
            r["completion_tokens"] == r["remote_completion_tokens"] for r in rows
        )
        / len(rows),
        "local_p50_s": median(r["local_s"] for r in rows),
        "remote_p50_s": median(r["remote_s"] for r in rows),
        "local_generate_p50_s": median(r["local_generate_s"] for r in rows),
        "remote_generate_p50_s": median(r["remote_generate_s"] for r in rows),
        "overhead_p50_s": median(overhead),
        "cpu_count": os.cpu_count(),
        "command": f"python {shlex.join(sys.argv)}",
    }
    print("\n| figure | value |\n| --- | --- |")
    for key, value in summary.items():
        if key not in ("benchmark", "command"):
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            print(f"| {key} | {shown} |")
    print(f"\nreproduce: {summary['command']}")
    print(json.dumps({**summary, "rows": rows}))


if __name__ == "__main__":
    main()
