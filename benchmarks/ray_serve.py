"""Ray Serve: throughput with 1 and 2 API replicas over one engine replica, and plain `serve`.

    python benchmarks/ray_serve.py --questions 24 --concurrency 8 --max-tokens 48

For each layout, starts ``ragguard serve`` (plain, then ``--ray --api-replicas K``) over the demo
index in a temporary folder, waits until ready, warms up with one question, then sends
``--questions`` questions (the demo questions, cycled) from ``--concurrency`` client threads over
HTTP and reports questions/s, tokens/s and the median and p90 end-to-end latency, and for Ray
how the questions spread over the API replicas (``x-ragguard-replica``). Replicas reserve no CPU
(``RAGGUARD_RAY_CPUS_PER_REPLICA=0``) so that three fit on a small machine. The last line of
stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from rag.demo import DEMO_QUESTIONS as QUESTIONS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--layouts", default="plain,ray1,ray2", help="plain, rayK (K replicas)")
    return parser.parse_args(argv)


def start(layout: str, root: Path, max_tokens: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "RAGGUARD_INDEX_DIR": str(root / "indexes"),
        "RAGGUARD_DATA_DIR": str(root / f"data-{layout}"),
        "RAGGUARD_MAX_TOKENS": str(max_tokens),
        "RAGGUARD_RAY_CPUS_PER_REPLICA": "0",
    }
    command = [sys.executable, "-m", "rag.cli", "serve", "--port", str(port)]
    if layout.startswith("ray"):
        command += ["--ray", "--api-replicas", layout.removeprefix("ray")]
    log = (root / f"{layout}.log").open("wb")
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{layout}: the server exited; see {root / f'{layout}.log'}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{layout}: not ready in 600 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure(url: str, questions: int, concurrency: int) -> dict[str, Any]:
    refused = Counter[str]()

    def ask(question: str) -> tuple[float, int, str]:
        started = time.perf_counter()
        while True:  # a well-behaved client: a 429 is retried after its Retry-After
            response = httpx.post(f"{url}/v1/ask", json={"question": question}, timeout=600)
            if response.status_code != 429:
                break
            refused["429"] += 1
            time.sleep(float(response.headers.get("retry-after", "1")))
        response.raise_for_status()
        tokens = int(response.json()["usage"]["completion_tokens"])
        return time.perf_counter() - started, tokens, response.headers.get("x-ragguard-replica", "")

    ask(QUESTIONS[0])  # warm-up
    batch = [QUESTIONS[i % len(QUESTIONS)] for i in range(questions)]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(ask, batch))
    elapsed = time.perf_counter() - started
    latencies = [r[0] for r in results]
    return {
        "questions_per_s": questions / elapsed,
        "tokens_per_s": sum(r[1] for r in results) / elapsed,
        "e2e_p50_s": float(np.percentile(latencies, 50)),
        "e2e_p90_s": float(np.percentile(latencies, 90)),
        "by_replica": dict(Counter(r[2] for r in results)),
        "elapsed_s": elapsed,
        "refused_429": refused["429"],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    records = []
    with tempfile.TemporaryDirectory(prefix="ragguard-ray-") as tmp:
        root = Path(tmp)
        for layout in [x.strip() for x in args.layouts.split(",") if x.strip()]:
            proc, url = start(layout, root, args.max_tokens)
            try:
                records.append({"layout": layout, **measure(url, args.questions, args.concurrency)})
            finally:
                stop(proc)
            print(f"  {layout}: done", file=sys.stderr)
    print(
        "\n| layout | questions/s | tokens/s | e2e p50 | e2e p90 | per API replica | 429s retried |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in records:
        spread = "/".join(str(n) for n in sorted(r["by_replica"].values(), reverse=True))
        print(
            f"| {r['layout']} | {r['questions_per_s']:.3f} | {r['tokens_per_s']:.1f} | "
            f"{r['e2e_p50_s']:.1f} s | {r['e2e_p90_s']:.1f} s | {spread} | {r['refused_429']} |"
        )
    command = f"python {shlex.join(sys.argv)}"
    print(f"\nreproduce: {command}")
    print(
        json.dumps(
            {
                "benchmark": "ray_serve",
                "records": records,
                "command": command,
                "cpu_count": os.cpu_count(),
                **vars(args),
            }
        )
    )


if __name__ == "__main__":
    main()
