"""Title links: which documents a passage names, and hybrid search following them (the second
hop of a multi-hop question) over a real index, kept in step with writes and deletes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rag.retrieval.documents import Chunk, Document
from rag.retrieval.index import VectorIndex
from rag.retrieval.title_links import TitleLinks

DIM = 8


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return vector / np.linalg.norm(vector)


def links(*titles: str) -> TitleLinks:
    return TitleLinks(lambda: [(title, row) for row, title in enumerate(titles, start=1)])


def test_a_passage_links_to_the_titles_it_names_in_reading_order() -> None:
    found = links("Egan Bernal", "Colombia", "Tour de France", "Tour").follow(
        [("Tour de France", "Egan Bernal won the Tour de France for Colombia.")], generation=1
    )
    # Its own title is no link, and "Tour" inside "Tour de France" is not one either.
    assert found == [1, 2]


def test_titles_match_whole_words_case_and_all() -> None:
    table = links("Paris", "Nile", "AI")  # "AI": under MIN_TITLE_CHARS, never linked
    assert table.follow([(None, "Parisian cafes in paris, by AI")], generation=1) == []
    assert table.follow([(None, "A trip from Paris up the Nile.")], generation=1) == [1, 2]


def test_passages_are_read_best_first_and_a_document_is_linked_once() -> None:
    table = links("Lima", "Quito")
    found = table.follow([(None, "Quito, then Lima."), (None, "Lima and Quito.")], generation=1)
    assert found == [2, 1]


def write(index: VectorIndex, doc_id: str, title: str, text: str, seed: int) -> None:
    chunk = Chunk(f"{doc_id}#0", doc_id, 0, text)
    index.write([(Document(doc_id, text, {"title": title}), [chunk], unit(seed)[None, :])])


def test_hybrid_search_reaches_the_document_its_best_passage_names(tmp_path: Path) -> None:
    index = VectorIndex.create(tmp_path / "ix", embedding_model="test-model", dimension=DIM)
    write(index, "song", "Blue Harbor", "Blue Harbor is a 1998 song performed by Mara Quell.", 0)
    for n in range(1, 30):  # other passages, nearer the query vector than the performer's
        write(index, f"other{n}", f"Filler {n}", f"Filler text number {n} about rivers.", 100 + n)
    question = "Who is the spouse of the performer of Blue Harbor?"
    query = unit(0) + 0.02 * unit(999)
    query = (query / np.linalg.norm(query)).astype(np.float32)

    def hybrid_ids() -> list[str]:
        return [h.chunk.doc_id for h in index.search(query, 3, text=question, mode="hybrid")]

    assert "singer" not in hybrid_ids()
    # The performer's own passage shares no word with the question and its vector is far off.
    write(index, "singer", "Mara Quell", "She married the drummer Ivo Brandt in 2004.", 555)
    assert [h.chunk.doc_id for h in index.search(query, 3, text=question, mode="bm25")][:1] == [
        "song"
    ]
    assert "singer" not in [h.chunk.doc_id for h in index.search(query, 3, mode="dense")]
    assert hybrid_ids()[:2] == ["song", "singer"]  # linked from the best passage
    index.delete("singer")
    assert "singer" not in hybrid_ids()
    index.close()
