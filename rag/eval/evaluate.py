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

from rag.collection import check_index_name
from rag.errors import IndexNotFoundError, InvalidInputError
from rag.eval.config import DEFAULT_NAME, EvalConfig, embedder_key, engine_key
from rag.eval.dataset import EvalItem, items_digest, read_items, write_items
from rag.eval.prepare import BUILTIN, PreparedDataset, prepare
from rag.eval.report import FORMAT_VERSION, write_report, write_results
from rag.eval.runner import Runner, sessions
from rag.eval.summary import summarise
from rag.index import VectorIndex
from rag.settings import Settings

logger = logging.getLogger(__name__)
PACKAGES = ("ragguard", "torch", "transformers", "sentence-transformers", "numpy", "faiss-cpu")
HIDDEN_SETTINGS = frozenset({"review_db", "api_keys", "data_dir", "host", "port", "log_level"})
"""Not reported: credentials may hide in a database URL, and the rest is not about answers."""


@dataclass(slots=True)
class Source:
    """The items of a run and where they came from."""

    name: str
    items: list[EvalItem]
    prepared: PreparedDataset | None = None


def load_source(dataset: str | Path, data_dir: Path | None) -> Source:
    """A JSONL file, or a built-in set read from ``data_dir``."""
    path = Path(dataset)
    if path.is_file():
        return Source(path.stem, read_items(path))
    if str(dataset) in BUILTIN:
        if data_dir is None or not data_dir.is_dir():
            raise InvalidInputError(
                f"built-in dataset {dataset!r} is read from --data-dir, and {data_dir} is not a "
                "folder; point --data-dir at the public data sets"
            )
        prepared = prepare(str(dataset), data_dir)
        return Source(prepared.name, prepared.items, prepared)
    raise InvalidInputError(
        f"dataset {str(dataset)!r} is neither a JSONL file nor a built-in set "
        f"({', '.join(BUILTIN)})"
    )


def versions(pipeline: Any) -> dict[str, str]:
    found = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    found["model"] = pipeline.generator.model_name
    found["embedding_model"] = pipeline.embedder.model_id
    return found


