"""``evaluate``: a dataset, an index and one or more configurations in; ``results.json`` and
``report.html`` out. The library call behind ``ragguard eval``.

    from rag.eval import evaluate
    results = evaluate("musique", Path("eval-runs/musique"), limit=100)

Output folder layout::

    OUT/dataset.jsonl            the prepared items (built-in sets only): re-runnable as a file
    OUT/<config>/items.jsonl     one record per item, appended as it finishes (resumable)
    OUT/<config>/run.json        what the records were made from, and the sessions that made them
    OUT/results.json             every figure, the configurations and the versions
    OUT/report.html              the report
    OUT/summary.md               the report's summary table in Markdown
"""

from __future__ import annotations

import datetime as dt
import logging
import platform
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from guards import Policy
from rag.errors import IndexNotFoundError, InvalidInputError
from rag.eval.config import DEFAULT_NAME, EvalConfig, embedder_key, engine_key
from rag.eval.items import EvalItem, items_digest, write_items
from rag.eval.prepare import PreparedDataset, Source, load_source
from rag.eval.report import FORMAT_VERSION, clean, render_markdown, write_report, write_results
from rag.eval.runner import Runner, sessions
from rag.eval.summary import summarise
from rag.retrieval.collection import check_index_name
from rag.retrieval.index import VectorIndex
from rag.settings import Settings

logger = logging.getLogger(__name__)
PACKAGES = ("ragguard", "torch", "transformers", "sentence-transformers", "numpy", "faiss-cpu")
HIDDEN_SETTINGS = frozenset(
    {"review_db", "keys_db", "api_keys", "data_dir", "host", "port", "log_level"}
)
"""Not reported: credentials may hide in a database URL, and the rest is not about answers."""


def versions(pipeline: Any) -> dict[str, str]:
    found = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    found["model"] = pipeline.engine.model_name
    found["embedding_model"] = pipeline.embedder.model_id
    return found


class _Models:
    """Loaded generators and embedders, shared by configurations that need the same ones. The
    engine clients it loads are its own: ``close`` shuts them down."""

    def __init__(self, embedder: Any = None, generator: Any = None):
        self.given = (embedder, generator)
        self.loaded: dict[tuple[Any, ...], Any] = {}

    def pipeline(self, settings: Settings) -> Any:
        from engine import build_engine_client
        from rag.pipeline import Pipeline
        from rag.retrieval.embed import Embedder

        embedder, generator = self.given
        embedder_at, engine_at = (
            ("embedder", *embedder_key(settings)),
            (
                "generator",
                *engine_key(settings),
            ),
        )
        if embedder is None and embedder_at not in self.loaded:
            self._evict("embedder")
            config = settings.engine.engine_config()
            self.loaded[embedder_at] = Embedder(
                settings.retrieval.embedding_model,
                device=config.resolved_device(),
                allow_hub=settings.engine.allow_hub,
            )
        if generator is None and engine_at not in self.loaded:
            self._evict("generator")  # one of each at a time: models are large
            self.loaded[engine_at] = build_engine_client(
                settings.engine.engine_config(),
                settings.engine.generator_backend(),
                settings.engine.remote_config(),
            )
        # An evaluation measures the model on every item: never an answer cached by an earlier
        # run (or by an earlier item asking the same question). Nor does it put its answers in
        # front of reviewers as audit items.
        settings = settings.updated(answer_cache_ttl_s=0.0, audit_rate=0.0, audit_rates={})
        return Pipeline(
            settings, embedder or self.loaded[embedder_at], generator or self.loaded[engine_at]
        )

    def _evict(self, kind: str) -> None:
        for key in [k for k in self.loaded if k[0] == kind]:
            model = self.loaded.pop(key)
            if kind == "generator":
                model.shutdown()

    def close(self) -> None:
        self._evict("generator")
        self.loaded.clear()


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How the items are asked (the same for every configuration)."""

    seed: int = 0
    threads: int = 8
    restart: bool = False
    show_progress: bool = True
    stop_after: int | None = None
    retry_errors: bool = False


@dataclass(slots=True)
class ConfigRun:
    """One configuration's outcome: its entry in ``results.json`` and its latencies."""

    entry: dict[str, Any]
    latencies: list[float]
    interrupted: bool


