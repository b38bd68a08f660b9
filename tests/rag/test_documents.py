from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rag.errors import DocumentParseError, InvalidInputError, UnsupportedFileTypeError
from rag.retrieval.documents import Chunker, Document, load_path, parse_bytes

if TYPE_CHECKING:
    from rag.retrieval.embed import Embedder


def make_pdf(text: str) -> bytes:
    """A minimal one-page PDF holding ``text`` (written by hand: no PDF writer needed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def test_each_supported_type_loads(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Plain text about caches.")
    (tmp_path / "b.md").write_text("# Title\n\nMarkdown body.")
    (tmp_path / "c.html").write_text(
        "<html><head><title>Page</title><style>p{}</style></head>"
        "<body><script>var x = 1;</script><p>Visible &amp; kept.</p></body></html>"
    )
    (tmp_path / "d.pdf").write_bytes(make_pdf("Text inside a PDF"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.jsonl").write_text(
        json.dumps({"id": "e1", "text": "First record.", "title": "One"})
        + "\n\n"
        + json.dumps({"text": "Second record.", "metadata": {"lang": "en"}})
        + "\n"
    )
    (tmp_path / "skip.bin").write_bytes(b"\x00")
    docs = {d.doc_id: d for d in load_path(tmp_path)}
    assert set(docs) == {"a.txt", "b.md", "c.html", "d.pdf", "e1", "sub/e.jsonl:3"}
    assert docs["c.html"].text == "Visible & kept."
    assert docs["c.html"].metadata["title"] == "Page"
    assert "Text inside a PDF" in docs["d.pdf"].text
    assert docs["e1"].metadata["title"] == "One"
    assert docs["sub/e.jsonl:3"].metadata["lang"] == "en"


def test_unsupported_type_names_the_supported_ones() -> None:
    with pytest.raises(UnsupportedFileTypeError, match=r"\.pdf"):
        parse_bytes(b"MZ", "tool.exe")


def test_malformed_jsonl_names_the_line() -> None:
    data = b'{"text": "ok"}\n{"text": broken}\n'
    with pytest.raises(DocumentParseError, match="line 2"):
        parse_bytes(data, "x.jsonl")
    with pytest.raises(DocumentParseError, match="line 1: expected an object with a 'text'"):
        parse_bytes(b'{"body": "no text field"}\n', "y.jsonl")


def test_broken_pdf_and_non_utf8_text_are_parse_errors() -> None:
    with pytest.raises(DocumentParseError, match="PDF"):
        parse_bytes(b"%PDF-1.4 garbage", "broken.pdf")
    with pytest.raises(DocumentParseError, match="UTF-8"):
        parse_bytes(b"\xff\xfe\xfa", "latin.txt")


def test_missing_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        list(load_path(tmp_path / "nope"))


def test_content_hash_changes_with_text_or_metadata() -> None:
    a = Document("d", "text", {"k": 1})
    assert a.content_hash == Document("d", "text", {"k": 1}).content_hash
    assert a.content_hash != Document("d", "text!", {"k": 1}).content_hash
    assert a.content_hash != Document("d", "text", {"k": 2}).content_hash


def test_chunks_respect_the_size_in_embedding_tokens(embedder: Embedder) -> None:
    text = " ".join(f"Sentence number {i} talks about key value caches." for i in range(200))
    chunker = Chunker(embedder.tokenize, chunk_size=64, chunk_overlap=8)
    chunks = chunker.split(Document("doc", text))
    assert len(chunks) > 10
    assert all(len(embedder.tokenize(c.text)) <= 64 for c in chunks)
    assert [c.chunk_id for c in chunks[:2]] == ["doc#0", "doc#1"]
    assert chunker.split(Document("empty", "   ")) == []


def test_overlap_must_be_smaller_than_size(embedder: Embedder) -> None:
    with pytest.raises(InvalidInputError, match="chunk_overlap"):
        Chunker(embedder.tokenize, chunk_size=32, chunk_overlap=32)