class _Models:
    """Loaded generators and embedders, shared by configurations that need the same ones."""

    def __init__(self, embedder: Any = None, generator: Any = None):
        self.given = (embedder, generator)
        self.loaded: dict[tuple[Any, ...], Any] = {}

    def pipeline(self, settings: Settings) -> Any:
        from rag.pipeline import Pipeline

        embedder, generator = self.given
        embedder = embedder or self.loaded.get(("embedder", *embedder_key(settings)))
        generator = generator or self.loaded.get(("generator", *engine_key(settings)))
        if embedder is not None and generator is not None:
            return Pipeline(settings, embedder, generator)
        pipeline = Pipeline.from_settings(settings)
        self.loaded = {
            ("embedder", *embedder_key(settings)): pipeline.embedder,
            ("generator", *engine_key(settings)): pipeline.generator,
        }  # one of each at a time: models are large
        return pipeline


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
    embedder: Any = None,
    generator: Any = None,
    command: str = "",
    say: Callable[[str], None] = logger.info,
) -> dict[str, Any]:
    """Run every configuration on the dataset (resuming what ``out_dir`` already holds) and write
    the report; the results. ``embedder``/``generator`` reuse loaded models; ``stop_after``
    ends each configuration's session after that many new items (as an interruption would)."""
    if limit is not None and limit < 1:
        raise InvalidInputError(f"--limit must be at least 1, got {limit}")
    source = load_source(dataset, data_dir)
    items = source.items[:limit]
    configs = configs or [EvalConfig(DEFAULT_NAME)]
    base: dict[str, Any] = {"build_demo_index": False}
    if index_dir is not None:
        base["index_dir"] = index_dir
    index_name = index or (source.name if source.prepared else None)
    needs_index = any(not (item.is_labelled and item.passages) for item in items)
    if needs_index:
        index_name = check_index_name(index_name or Settings(**base).index_name)
        base["index_name"] = index_name
        _check_index(source, Settings(**base))
    out_dir.mkdir(parents=True, exist_ok=True)
    if source.prepared is not None:
        write_items(source.items, out_dir / "dataset.jsonl")
    models = _Models(embedder, generator)
    digest = items_digest(source.items)
    results: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "dataset": {
            "name": source.name,
            "source": str(dataset),
            "num_items_total": len(source.items),
            "num_items": len(items),
            "limit": limit,
            "seed": seed,
            "digest": digest,
        },
        "threads": threads,
        "index": None,
        "versions": {},
        "configs": [],
        "interrupted": False,
    }
    latencies: dict[str, list[float]] = {}
    graph = None
    with tempfile.TemporaryDirectory(prefix="ragguard-eval-") as state:
        for config in configs:
            # Answers flagged for review go to a throwaway queue, never the deployment's.
            settings = config.settings({**base, "data_dir": Path(state) / config.name})
            pipeline = models.pipeline(settings)
            try:
                if needs_index and source.prepared is not None and source.prepared.documents:
                    _build_index(pipeline, index_name, source.prepared, say, show_progress)
                prepared = source.prepared
                if prepared and prepared.load_graph and settings.guards_enabled:
                    graph = graph or prepared.load_graph()
                    _check_against(pipeline, settings, graph)
                if needs_index and results["index"] is None:
                    results["index"] = asdict(pipeline.collections.get(index_name).info())
                results["versions"] = results["versions"] or versions(pipeline)
                runner = Runner(
                    pipeline,
                    out_dir / config.name,
                    index_name=index_name,
                    threads=threads,
                    seed=seed,
                )
                fingerprint = {
                    "dataset": digest,
                    "config": config.overrides,
                    "index": index_name,
                    "seed": seed,
                }
                records = runner.open(fingerprint, restart=restart)
                stats = runner.run(
                    items,
                    records,
                    stop_after=stop_after,
                    show_progress=show_progress,
                    desc=config.name,
                )
            finally:
                pipeline.close()
            elapsed = sum(s["elapsed_s"] for s in sessions(out_dir / config.name))
            results["configs"].append(
                {
                    "name": config.name,
                    "overrides": config.overrides,
                    "settings": _visible(settings),
                    "metrics": summarise(items, records, elapsed),
                }
            )
            latencies[config.name] = [
                records[i.id]["timings"]["total_s"]
                for i in items
                if i.id in records and "total_s" in records[i.id].get("timings", {})
            ]
            if stats.interrupted:
                results["interrupted"] = True
                break
    write_results(results, out_dir / "results.json")
    write_report(results, latencies, out_dir / "report.html")
    return results


def _check_against(pipeline: Any, settings: Settings, graph: Any) -> None:
    """Check answers against the data set's own graph, unless the settings name another."""
    if settings.knowledge_graph is None:
        from rag.guarding import AnswerChecker

        pipeline.checker = AnswerChecker(settings, pipeline.embedder, pipeline.reviews, graph=graph)


def _visible(settings: Settings) -> dict[str, Any]:
    return {k: v for k, v in settings.model_dump(mode="json").items() if k not in HIDDEN_SETTINGS}


def _check_index(source: Source, settings: Settings) -> None:
    """Before any model loads: a file dataset needs its index built already."""
    if source.prepared is not None:
        return
    if not VectorIndex.exists(settings.index_dir / settings.index_name):
        raise IndexNotFoundError(
            f"index {settings.index_name!r} does not exist under {settings.index_dir}: build it "
            f"with `ragguard ingest PATH --index {settings.index_name}` (the documents the "
            "questions are about), or pass --index NAME of an existing one"
        )


def _build_index(
    pipeline: Any,
    name: str | None,
    prepared: PreparedDataset,
    say: Callable[[str], None],
    show_progress: bool,
) -> None:
    """Build (or complete) a built-in set's index; unchanged documents are skipped."""
    assert name is not None
    collection = pipeline.collections.get(name, create=True)
    if collection.info().num_documents >= len(prepared.documents):
        return
    say(f"building index {name!r} from {len(prepared.documents)} {prepared.name} documents")
    report = collection.ingest(prepared.documents, show_progress=show_progress)
    say(
        f"index {name}: {len(report.added)} added, {len(report.skipped)} unchanged, "
        f"{report.num_chunks} chunks in {report.elapsed_s:.1f}s"
    )