class Evaluation:
    """The items of one dataset asked under each configuration into one output folder."""

    def __init__(
        self,
        source: Source,
        items: list[EvalItem],
        out_dir: Path,
        base: dict[str, Any],
        options: RunOptions,
        models: _Models,
        say: Callable[[str], None],
    ):
        self.source, self.items, self.out_dir = source, items, out_dir
        self.base, self.options, self.models, self.say = base, options, models, say
        self.digest = items_digest(source.items)
        self.needs_index = any(not (item.is_labelled and item.passages) for item in items)
        self.graph: Any = None
        self.versions: dict[str, str] = {}

    def index_of(self, config: EvalConfig) -> str | None:
        """The index a configuration asks (a config may name its own, e.g. other chunking)."""
        if not self.needs_index:
            return None
        name = config.overrides.get("index_name") or self.base.get("index_name")
        return check_index_name(name or Settings(**self.base).retrieval.index_name)

    def check(self, configs: list[EvalConfig]) -> None:
        """Before any model loads: every configuration's settings and policy are valid, and a
        file dataset's indexes are built."""
        for config in configs:
            settings = config.settings(self.base)
            try:
                Policy(
                    abstain_below=settings.policy.abstain_below,
                    review_below=settings.policy.review_below,
                )
            except ValueError as exc:
                raise InvalidInputError(f"configuration {config.name}: {exc}") from exc
            name = self.index_of(config)
            if self.source.prepared is not None or name is None:
                continue
            if not VectorIndex.exists(settings.retrieval.index_dir / name):
                raise IndexNotFoundError(
                    f"index {name!r} does not exist under {settings.retrieval.index_dir}: build it "
                    f"with `ragguard ingest PATH --index {name}` (the documents the "
                    "questions are about), or pass --index NAME of an existing one"
                )

    def run(self, config: EvalConfig, state_dir: Path) -> ConfigRun:
        """Ask the configuration's remaining items, then summarise all of them."""
        # Answers flagged for review go to a throwaway queue, never the deployment's.
        index_name = self.index_of(config)
        overrides = {"index_name": index_name} if index_name else {}
        settings = config.settings({**self.base, **overrides, "data_dir": state_dir})
        pipeline = self.models.pipeline(settings)
        run_dir = self.out_dir / config.name
        try:
            index_info = self._prepare(pipeline, settings, index_name)
            self.versions = self.versions or versions(pipeline)
            o = self.options
            runner = Runner(
                pipeline, run_dir, index_name=index_name, threads=o.threads, seed=o.seed
            )
            fingerprint = {
                "dataset": self.digest,
                "config": config.overrides,
                "index": index_name,
                "seed": o.seed,
            }
            records = runner.open(fingerprint, restart=o.restart, retry_errors=o.retry_errors)
            stats = runner.run(
                self.items,
                records,
                stop_after=o.stop_after,
                show_progress=o.show_progress,
                desc=config.name,
            )
        finally:
            pipeline.close()
        elapsed = sum(s["elapsed_s"] for s in sessions(run_dir))
        entry = {
            "name": config.name,
            "overrides": config.overrides,
            "index": index_info,
            "settings": _visible(settings),
            "metrics": summarise(self.items, records, elapsed),
        }
        latencies = [
            records[i.id]["timings"]["total_s"]
            for i in self.items
            if "total_s" in records.get(i.id, {}).get("timings", {})
        ]
        return ConfigRun(entry, latencies, stats.interrupted)

    def _prepare(
        self, pipeline: Any, settings: Settings, index_name: str | None
    ) -> dict[str, Any] | None:
        """Build a built-in set's index if needed, check against its graph; the index's info."""
        prepared = self.source.prepared
        if prepared is not None and index_name and prepared.documents:
            _build_index(pipeline, index_name, prepared, self.say, self.options.show_progress)
        if prepared and prepared.load_graph and settings.guards.guards_enabled:
            self.graph = self.graph or prepared.load_graph()
            _check_against(pipeline, settings, self.graph)
        if index_name is None:
            return None
        return asdict(pipeline.collections.get(index_name).info())

    def header(self, dataset: str | Path, limit: int | None, command: str) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": command,
            "dataset": {
                "name": self.source.name,
                "source": str(dataset),
                "num_items_total": len(self.source.items),
                "num_items": len(self.items),
                "limit": limit,
                "seed": self.options.seed,
                "digest": self.digest,
            },
            "threads": self.options.threads,
        }


