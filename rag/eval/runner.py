"""Asks one configuration's questions through a ``Pipeline`` and keeps one JSON line per item.

Items run on several threads at once (the engine batches concurrent requests into shared steps)
and each finished item is appended to ``items.jsonl`` and flushed to disk at once, so an
interrupted run loses at most the items in flight: running it again skips the items already
recorded. ``run.json`` holds what the records were made from (dataset, configuration, index,
seed); resuming onto records of anything else is refused.

Answers are never withheld while evaluating: the pipeline is asked with both thresholds at 0,
so every answer is kept and scored, and the configured policy is then applied to the recorded
confidence. That is how the report can say how accurate the answers it would have withheld were.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from engine import EngineError
from guards import Candidate, GuardResult, Outcome
from rag.errors import InvalidInputError, RagGuardError
from rag.eval.items import EvalItem
from rag.eval.records import (
    RETRIEVAL_DEPTH,
    gold_ranks,
    passage_record,
    read_records,
    verdict_record,
)
from rag.pipeline import AskOptions, Pipeline
from rag.types import GuardReport, Passage

logger = logging.getLogger(__name__)
ITEMS_FILE = "items.jsonl"
RUN_FILE = "run.json"


@dataclass(frozen=True, slots=True)
class RunStats:
    num_done: int
    num_new: int
    elapsed_s: float
    interrupted: bool


class Runner:
    """Runs one configuration's items into ``out_dir`` (``items.jsonl`` + ``run.json``)."""

    def __init__(
        self,
        pipeline: Pipeline,
        out_dir: Path,
        *,
        index_name: str | None,
        threads: int = 8,
        seed: int = 0,
    ):
        if threads < 1:
            raise InvalidInputError(f"threads must be at least 1, got {threads}")
        self.pipeline = pipeline
        self.out_dir = out_dir
        self.index_name = index_name
        self.threads = threads
        self.seed = seed

    @property
    def items_path(self) -> Path:
        return self.out_dir / ITEMS_FILE

    def open(
        self, fingerprint: dict[str, Any], *, restart: bool = False, retry_errors: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Check that earlier records (if any) were made from the same inputs; their records.
        With ``retry_errors`` the records of items that got no answer (a deadline, an engine
        error) are left out, so that ``run`` asks those items again: their new records are
        appended, and the last record of an item is the one that counts."""
        run_path = self.out_dir / RUN_FILE
        if restart:
            self.items_path.unlink(missing_ok=True)
            run_path.unlink(missing_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if run_path.is_file():
            before = json.loads(run_path.read_text())
            if before.get("fingerprint") != fingerprint:
                raise InvalidInputError(
                    f"{self.out_dir} holds a run of another dataset, configuration, index or "
                    "seed; choose another --out, or pass --restart to discard it"
                )
        else:
            self._write_run({"fingerprint": fingerprint, "sessions": []})
        records = read_records(self.items_path)
        if retry_errors:
            records = {k: r for k, r in records.items() if "error" not in r}
        return records

    def run(
        self,
        items: list[EvalItem],
        done: dict[str, dict[str, Any]],
        *,
        stop_after: int | None = None,
        show_progress: bool = True,
        desc: str = "",
    ) -> RunStats:
        """Ask the items not yet recorded; ``stop_after`` ends the session after that many (as
        an interruption would)."""
        todo = [(k, item) for k, item in enumerate(items) if item.id not in done]
        if stop_after is not None:
            todo = todo[:stop_after]
        started = time.perf_counter()
        num_new, interrupted = 0, False
        bar = tqdm(
            total=len(items),
            initial=len(items) - len([i for i in items if i.id not in done]),
            unit="q",
            desc=desc,
            disable=not show_progress,
            dynamic_ncols=True,
        )
        try:
            with self.items_path.open("a", encoding="utf-8") as out:
                for record in self._answer_all(todo):
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    out.flush()
                    os.fsync(out.fileno())
                    done[record["id"]] = record
                    num_new += 1
                    bar.update(1)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            bar.close()
            elapsed = time.perf_counter() - started
            self._add_session(num_new, elapsed)
        return RunStats(len(done), num_new, elapsed, interrupted)

    def _answer_all(self, todo: list[tuple[int, EvalItem]]) -> Any:
        """Records as they finish, with at most ``threads`` questions in flight."""
        pending = iter(todo)
        with ThreadPoolExecutor(self.threads, thread_name_prefix="eval") as pool:
            running: set[Future[dict[str, Any]]] = set()
            try:
                for position, item in pending:
                    running.add(pool.submit(self.answer, position, item))
                    if len(running) >= self.threads:
                        finished, running = wait(running, return_when=FIRST_COMPLETED)
                        yield from (f.result() for f in finished)
                while running:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    yield from (f.result() for f in finished)
            finally:
                for future in running:
                    future.cancel()

    def answer(self, position: int, item: EvalItem) -> dict[str, Any]:
        """The record of one item: generated and checked, or (labelled) only checked."""
        record: dict[str, Any] = {"id": item.id, "position": position, "question": item.question}
        try:
            if item.has_gold_passages:
                ranked = self._retrieve(item.question, 2 * RETRIEVAL_DEPTH)
                record["ranked_doc_ids"] = list(dict.fromkeys(p.doc_id for p in ranked))[
                    :RETRIEVAL_DEPTH
                ]
                record["gold_ranks"] = gold_ranks(item, ranked)
            ask = self._check_given if item.is_labelled else self._generate
            record.update(ask(item))
        except (RagGuardError, EngineError) as exc:  # e.g. a question too long: recorded
            record["error"] = str(exc)
        return record

    def _retrieve(self, question: str, top_k: int) -> list[Passage]:
        name = self.index_name or self.pipeline.settings.retrieval.index_name
        mode = self.pipeline.settings.retrieval.mode
        return self.pipeline.retriever.run(question, name, top_k, -1.0, mode).ranked

    def _generate(self, item: EvalItem) -> dict[str, Any]:
        checker = self.pipeline.checker
        keep_all = 0.0 if checker is not None else None  # keep every answer; decide below
        options = AskOptions(
            index=self.index_name, seed=self.seed, abstain_below=keep_all, review_below=keep_all
        )
        result = self.pipeline.ask_with(item.question, options)
        shown = (
            {"gold_ranks_in_context": gold_ranks(item, result.passages)}
            if item.has_gold_passages
            else {}
        )
        declined = result.confidence is None and result.abstained
        decision, reasons = result.decision.value, result.decision_reasons
        if checker is not None and result.confidence is not None:
            decision, reasons = self._decide(result.guard_results, result.confidence)
        return {
            "answer": result.answer,
            "declined": declined,
            "decision": decision,
            "decision_reasons": reasons,
            "confidence": result.confidence,
            "guards": [verdict_record(v) for v in result.guard_results],
            "signals": result.confidence_signals,
            "samples": [asdict(c) for c in result.samples],
            "verification": result.verification,
            "judgement": result.judgement,
            "passages": [passage_record(p) for p in result.passages],
            **shown,
            "timings": result.timings,
            "usage": {
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
                "cached_prompt_tokens": result.usage.cached_prompt_tokens,
            },
        }

    def _check_given(self, item: EvalItem) -> dict[str, Any]:
        """A labelled item: the guards check its given answer against its given (or retrieved)
        passages; nothing is generated."""
        assert item.answer is not None
        started = time.perf_counter()
        passages = [
            Passage(f"given-{j}", f"given-{j}", text, 1.0) for j, text in enumerate(item.passages)
        ] or self._retrieve(item.question, self.pipeline.settings.retrieval.top_k)
        record: dict[str, Any] = {
            "answer": item.answer,
            "declined": False,
            "decision": "answer",
            "decision_reasons": [],
            "confidence": None,
            "guards": [],
            "passages": [passage_record(p) for p in passages],
        }
        checker = self.pipeline.checker
        if checker is not None:
            given = Candidate(item.answer.strip())
            checked = checker.check(item.question, given, [given], passages)
            decision = checker.decide(checked)
            record.update(
                confidence=checked.confidence,
                decision=decision.action.value,
                decision_reasons=decision.reasons,
                guards=[verdict_record(v) for v in checked.reports()],
            )
        record["timings"] = {"guards_s": time.perf_counter() - started}
        return record

    def _decide(self, verdicts: list[GuardReport], confidence: float) -> tuple[str, list[str]]:
        """What the configured policy does with this answer."""
        assert self.pipeline.checker is not None
        results = [GuardResult(v.name, Outcome(v.outcome), v.score, v.reason) for v in verdicts]
        decision = self.pipeline.checker.policy.decide(results, confidence)
        return decision.action.value, decision.reasons

    def _write_run(self, data: dict[str, Any]) -> None:
        tmp = self.out_dir / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.out_dir / RUN_FILE)

    def _add_session(self, num_items: int, elapsed_s: float) -> None:
        data = json.loads((self.out_dir / RUN_FILE).read_text())
        data["sessions"].append(
            {"started_at": time.time() - elapsed_s, "num_items": num_items, "elapsed_s": elapsed_s}
        )
        self._write_run(data)


def sessions(out_dir: Path) -> list[dict[str, Any]]:
    """The sessions recorded in ``run.json`` (one per run or resumption)."""
    path = out_dir / RUN_FILE
    return list(json.loads(path.read_text()).get("sessions", [])) if path.is_file() else []
