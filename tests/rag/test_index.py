"""The persisted FAISS + SQLite index: contents, restarts, model mismatch, and crashes mid-write."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag.errors import IndexMismatchError, IndexNotFoundError, InvalidInputError
from rag.retrieval.documents import Chunk, Document
from rag.retrieval.index import VectorIndex, delete_index

DIM = 8


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def doc(doc_id: str, num_chunks: int, seed: int) -> tuple[Document, list[Chunk], np.ndarray]:
    chunks = [Chunk(f"{doc_id}#{i}", doc_id, i, f"{doc_id} chunk {i}") for i in range(num_chunks)]
    return (
        Document(doc_id, f"text of {doc_id} v{seed}"),
        chunks,
        np.stack([unit(seed + i) for i in range(num_chunks)]),
    )


def create(path: Path, index_type: str = "flat") -> VectorIndex:
    return VectorIndex.create(
        path, embedding_model="test-model", dimension=DIM, index_type=index_type
    )


@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
def test_write_search_delete_and_reopen(tmp_path: Path, index_type: str) -> None:
    index = create(tmp_path / "ix", index_type)
    index.write([doc("a", 3, 10), doc("b", 2, 20)])
    hits = index.search(unit(21), 1)
    assert hits[0].chunk.chunk_id == "b#1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert index.delete("a") and not index.delete("a")
    assert {h.chunk.doc_id for h in index.search(unit(10), 5)} == {"b"}
    info = index.info()
    assert (info.num_documents, info.num_chunks, info.generation) == (1, 2, 2)
    index.close()

    reopened = VectorIndex.open(tmp_path / "ix", embedding_model="test-model", dimension=DIM)
    assert reopened.info().num_chunks == 2
    assert reopened.search(unit(20), 1)[0].chunk.chunk_id == "b#0"
    assert (tmp_path / "ix" / "manifest.json").is_file()


def test_rewriting_a_document_replaces_its_chunks(tmp_path: Path) -> None:
    index = create(tmp_path / "ix")
    index.write([doc("a", 4, 10)])
    index.write([doc("a", 1, 50)])
    assert index.info().num_chunks == 1
    assert [h.chunk.chunk_id for h in index.search(unit(50), 3)] == ["a#0"]


def test_other_embedding_model_or_dimension_is_refused(tmp_path: Path) -> None:
    create(tmp_path / "ix").close()
    with pytest.raises(IndexMismatchError, match="test-model"):
        VectorIndex.open(tmp_path / "ix", embedding_model="other-model")
    with pytest.raises(IndexMismatchError, match="dimensional"):
        VectorIndex.open(tmp_path / "ix", embedding_model="test-model", dimension=DIM + 1)


def test_missing_index_and_bad_input(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="ragguard ingest"):
        VectorIndex.open(tmp_path / "nothing")
    index = create(tmp_path / "ix")
    with pytest.raises(InvalidInputError, match="already exists"):
        create(tmp_path / "ix")
    with pytest.raises(InvalidInputError, match="shape"):
        index.write(
            [(Document("a", "t"), [Chunk("a#0", "a", 0, "t")], np.zeros((2, DIM), np.float32))]
        )
    with pytest.raises(InvalidInputError, match="index_type"):
        VectorIndex.create(tmp_path / "iy", embedding_model="m", dimension=DIM, index_type="ivf")
    index.close()
    delete_index(tmp_path / "ix")
    assert not (tmp_path / "ix").exists()


def test_failure_during_the_database_write_keeps_the_old_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = create(tmp_path / "ix")
    index.write([doc("a", 2, 10)])
    calls = {"n": 0}
    original = VectorIndex._insert_rows

    def failing_insert(
        self: VectorIndex, document: Document, chunks: list[Chunk], vectors: np.ndarray
    ) -> list[tuple[int, np.ndarray]]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return original(self, document, chunks, vectors)

    monkeypatch.setattr(VectorIndex, "_insert_rows", failing_insert)
    with pytest.raises(OSError, match="disk full"):
        index.write([doc("a", 3, 30), doc("b", 2, 40)])
    assert index.info().num_chunks == 2 and index.info().generation == 1
    assert index.search(unit(10), 1)[0].chunk.chunk_id == "a#0"
    index.close()
    reopened = VectorIndex.open(tmp_path / "ix")
    assert [d.doc_id for d in reopened.documents()] == ["a"]
    assert reopened.search(unit(11), 1)[0].chunk.chunk_id == "a#1"


def test_failure_writing_faiss_after_commit_leaves_a_consistent_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faiss

    index = create(tmp_path / "ix")
    index.write([doc("a", 2, 10)])
    monkeypatch.setattr(faiss, "write_index", lambda *_: (_ for _ in ()).throw(OSError("no space")))
    with pytest.raises(OSError, match="no space"):
        index.write([doc("b", 1, 60)])
    assert not list((tmp_path / "ix").glob("*.tmp"))  # the temporary file went too
    # The database committed generation 2: the in-memory index was rebuilt to match it.
    assert index.search(unit(60), 1)[0].chunk.chunk_id == "b#0"
    monkeypatch.undo()
    index.close()
    reopened = VectorIndex.open(tmp_path / "ix")  # no FAISS file for generation 2: rebuilt
    assert reopened.generation == 2
    assert reopened.search(unit(60), 1)[0].chunk.chunk_id == "b#0"


_CRASHER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from pathlib import Path
    from rag.retrieval.index import VectorIndex
    from rag.retrieval.documents import Chunk, Document

    path, where = Path(sys.argv[1]), sys.argv[2]
    index = VectorIndex.open(path)
    if where == "mid-transaction":
        original = VectorIndex._insert_rows
        def insert_then_die(self, document, chunks, vectors):
            original(self, document, chunks, vectors)
            os._exit(9)  # killed after some rows, before COMMIT
        VectorIndex._insert_rows = insert_then_die
    else:
        from rag.retrieval.faiss_store import FaissStore
        def die(self, generation):
            os._exit(9)  # killed after COMMIT, before the FAISS file is written
        FaissStore.persist = die
    rng = np.random.default_rng(99)
    vectors = rng.standard_normal((3, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    chunks = [Chunk(f"new#{i}", "new", i, f"new {i}") for i in range(3)]
    index.write([(Document("new", "new doc"), chunks, vectors), (Document("c", "c"), chunks[:0], vectors[:0])])
    """
)