def evaluate(
    dataset: str | Path,
    out_dir: Path,
    *,
    index: str | None = None,
    configs: list[EvalConfig] | None = None,
    limit: int | None = None,
    seed: int = 0,
    threads: int = 8,
    data_dir: Path | None = None,
    index_dir: Path | None = None,
    restart: bool = False,
    show_progress: bool = True,
    stop_after: int | None = None,
    retry_errors: bool = False,
    embedder: Any = None,
    generator: Any = None,
    command: str = "",
    say: Callable[[str], None] = logger.info,
) -> dict[str, Any]:
    """Run every configuration on the dataset (resuming what ``out_dir`` already holds) and write
    the report; the results. ``embedder``/``generator`` reuse loaded models (they then serve
    every configuration); ``stop_after`` ends each configuration's session after that many new
    items (as an interruption would)."""
    if limit is not None and limit < 1:
        raise InvalidInputError(f"--limit must be at least 1, got {limit}")
    if threads < 1:
        raise InvalidInputError(f"--threads must be at least 1, got {threads}")
    source = load_source(dataset, data_dir)
    configs = configs or [EvalConfig(DEFAULT_NAME)]
    base: dict[str, Any] = {"build_demo_index": False}
    if index_dir is not None:
        base["index_dir"] = index_dir
    if index or source.prepared:
        base["index_name"] = index or source.name
    options = RunOptions(seed, threads, restart, show_progress, stop_after, retry_errors)
    models = _Models(embedder, generator)
    run = Evaluation(source, source.items[:limit], out_dir, base, options, models, say)
    try:
        run.check(configs)
        out_dir.mkdir(parents=True, exist_ok=True)
        if source.prepared is not None:
            write_items(source.items, out_dir / "dataset.jsonl")
        results = run.header(dataset, limit, command)
        entries, latencies, interrupted = [], {}, False
        with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as state:
            for config in configs:
                outcome = run.run(config, Path(state) / config.name)
                entries.append(outcome.entry)
                latencies[config.name] = outcome.latencies
                if outcome.interrupted:
                    interrupted = True
                    break
        results.update(
            index=entries[0]["index"] if entries else None,
            versions=run.versions,
            configs=entries,
            interrupted=interrupted,
        )
        write_results(results, out_dir / "results.json")
        write_report(results, latencies, out_dir / "report.html")
        (out_dir / "summary.md").write_text(render_markdown(clean(results)), encoding="utf-8")
        return results
    finally:
        models.close()


def _check_against(pipeline: Any, settings: Settings, graph: Any) -> None:
    """Check answers against the data set's own graph, unless the settings name another."""
    if settings.guards.knowledge_graph is None:
        from rag.stages.check import AnswerChecker

        pipeline.use_checker(AnswerChecker(settings, pipeline.embedder, graph=graph))


def _visible(settings: Settings) -> dict[str, Any]:
    return {k: v for k, v in settings.flat(mode="json").items() if k not in HIDDEN_SETTINGS}


def _build_index(
    pipeline: Any,
    name: str,
    prepared: PreparedDataset,
    say: Callable[[str], None],
    show_progress: bool,
) -> None:
    """Build (or complete) a built-in set's index; unchanged documents are skipped."""
    collection = pipeline.collections.get(name, create=True)
    if collection.info().num_documents >= len(prepared.documents):
        return
    say(f"building index {name!r} from {len(prepared.documents)} {prepared.name} documents")
    report = collection.ingest(prepared.documents, show_progress=show_progress)
    say(
        f"index {name}: {len(report.added)} added, {len(report.skipped)} unchanged, "
        f"{report.num_chunks} chunks in {report.elapsed_s:.1f}s"
    )
