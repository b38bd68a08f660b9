"""Documents in, chunks out: loaders (txt, md, html, pdf, jsonl) and a token-aware splitter."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from rag.errors import DocumentParseError, InvalidInputError, UnsupportedFileTypeError

SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".jsonl")


@dataclass(slots=True)
class Document:
    """One source document: its id (stable across re-ingestion), text and metadata."""

    doc_id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.doc_id or len(self.doc_id) > 512:
            raise InvalidInputError("a document id must be 1 to 512 characters")

    @property
    def content_hash(self) -> str:
        """Hash of text and metadata: re-ingesting an unchanged document is skipped."""
        payload = json.dumps([self.text, self.metadata], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document small enough to embed and to quote."""

    chunk_id: str
    doc_id: str
    ordinal: int
    text: str


class _HTMLText(HTMLParser):
    """Visible text of an HTML page (scripts, styles and head metadata dropped)."""

    _SKIP = frozenset({"script", "style", "head", "noscript", "template"})
    _BLOCK = frozenset("p div br li h1 h2 h3 h4 h5 h6 tr section article".split())

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in self._SKIP:
            self._skip_depth += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in self._SKIP and self._skip_depth:
            self._skip_depth -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentParseError(f"{name} is not valid UTF-8 text: {exc}") from exc


def _parse_html(data: bytes, name: str) -> tuple[str, dict[str, Any]]:
    parser = _HTMLText()
    parser.feed(_decode(data, name))
    return parser.text(), ({"title": parser.title.strip()} if parser.title.strip() else {})


def _parse_pdf(data: bytes, name: str) -> tuple[str, dict[str, Any]]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many types on malformed or encrypted files
        raise DocumentParseError(f"{name} is not a readable PDF: {exc}") from exc
    return "\n\n".join(p.strip() for p in pages if p.strip()), {"num_pages": len(pages)}


def _parse_jsonl(data: bytes, name: str) -> Iterator[Document]:
    """One document per line: ``text``; optional ``id``/``doc_id``, ``title``, ``metadata``."""
    for line_no, line in enumerate(_decode(data, name).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocumentParseError(f"{name} line {line_no}: invalid JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise DocumentParseError(
                f"{name} line {line_no}: expected an object with a 'text' string"
            )
        doc_id = str(record.get("doc_id") or record.get("id") or f"{name}:{line_no}")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DocumentParseError(f"{name} line {line_no}: 'metadata' must be an object")
        metadata = dict(metadata)
        if record.get("title"):
            metadata["title"] = record["title"]
        metadata["source"] = name
        yield Document(doc_id, record["text"], metadata)


def parse_bytes(data: bytes, name: str, doc_id: str | None = None) -> list[Document]:
    """Documents held in one file's bytes; ``name`` (its file name) selects the parser."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise UnsupportedFileTypeError(
            f"cannot ingest {name!r}: supported types are {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if suffix == ".jsonl":
        return list(_parse_jsonl(data, name))
    if suffix in (".html", ".htm"):
        text, metadata = _parse_html(data, name)
    elif suffix == ".pdf":
        text, metadata = _parse_pdf(data, name)
    else:
        text, metadata = _decode(data, name), {}
    metadata["source"] = name
    return [Document(doc_id or name, text, metadata)]


def load_path(path: Path) -> Iterator[Document]:
    """Documents from a file or, recursively, from a folder (ids are paths relative to it)."""
    if not path.exists():
        raise InvalidInputError(f"{path} does not exist")
    if path.is_file():
        yield from parse_bytes(path.read_bytes(), path.name)
        return
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        if file.suffix.lower() in SUPPORTED_SUFFIXES and not file.name.startswith("."):
            yield from parse_bytes(file.read_bytes(), file.relative_to(path).as_posix())


class Chunker:
    """Splits text with llama-index's ``SentenceSplitter``, measured in the embedder's tokens."""

    def __init__(self, tokenize: Callable[[str], list[int]], chunk_size: int, chunk_overlap: int):
        if chunk_overlap >= chunk_size:
            raise InvalidInputError(
                f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})"
            )
        from llama_index.core.node_parser import SentenceSplitter

        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self._splitter = SentenceSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap, tokenizer=tokenize
        )

    def split(self, document: Document) -> list[Chunk]:
        """The document's chunks, in order; empty documents have none."""
        if not document.text.strip():
            return []
        pieces = self._splitter.split_text(document.text)
        return [
            Chunk(f"{document.doc_id}#{i}", document.doc_id, i, piece)
            for i, piece in enumerate(p for p in pieces if p.strip())
        ]