@pytest.mark.parametrize(
    ("where", "new_visible"), [("mid-transaction", False), ("after-commit", True)]
)
def test_process_killed_mid_write(tmp_path: Path, where: str, new_visible: bool) -> None:
    index = create(tmp_path / "ix")
    index.write([doc("a", 2, 10)])
    index.close()
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER, str(tmp_path / "ix"), where], check=False
    )
    assert proc.returncode == 9
    reopened = VectorIndex.open(tmp_path / "ix", embedding_model="test-model")
    doc_ids = {d.doc_id for d in reopened.documents()}
    assert doc_ids == ({"a", "new", "c"} if new_visible else {"a"})
    assert reopened.info().num_chunks == (5 if new_visible else 2)
    assert reopened.search(unit(10), 1)[0].chunk.chunk_id == "a#0"
    assert len(reopened.search(unit(10), 10)) == reopened.info().num_chunks


def test_two_processes_writing_one_index_stay_consistent(tmp_path: Path) -> None:
    """A server keeps the index open while `ragguard ingest` writes to it from another process."""
    index = create(tmp_path / "ix")
    index.write([doc("a", 2, 10)])
    writer = textwrap.dedent(
        """
        import sys
        import numpy as np
        from pathlib import Path
        from rag.retrieval.index import VectorIndex
        from rag.retrieval.documents import Chunk, Document
        index = VectorIndex.open(Path(sys.argv[1]))
        rng = np.random.default_rng(7)
        v = rng.standard_normal((1, 8)).astype(np.float32)
        v /= np.linalg.norm(v)
        index.write([(Document("other", "from another process"), [Chunk("other#0", "other", 0, "o")], v)])
        """
    )
    subprocess.run([sys.executable, "-c", writer, str(tmp_path / "ix")], check=True)
    other = np.random.default_rng(7).standard_normal(8).astype(np.float32)
    other /= np.linalg.norm(other)
    assert index.search(other, 1)[0].chunk.chunk_id == "other#0"  # seen without reopening
    index.write([doc("b", 1, 70)])  # must not clobber the other process's generation
    index.close()
    reopened = VectorIndex.open(tmp_path / "ix")
    assert {d.doc_id for d in reopened.documents()} == {"a", "other", "b"}
    assert reopened.generation == 3
    assert len(reopened.search(unit(10), 10)) == 4
    assert reopened.search(other, 1)[0].chunk.chunk_id == "other#0"


def test_corrupt_faiss_file_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    index = create(tmp_path / "ix")
    index.write([doc("a", 3, 10)])
    index.close()
    (tmp_path / "ix" / "vectors-1.faiss").write_bytes(b"not a faiss index")
    reopened = VectorIndex.open(tmp_path / "ix")
    assert reopened.search(unit(11), 1)[0].chunk.chunk_id == "a#1"


_CREATE_CRASHER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from rag.retrieval.index import VectorIndex

    connect = VectorIndex._connect
    def connect_then_die_at_the_second_meta_row(path):
        conn = connect(path)
        rows = []
        def trace(statement):
            rows.extend(["meta"] if statement.startswith("INSERT OR REPLACE INTO meta") else [])
            if len(rows) == 2:
                os._exit(9)  # killed while the metadata is being written
        conn.set_trace_callback(trace)
        return conn
    VectorIndex._connect = staticmethod(connect_then_die_at_the_second_meta_row)
    VectorIndex.create(Path(sys.argv[1]), embedding_model="test-model", dimension=8)
    """
)


def test_process_killed_while_creating_an_index(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CREATE_CRASHER, str(tmp_path / "ix")], check=False
    )
    assert proc.returncode == 9
    # No metadata row was committed: the index is incomplete, not half-described.
    assert VectorIndex.exists(tmp_path / "ix") and not VectorIndex.is_complete(tmp_path / "ix")
    with pytest.raises(IndexNotFoundError, match="never completely created"):
        VectorIndex.open(tmp_path / "ix")
    index = create(tmp_path / "ix")  # running the ingestion again completes it
    index.write([doc("a", 2, 10)])
    index.close()
    assert VectorIndex.open(tmp_path / "ix", embedding_model="test-model").info().num_chunks == 2
