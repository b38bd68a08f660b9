"""``ragguard``: ingest documents, ask questions, serve the API, inspect indexes, evaluate.

Heavy libraries are imported inside the commands, so ``ragguard --help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag.cli.console import note, out
from rag.types import RETRIEVAL_MODES

if TYPE_CHECKING:
    from rag.settings import Settings


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    from rag.settings import Settings

    overrides = {
        "index_dir": getattr(args, "index_dir", None),
        "index_name": getattr(args, "index", None),
        "model": getattr(args, "model", None),
        **extra,
    }
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag.retrieval.collection import CollectionRegistry
    from rag.retrieval.documents import load_path
    from rag.retrieval.embed import Embedder

    settings = _settings(
        args,
        index_type=args.index_type,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        read_only_indexes=False,  # this is the writer that read-only servers wait for
    )
    from engine import EngineConfig

    # Read the files first: a wrong path fails at once, before a model loads or an index is made.
    documents = [doc for path in args.paths for doc in load_path(Path(path))]
    device = EngineConfig(device=settings.engine.device).resolved_device()
    embedder = Embedder(
        settings.retrieval.embedding_model, device=device, allow_hub=settings.engine.allow_hub
    )
    registry = CollectionRegistry.from_settings(settings, embedder)
    collection = registry.get(settings.retrieval.index_name, create=True)
    report = collection.ingest(documents, show_progress=not args.quiet)
    info = collection.info()
    out(
        f"index {info.name}: {len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.skipped)} unchanged; {report.num_chunks} chunks embedded in "
        f"{report.elapsed_s:.1f}s; now {info.num_documents} documents, {info.num_chunks} chunks"
    )
    registry.close()
    return 0


def _print_result(result: Any, as_json: bool, *, answer_shown: bool = False) -> None:
    from rag.display import safe_text  # model and document text: shown, never obeyed

    if as_json:
        out(json.dumps(result.to_dict(), indent=2))
        return
    answer = safe_text(result.answer)
    if not answer_shown:
        out(answer)
    elif result.abstained:
        out(f"\n(withheld: the text above is not the answer; the answer is: {answer})")
    if result.abstained:
        out(f"\n(abstained: {safe_text(result.abstain_reason or '')})")
    elif result.confidence is not None or result.decision_reasons:
        confidence = "" if result.confidence is None else f" (confidence {result.confidence:.2f})"
        out(f"\ndecision: {result.decision}{confidence}")
        for reason in result.decision_reasons:
            out(f"  - {safe_text(reason)}")
        if result.review_id:
            out(f"  queued for review as {result.review_id}")
    if result.citations:
        out("\nSources:")
        for c in result.citations:
            snippet = " ".join(c.text.split())[:100]
            line = f"  [{c.number}] {c.doc_id} (score {c.score:.2f}, {c.method}): {snippet}..."
            out(safe_text(line))
    timings = ", ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in result.timings.items())
    out(
        f"\n{timings}; {result.usage.prompt_tokens} prompt + "
        f"{result.usage.completion_tokens} answer tokens"
    )


def cmd_ask(args: argparse.Namespace) -> int:
    options = {
        "index": args.index,
        "top_k": args.top_k,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "min_score": args.min_score,
        "retrieval": args.retrieval,
    }
    if args.stream and args.json:
        from rag.errors import InvalidInputError

        raise InvalidInputError("--stream and --json do not go together")
    if args.server:
        from rag.client import Client

        with Client(args.server) as client:
            if args.stream:
                return _print_stream(client.ask_stream(args.question, **options))
            result = client.ask(args.question, **options)
    else:
        from rag.errors import IndexNotFoundError
        from rag.pipeline import AskOptions, Pipeline
        from rag.retrieval.collection import check_index_name
        from rag.retrieval.index import VectorIndex

        settings = _settings(args)
        where = settings.retrieval
        path = where.index_dir / check_index_name(where.index_name)
        if not VectorIndex.exists(path):  # say so before spending seconds loading the model
            raise IndexNotFoundError(
                f"index {where.index_name!r} does not exist under {where.index_dir}: "
                f"build it with `ragguard ingest PATH --index {where.index_name}`"
            )
        pipeline = Pipeline.from_settings(settings)
        try:
            if args.stream:
                return _print_stream(pipeline.ask_stream(args.question, AskOptions(**options)))
            result = pipeline.ask_with(args.question, AskOptions(**options))
        finally:
            pipeline.close()
    _print_result(result, args.json)
    return 0


def _print_stream(events: Iterator[Any]) -> int:
    """Print the answer's tokens as they arrive, then what the guards decided."""
    from rag.display import safe_text
    from rag.types import ResultEvent, TokenEvent

    shown = False
    for event in events:
        if isinstance(event, TokenEvent):
            out(safe_text(event.text), end="", flush=True)
            shown = True
        elif isinstance(event, ResultEvent):
            if shown:
                out()
            _print_result(event.result, False, answer_shown=shown)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import math

    import uvicorn

    from rag import logs
    from rag.server import create_app
    from rag.server.auth import KeyStore, check_bind

    settings = _settings(
        args,
        host=args.host,
        port=args.port,
        ray_api_replicas=args.api_replicas,
        ray_engine_replicas=args.engine_replicas,
        ray_autoscale_max_replicas=args.autoscale_max_replicas,
    )
    logs.configure(settings.logging.log_level, settings.logging.log_format)
    keys = KeyStore(settings.keys_location(), settings.server.api_keys)
    try:
        protection = check_bind(settings.server.host, keys)  # refuses beyond loopback without keys
    finally:
        keys.close()
    note(
        f"ragguard: serving index {settings.retrieval.index_name!r} "
        f"on http://{settings.server.host}:{settings.server.port} ({protection}; "
        f"docs at /docs, reviewers at /review; the model loads in the background, see /readyz)"
    )
    if args.ray:
        from rag.server.ray_serve import serve_with_ray

        serve_with_ray(settings)
        return 0
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.logging.log_level,
        log_config=None,  # uvicorn's records go through ours (logs.configure)
        access_log=False,  # the app logs each request itself (rag.server.request_log)
        # On SIGTERM: stop accepting, let in-flight questions finish for up to the grace period
        # (streams are cancelled at its end: rag.server.streaming), then stop.
        timeout_graceful_shutdown=math.ceil(settings.server.shutdown_grace_s) + 2,
    )
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rag.errors import IndexNotFoundError
    from rag.retrieval.collection import check_index_name
    from rag.retrieval.index import VectorIndex, delete_index

    settings = _settings(args)
    if args.action == "list":
        root = settings.retrieval.index_dir
        names = (
            sorted(p.name for p in root.iterdir() if VectorIndex.exists(p)) if root.is_dir() else []
        )
        out("\n".join(names) if names else f"no indexes under {root}")
        return 0
    name = check_index_name(args.name or settings.retrieval.index_name)
    path = settings.retrieval.index_dir / name
    if args.action == "info":
        index = VectorIndex.open(path)
        out(json.dumps(asdict(index.info()), indent=2))
        index.close()
        return 0
    if not VectorIndex.exists(path):
        raise IndexNotFoundError(
            f"index {name!r} does not exist under {settings.retrieval.index_dir}"
        )
    if not args.yes:
        answer = input(f"Delete index {name!r} at {path}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            out("kept")
            return 1
    delete_index(path)
    out(f"deleted index {name}")
    return 0


class _IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser that takes its options before, between or after its positionals
    (``ragguard review claim --reviewer bob ID`` as well as ``... claim ID --reviewer bob``)."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:  # parse_known_intermixed_args calls back here: the plain parse
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", help="index name (default: RAGGUARD_INDEX_NAME or 'demo')")
    parser.add_argument("--index-dir", type=Path, help="folder of indexes (default: ./indexes)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragguard", description="Grounded question answering with checked answers."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_IntermixedParser)

    p = sub.add_parser(
        "ingest", help="add files or folders (.txt .md .html .pdf .jsonl) to an index"
    )
    p.add_argument("paths", nargs="+", help="files or folders")
    _common(p)
    p.add_argument("--index-type", choices=["flat", "hnsw"], help="for a new index (default flat)")
    p.add_argument("--chunk-size", type=int, help="tokens per chunk, for a new index")
    p.add_argument("--chunk-overlap", type=int, help="tokens shared by neighbouring chunks")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("ask", help="answer a question from an index")
    p.add_argument("question")
    _common(p)
    p.add_argument(
        "--model",
        help="smollm2-135m (default), qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, a GGUF file or a "
        "model folder",
    )
    p.add_argument("--top-k", type=int)
    p.add_argument("--min-score", type=float)
    p.add_argument(
        "--retrieval",
        choices=RETRIEVAL_MODES,
        help="rank passages by embedding (dense), words (bm25) or both (hybrid)",
    )
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--server", help="ask a running server (e.g. http://127.0.0.1:8000) instead")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument(
        "--stream", action="store_true", help="print the answer's tokens as they are generated"
    )
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("serve", help="serve the REST API")
    _common(p)
    p.add_argument("--model", help="a model profile (docs/models.md), GGUF file or model folder")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument(
        "--ray",
        action="store_true",
        help="serve on Ray Serve: API replicas over engine replicas (pip install ray[serve])",
    )
    p.add_argument("--api-replicas", type=int, help="--ray: API replicas (default 1)")
    p.add_argument("--engine-replicas", type=int, help="--ray: engine replicas (default 1)")
    p.add_argument(
        "--autoscale-max-replicas", type=int, help="--ray: autoscale API replicas up to this"
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("index", help="inspect or delete indexes")
    p.add_argument("action", choices=["info", "list", "delete"])
    p.add_argument("name", nargs="?", help="index name (default: RAGGUARD_INDEX_NAME or 'demo')")
    p.add_argument("--index-dir", type=Path, help="folder of indexes (default: ./indexes)")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_index)

    from rag.cli.calibrate import add_parsers as add_calibrate_parsers
    from rag.cli.config import add_parsers as add_config_parsers
    from rag.cli.eval import add_parsers as add_eval_parsers
    from rag.cli.review import add_parsers

    add_parsers(sub)
    add_calibrate_parsers(sub)
    add_eval_parsers(sub)
    add_config_parsers(sub)
    return parser


_EXIT_SIGPIPE = 141
"""128 + SIGPIPE (13): the status a shell reports for a tool whose reader closed the pipe."""


def _validation_summary(exc: Any) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = None if argv is None else list(argv)  # recorded by commands that report
    func: Callable[[argparse.Namespace], int] = args.func
    import httpx
    from pydantic import ValidationError

    from engine import EngineError
    from guards.review.errors import ReviewError
    from rag.display import safe_text
    from rag.errors import RagGuardError

    try:
        code = func(args)
        sys.stdout.flush()  # here, so that a closed pipe is handled below, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`ragguard review list | head`): stop quietly, as a tool killed
        # by SIGPIPE would, and point stdout at devnull so the flush at exit fails no more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _EXIT_SIGPIPE
    except (RagGuardError, EngineError, ReviewError, ValueError) as exc:
        # ValueError covers invalid sampling values; pydantic's ValidationError (a ValueError)
        # lists the settings that were out of range.
        message = _validation_summary(exc) if isinstance(exc, ValidationError) else str(exc)
        note(f"ragguard: error: {safe_text(message)}")
        return 2
    except httpx.HTTPError as exc:
        note(f"ragguard: error: cannot reach the server: {exc}")
        return 2
    except OSError as exc:  # a file or folder named on the command line (or in a setting)
        note(f"ragguard: error: {exc}")
        return 2
    except ImportError as exc:  # an optional dependency a setting needs (psycopg, ...)
        note(f"ragguard: error: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
