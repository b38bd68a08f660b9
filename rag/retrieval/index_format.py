"""An index's metadata: its format version, how it was built, and the manifest.

The metadata lives in the ``meta`` table of ``chunks.sqlite`` (``rag.retrieval.chunk_db``), one
string per key; ``manifest.json`` is a readable copy of it, rewritten after every commit.
Opening an index checks the metadata against this ragguard and the configured embedding model.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from rag.atomic import atomic_write_bytes
from rag.errors import IndexMismatchError, IndexNotFoundError, InvalidInputError
from rag.retrieval.records import IndexInfo

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
INDEX_TYPES = ("flat", "hnsw")
MANIFEST_FILE = "manifest.json"


def check_index_type(index_type: str) -> None:
    if index_type not in INDEX_TYPES:
        raise InvalidInputError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")


def new_meta(
    embedding_model: str,
    dimension: int,
    index_type: str,
    chunk_size: int,
    chunk_overlap: int,
    now: float,
) -> dict[str, str]:
    """The metadata of an empty index, generation 0."""
    return {
        "format_version": str(FORMAT_VERSION),
        "embedding_model": embedding_model,
        "dimension": str(dimension),
        "index_type": index_type,
        "chunk_size": str(chunk_size),
        "chunk_overlap": str(chunk_overlap),
        "generation": "0",
        "created_at": repr(now),
        "updated_at": repr(now),
    }


def check(
    path: Path, meta: dict[str, str], embedding_model: str | None, dimension: int | None
) -> None:
    """Refuse an index whose creation never committed, of another format version, or built
    with another embedding model (when ``embedding_model`` is set) or dimension."""
    if "format_version" not in meta:
        raise IndexNotFoundError(f"the index at {path} was never completely created; delete it")
    if int(meta["format_version"]) != FORMAT_VERSION:
        raise IndexMismatchError(
            f"index {path.name} has format version {meta['format_version']}; "
            f"this ragguard reads version {FORMAT_VERSION}: rebuild it"
        )
    built_with = meta["embedding_model"]
    if embedding_model is not None and built_with != embedding_model:
        raise IndexMismatchError(
            f"index {path.name} was built with embedding model {built_with!r}, but "
            f"{embedding_model!r} is configured: use that model or rebuild the index"
        )
    if dimension is not None and int(meta["dimension"]) != dimension:
        raise IndexMismatchError(
            f"index {path.name} holds {meta['dimension']}-dimensional vectors; "
            f"the configured embedding model produces {dimension}"
        )


def info_of(name: str, meta: dict[str, str], num_documents: int, num_chunks: int) -> IndexInfo:
    return IndexInfo(
        name=name,
        format_version=int(meta["format_version"]),
        embedding_model=meta["embedding_model"],
        dimension=int(meta["dimension"]),
        index_type=meta["index_type"],
        chunk_size=int(meta["chunk_size"]),
        chunk_overlap=int(meta["chunk_overlap"]),
        num_documents=num_documents,
        num_chunks=num_chunks,
        generation=int(meta["generation"]),
        created_at=float(meta["created_at"]),
        updated_at=float(meta["updated_at"]),
    )


def write_manifest(path: Path, info: IndexInfo) -> None:
    """A readable copy of the metadata; derived, so failing to write it is only logged."""
    manifest = asdict(info)
    try:
        atomic_write_bytes(path / MANIFEST_FILE, json.dumps(manifest, indent=2).encode())
    except OSError:
        logger.warning("index %s: could not write manifest.json", info.name, exc_info=True)
