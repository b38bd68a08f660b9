"""Open-loop load on the ragguard server: Poisson arrivals at multiples of its sustainable rate.

    python benchmarks/serve_load.py --questions 8 --saturated 32 --duration 40 --max-tokens 64

Starts ``ragguard serve`` on a free port (``RAGGUARD_*`` settings, data and index in a temp dir;
``--url``: a running server), then over HTTP: (1) K questions one at a time, e2e latency; (2) a
closed loop of M questions at concurrency C (default: the server's ``max_concurrent_questions``):
questions/s and tokens/s (the ``/metrics`` counter), R = 0.8 × questions/s; (3) open loop at each
multiple of R: seeded exponential gaps for ``--duration`` s, every request streamed, no client cap:
status, Retry-After on 429, TTFT, inter-token gaps, e2e, what a degraded answer skipped, and
``/healthz`` probed every 100 ms from a process of its own; then the drain. Then, the server
stopped, in process with the same settings: the K questions through ``Pipeline.ask_with`` (HTTP
overhead), and the saturated workload's prompts on the engine alone at concurrency C (server ÷
engine tokens/s; greedy, so the token counts match). Prints markdown tables (p50 = median) and the
targets; ``--json PATH``: raw data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.serve_metrics import (  # noqa: E402
    generated,
    histogram_quantile,
    samples,
    scrape,
    scrape_text,
    wait_drained,
)

DEFAULT_DATA_DIR = ROOT.parent / "shared" / "data"
LAG = "ragguard:event_loop_lag_seconds"
QUESTIONS = [  # answerable from rag/data/demo
    "What does a KV cache avoid recomputing?",
    "What is continuous batching?",
    "How does speculative decoding speed up generation?",
    "What does quantization store with fewer bits?",
    "What is beam search?",
    "What does a mixture-of-experts model use to reduce computation?",
    "What is hallucination in a language model?",
    "What does top-p sampling keep?",
    "Why does a confidence threshold limit the damage from factual errors?",
    "What does retrieval-augmented generation place in the prompt?",
    "What does perplexity measure?",
    "How does contrastive decoding choose tokens?",
]
TIMEOUT = httpx.Timeout(900.0, connect=60.0)
# Idle connections are dropped sooner than the server's keep-alive timeout (uvicorn: 5 s), so a
# client waiting out a Retry-After never sends on a connection the server is closing.
LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0)


@dataclass
class Record:
    """One streamed request; times in seconds from its sending."""

    status: int = 0
    retry_after: bool = False
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    e2e: float | None = None
    tokens: int = 0
    degraded: list[str] = field(default_factory=list)
    """What the answer skipped under load (the result's ``degraded``)."""
    error: str | None = None


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def sec(value: float | None, scale: float = 1.0, unit: str = "s", digits: int = 2) -> str:
    return "—" if value is None else f"{value * scale:.{digits}f} {unit}"


def ms(value: float | None) -> str:
    return sec(value, 1000, "ms", 0)


def pair(p: dict[str, Any], key: str, fmt: Any = sec) -> str:
    return f"{fmt(p[key + '_p50'])} / {fmt(p[key + '_p99'])}"


# ---------------------------------------------------------------- server, metrics, health
def start_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "rag.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"{url} not ready after {timeout:.0f} s")


def rss_mb(proc: subprocess.Popen[bytes] | None) -> float | None:
    """The server's resident memory now (None for a server this script did not start)."""
    if proc is None:
        return None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def probe_health(url: str, stopped: Any, results: Any) -> None:
    """``GET /healthz`` every 100 ms until ``stopped`` is set; sends (latencies, failures)."""
    latencies, failures = [], 0
    with httpx.Client(timeout=10) as client:
        tick = time.perf_counter()
        while not stopped.is_set():
            started = time.perf_counter()
            try:
                ok = client.get(f"{url}/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - started)
            failures += not ok
            tick += 0.1
            stopped.wait(max(0.0, tick - time.perf_counter()))
    results.send((latencies, failures))


class HealthProbe:
    """The health probe in a process of its own, as an orchestrator's probe is: a thread of the
    load generator would wait for its interpreter lock while the load's event loop parses streams,
    and count that wait as the server's."""

    def __init__(self, url: str):
        context = multiprocessing.get_context("spawn")
        self._stopped = context.Event()
        self._results, child_end = context.Pipe(duplex=False)
        self._process = context.Process(
            target=probe_health, args=(url, self._stopped, child_end), daemon=True
        )
        self.latencies: list[float] = []
        self.failures = 0

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        """Stop probing and collect the latencies (seconds) and the number of failed probes."""
        self._stopped.set()
        self.latencies, self.failures = self._results.recv()
        self._process.join()


# ---------------------------------------------------------------- requests and HTTP phases
async def ask(
    client: httpx.AsyncClient, url: str, question: str, mt: int
) -> tuple[float, int, float]:
    """One non-streamed question: e2e seconds, completion tokens, the server's own total_s."""
    started = time.perf_counter()
    while True:  # a closed-loop client that honours Retry-After
        body = {"question": question, "max_tokens": mt}
        response = await client.post(f"{url}/v1/ask", json=body)
        if response.status_code != 429:
            break
        await asyncio.sleep(float(response.headers.get("retry-after", "1")))
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{question!r}: HTTP {response.status_code} {response.text[:300]}")
    answer = response.json()
    return elapsed, int(answer["usage"]["completion_tokens"]), answer["timings"]["total_s"]


async def ask_streamed(client: httpx.AsyncClient, url: str, question: str, mt: int) -> Record:
    record, event, last = Record(), "message", None
    sent = time.perf_counter()
    try:
        body = {"question": question, "max_tokens": mt, "stream": True}
        async with client.stream("POST", f"{url}/v1/ask", json=body) as response:
            record.status = response.status_code
            record.retry_after = "retry-after" in response.headers
            if response.status_code != 200:
                await response.aread()
                return record
            async for line in response.aiter_lines():
                now = time.perf_counter()
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif not line:
                    event = "message"
                elif line.startswith("data:") and event == "token":
                    if last is None:
                        record.ttft = now - sent
                    else:
                        record.itl.append(now - last)
                    last = now
                elif line.startswith("data:") and event == "result":
                    record.e2e = now - sent
                    result = json.loads(line[5:])
                    record.tokens = int(result["usage"]["completion_tokens"])
                    record.degraded = list(result.get("degraded", []))
                elif line.startswith("data:") and event == "error":
                    record.error = str(json.loads(line[5:]).get("error", "error"))
        if record.e2e is None and record.error is None:
            record.error = "no result event"
    except httpx.HTTPError as exc:
        record.error = type(exc).__name__
    return record


async def one_at_a_time(url: str, questions: list[str], mt: int) -> list[tuple[float, float]]:
    """(HTTP e2e, the server's pipeline total_s) of each question."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        await ask(client, url, questions[0], mt)  # warm-up
        answers = [await ask(client, url, q, mt) for q in questions]
        return [(e2e, total) for e2e, _, total in answers]


async def saturated(url: str, questions: list[str], concurrency: int, mt: int) -> dict[str, Any]:
    pending, tokens = list(reversed(questions)), list[int]()
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS) as client:

        async def worker() -> None:
            while pending:
                tokens.append((await ask(client, url, pending.pop(), mt))[1])

        before, started = await scrape(client, url), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        delta = generated(before, await scrape(client, url))
    return {
        "questions": len(questions),
        "elapsed_s": elapsed,
        "questions_per_s": len(questions) / elapsed,
        "sampled_tokens": delta,  # the /metrics counter: also counts each stop token
        "answer_tokens": sum(tokens),
        "tokens_per_s": (delta if delta is not None else sum(tokens)) / elapsed,
    }


async def open_loop(
    url: str, questions: list[str], rate: float, duration: float, rng: random.Random, mt: int
) -> dict[str, Any]:
    arrivals, t = [], rng.expovariate(rate)
    while t < duration:
        arrivals.append(t)
        t += rng.expovariate(rate)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=LIMITS) as client:
        before_text, probe = await scrape_text(client, url), HealthProbe(url)
        before = samples(before_text)
        probe.start()
        started, tasks = time.perf_counter(), []
        for at in arrivals:
            await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
            question = rng.choice(questions)
            tasks.append(asyncio.create_task(ask_streamed(client, url, question, mt)))
        await asyncio.sleep(max(0.0, started + duration - time.perf_counter()))
        records: list[Record] = list(await asyncio.gather(*tasks))
        elapsed = time.perf_counter() - started
        probe.stop()
        limit = (await scrape(client, url)).get("ragguard:concurrency_limit")
        await wait_drained(client, url)
        after_text = await scrape_text(client, url)
        delta = generated(before, samples(after_text))
    lag = {q: histogram_quantile(before_text, after_text, LAG, q / 100) for q in (50, 99)}
    ok = [r for r in records if r.status == 200 and r.e2e is not None]
    refused = [r for r in records if r.status == 429]
    server_errors = sum(r.status >= 500 for r in records)
    series = {
        "ttft": [r.ttft for r in ok if r.ttft is not None],
        "itl": [gap for r in ok for gap in r.itl],
        "e2e": [r.e2e for r in ok if r.e2e is not None],
        "health": probe.latencies,
    }
    return {
        "offered_per_s": rate,
        "arrivals": len(records),
        "elapsed_s": elapsed,
        "completed": len(ok),
        "completed_per_s": len(ok) / elapsed,
        "tokens_per_s": (delta if delta is not None else sum(r.tokens for r in ok)) / elapsed,
        **{f"{k}_p{q}": pct(v, q) for k, v in series.items() for q in (50, 99)},
        "refused": len(refused),
        "refused_share": len(refused) / max(1, len(records)),
        "degraded_share": sum(bool(r.degraded) for r in ok) / max(1, len(ok)),
        "judge_skipped_share": sum("judge" in r.degraded for r in ok) / max(1, len(ok)),
        "refused_with_retry_after": sum(r.retry_after for r in refused),
        "server_errors": server_errors,
        "other_errors": len(records) - len(ok) - len(refused) - server_errors,
        "errors": sorted({f"{r.status} {r.error}" for r in records if r.error}),
        "health_failures": probe.failures,
        "loop_lag_p50": lag[50],
        "loop_lag_p99": lag[99],  # a bucket's upper bound
        "concurrency_limit": limit,
        "records": [asdict(r) for r in records],
    }


# ---------------------------------------------------------------- in process
def in_process(
    sequential: list[str], workload: list[str], concurrency: int, mt: int
) -> dict[str, Any]:
    """The K questions through ``Pipeline.ask_with``, then the saturated workload's prompts
    (retrieved and planned as the pipeline does) on the engine alone at concurrency C."""
    from engine import generate_all
    from rag.pipeline import Pipeline
    from rag.settings import Settings
    from rag.stages.generate import Plan
    from rag.types import AskOptions

    s = Settings()
    pipeline, options, times = Pipeline.from_settings(s), AskOptions(max_tokens=mt), []
    try:
        pipeline.ask_with(sequential[0], options)  # warm-up, as over HTTP
        for question in sequential:
            started = time.perf_counter()
            pipeline.ask_with(question, options)
            times.append(time.perf_counter() - started)
        plans = []
        for question in workload:
            passages = pipeline.retriever.run(
                question, s.retrieval.index_name, s.retrieval.top_k, s.retrieval.min_score
            ).passages
            if passages:  # none: the server abstains without generating
                plans.append(pipeline.generator.plan(question, passages, options))

        async def run_all() -> tuple[int, float]:
            free = asyncio.Semaphore(concurrency)

            async def one(plan: Plan) -> int:
                async with free:
                    output = await generate_all(pipeline.engine, plan.prompt, plan.answer)
                    return output.num_completion_tokens

            started = time.perf_counter()
            counts = await asyncio.gather(*(one(p) for p in plans))
            return sum(counts), time.perf_counter() - started

        sampled = "num_generated_tokens"  # the engine counter behind the server's /metrics
        before = getattr(pipeline.engine.stats(), sampled, None)
        tokens, elapsed = asyncio.run(run_all())
        after = getattr(pipeline.engine.stats(), sampled, None)
    finally:
        pipeline.close()
    delta = None if before is None or after is None else after - before
    return {
        "ask_s": times,
        "engine_sampled_tokens": delta,
        "engine_answer_tokens": tokens,
        "engine_elapsed_s": elapsed,
        "engine_tokens_per_s": (delta if delta is not None else tokens) / elapsed,
    }


# ---------------------------------------------------------------- report
def table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    print("\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n")


def report(args: argparse.Namespace, f: dict[str, Any]) -> list[dict[str, Any]]:
    sat, local, c, phases = f["saturated"], f.get("in_process"), f["concurrency"], f["open_loop"]
    print(f"`{f['command']}`\n\n{args.dataset or 'demo'} questions, index {args.index}, ", end="")
    print(f"max_tokens {args.max_tokens}, C = {c}, R = {f['rate']:.3f} questions/s\n")
    http, server = (float(np.median(v)) for v in zip(*f["one_at_a_time"], strict=True))
    direct = float(np.median(local["ask_s"])) if local else None
    overhead = http / direct - 1 if direct else None
    over = "—" if overhead is None else f"{overhead:+.1%}"
    header = ["one at a time, medians", "HTTP e2e", "server total_s", "in process"]
    row = [f"{len(f['one_at_a_time'])} questions", sec(http), sec(server), sec(direct), over]
    table([*header, "HTTP overhead"], [row])
    tokens = f"{sat['sampled_tokens']} / {sat['answer_tokens']}"
    rows = [["server", f"{sat['questions_per_s']:.3f}", f"{sat['tokens_per_s']:.1f}", tokens]]
    ratio = None
    if local:
        ratio = sat["tokens_per_s"] / local["engine_tokens_per_s"]
        tokens = f"{local['engine_sampled_tokens']} / {local['engine_answer_tokens']}"
        rows.append(["engine alone", "—", f"{local['engine_tokens_per_s']:.1f}", tokens])
        rows.append(["server ÷ engine", "", f"{ratio:.2f}", ""])
    header = [f"saturated, {sat['questions']} questions, C = {c}", "questions/s", "tokens/s"]
    table([*header, "tokens sampled / in answers"], rows)
    header = ["× R", "offered/s", "arrivals", "completed/s", "tokens/s", "TTFT p50 / p99"]
    header += ["ITL p50 / p99", "e2e p50 / p99", "429", "degraded", "with Retry-After", "5xx"]
    header += ["other"]
    lines = [
        f"{m} | {p['offered_per_s']:.2f} | {p['arrivals']} | {p['completed_per_s']:.2f} | "
        f"{p['tokens_per_s']:.1f} | {pair(p, 'ttft')} | {pair(p, 'itl', ms)} | "
        f"{pair(p, 'e2e')} | {p['refused_share']:.0%} | {p['degraded_share']:.0%} | "
        f"{p['refused_with_retry_after']}/"
        f"{p['refused']} | {p['server_errors']} | {p['other_errors']} | {pair(p, 'health', ms)}"
        f" | ≤ {ms(p.get('loop_lag_p50'))} / ≤ {ms(p.get('loop_lag_p99'))}"
        f" | {p.get('concurrency_limit') or '—'}"
        for m, p in phases.items()
    ]
    header += ["health p50 / p99", "loop lag p50 / p99", "limit at end"]
    table(header, [line.split(" | ") for line in lines])
    for m, p in phases.items():
        if p["errors"]:
            print(f"errors at {m}× R: {', '.join(p['errors'])}\n")
    top_m = max(phases, key=float)
    top, at_r = phases[top_m], [p for m, p in phases.items() if float(m) == 1]
    e2e, e2e_r, health = top["e2e_p99"], at_r[0]["e2e_p99"] if at_r else None, top["health_p99"]
    n429, with_ra, other = top["refused"], top["refused_with_retry_after"], top["other_errors"]
    at, ratio_s = f"at {top_m}× R", "—" if ratio is None else f"{ratio:.2f}"
    refusals_ok = with_ra == n429 and other == 0
    e2e_ok = None if e2e is None or e2e_r is None else e2e <= 2 * e2e_r
    targets: list[tuple[str, str, bool | None]] = [
        (f"no 5xx {at}", str(top["server_errors"]), top["server_errors"] == 0),
        (
            f"every refusal a 429 with Retry-After {at}",
            f"{with_ra}/{n429}, {other} other",
            refusals_ok,
        ),
        (f"health p99 < 100 ms {at}", ms(health), health is not None and health < 0.1),
        (f"admitted e2e p99 {at} ≤ 2× at R", f"{sec(e2e)} vs {sec(e2e_r)}", e2e_ok),
        ("HTTP overhead ≤ 5%", over, None if overhead is None else overhead <= 0.05),
        ("server ÷ engine tokens/s ≥ 0.9", ratio_s, None if ratio is None else ratio >= 0.9),
    ]
    verdicts = [[n, v, "—" if ok is None else "yes" if ok else "no"] for n, v, ok in targets]
    table(["target", "measured", "met"], verdicts)
    if any(v is not None for v in f.get("rss_mb", {}).values()):
        rss = ", ".join(f"{k} {v:,.0f} MB" for k, v in f["rss_mb"].items() if v is not None)
        print(f"Server resident memory: {rss}.\n")
    return [{"target": n, "measured": v, "met": ok} for n, v, ok in targets]


# ---------------------------------------------------------------- main
def load_questions(args: argparse.Namespace) -> list[str]:
    if args.dataset is None:
        return QUESTIONS
    from rag.eval.datasets import DatasetNotFoundError
    from rag.eval.prepare import prepare

    try:
        items = prepare(args.dataset, args.data_dir).items
    except DatasetNotFoundError as exc:
        raise SystemExit(f"{exc}; without the data, leave out --dataset") from None
    return [item.question for item in items[: max(args.questions, args.saturated, 200)]]


def cycle(questions: list[str], count: int, offset: int = 0) -> list[str]:
    return [questions[(offset + i) % len(questions)] for i in range(count)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (default: start one)")
    p.add_argument("--questions", type=int, default=8, help="K, asked one at a time")
    p.add_argument("--saturated", type=int, default=32, help="M, the closed-loop workload")
    p.add_argument("--concurrency", type=int, help="C (default: max_concurrent_questions)")
    p.add_argument("--duration", type=float, default=40.0, help="seconds per open-loop phase")
    p.add_argument("--idle", type=float, default=30.0, help="seconds idle before the last RSS")
    p.add_argument("--multipliers", default="0.5,1,2,10", help="open-loop rates, in R")
    p.add_argument("--rate", type=float, help="R, questions/s (default: 0.8 × saturated)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", help="a built-in eval set's questions (with --index/--index-dir)")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    p.add_argument("--index", default="demo")
    p.add_argument("--index-dir", type=Path, help="default: a fresh demo index in a temp dir")
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE: a RAGGUARD_ setting")
    p.add_argument("--startup-timeout", type=float, default=600.0)
    p.add_argument("--no-in-process", action="store_true", help="skip the in-process part")
    p.add_argument("--json", type=Path, help="also write the raw figures here")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.dataset and (args.index == "demo" or args.index_dir is None):
        raise SystemExit("--dataset needs its prepared index: --index NAME --index-dir DIR")
    questions, mt = load_questions(args), args.max_tokens
    temp = Path(tempfile.mkdtemp(prefix="serve-load-"))
    overrides = {
        "RAGGUARD_INDEX_DIR": str(args.index_dir or temp / "indexes"),
        "RAGGUARD_INDEX_NAME": args.index,
        "RAGGUARD_DATA_DIR": str(temp / "data"),
        "RAGGUARD_MAX_TOKENS": str(mt),
        "RAGGUARD_LOG_LEVEL": "warning",
        # The load repeats a dozen questions: with the answer cache on, it would measure cache
        # hits, not answers (--set answer_cache_ttl_s=3600 measures that on purpose).
        "RAGGUARD_ANSWER_CACHE_TTL_S": "0",
    }
    for item in args.set:
        name, _, value = item.partition("=")
        overrides[f"RAGGUARD_{name.strip().upper()}"] = value
    os.environ.update(overrides)  # the in-process run reads the same settings
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from rag.settings import Settings

    concurrency = args.concurrency or (8 if args.url else Settings().max_concurrent_questions)
    sequential = cycle(questions, args.questions)
    workload = cycle(questions, args.saturated, offset=args.questions)
    log = temp / "server.log"
    proc, url = (None, args.url.rstrip("/")) if args.url else start_server(dict(os.environ), log)
    f: dict[str, Any] = {"command": shlex.join(["python", *sys.argv]), "settings": overrides}
    try:
        wait_ready(url, proc, log, args.startup_timeout)
        f["one_at_a_time"] = asyncio.run(one_at_a_time(url, sequential, mt))
        f["rss_mb"] = {"after one at a time": rss_mb(proc)}
        f["saturated"] = asyncio.run(saturated(url, workload, concurrency, mt))
        f["rss_mb"]["after saturated"] = rss_mb(proc)
        f["rate"] = rate = args.rate or 0.8 * f["saturated"]["questions_per_s"]
        rng, f["open_loop"] = random.Random(args.seed), {}
        for m in args.multipliers.split(","):
            phase = open_loop(url, questions, float(m) * rate, args.duration, rng, mt)
            f["open_loop"][m.strip()] = asyncio.run(phase)
            f["rss_mb"][f"after {m.strip()}× R"] = rss_mb(proc)
        time.sleep(args.idle)
        f["rss_mb"][f"{args.idle:.0f} s idle"] = rss_mb(proc)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    f["concurrency"] = concurrency
    if not args.no_in_process:
        f["in_process"] = in_process(sequential, workload, concurrency, mt)
    f["targets"] = report(args, f)
    if args.json:
        args.json.write_text(json.dumps(f, indent=2))
    shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
