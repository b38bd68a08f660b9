"""The packaged demo collection and its knowledge graph are well-formed and agree with each other."""

from __future__ import annotations

from pathlib import Path

from rag.demo import demo_collection_path
from rag.retrieval.documents import load_path

DATA = demo_collection_path().parent


def read_pairs(path: Path, width: int) -> list[list[str]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        assert len(fields) == width and all(fields), f"{path.name} line {number}: {line!r}"
        rows.append(fields)
    return rows


def test_demo_documents_load_with_titles() -> None:
    docs = list(load_path(demo_collection_path()))
    assert len(docs) >= 20
    for doc in docs:
        assert doc.doc_id.endswith(".md") and doc.text.startswith("# ")
        assert 100 <= len(doc.text.split()) <= 600, doc.doc_id


def test_knowledge_graph_has_enough_unique_triples_and_valid_aliases() -> None:
    triples = read_pairs(DATA / "demo_kg.txt", 3)
    assert len(triples) >= 150
    assert len({tuple(t) for t in triples}) == len(triples)
    entities = {t[0] for t in triples} | {t[2] for t in triples}
    aliases = read_pairs(DATA / "demo_kg_aliases.txt", 2)
    assert len(aliases) >= 20
    assert all(canonical in entities for _, canonical in aliases)


def test_graph_states_the_facts_the_documents_state() -> None:
    triples = {tuple(t) for t in read_pairs(DATA / "demo_kg.txt", 3)}
    kv_objects = {o for s, r, o in triples if s == "kv cache" and r == "avoids_recomputing"}
    assert kv_objects, "the demo question's fact is missing from the graph"
    kv_doc = (demo_collection_path() / "kv-cache.md").read_text().lower()
    assert "avoids recomputing" in kv_doc
    presets = {(s, r): o for s, r, o in triples if s.endswith("preset")}
    assert presets[("technical preset", "has_temperature")] == "0.3"
    assert presets[("creative preset", "has_top_p")] == "0.95"
