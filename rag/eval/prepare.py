"""Built-in evaluation sets: the public data sets turned into ``EvalItem``s plus the documents
their index is built from.

``prepare(name, data_dir)`` reads the layout described in ``rag.eval.datasets``, so the same
command runs on any copy of the sets. Items keep the source's order, except MetaQA's, which the
source groups by question type and which are therefore shuffled with a fixed seed (so that the
first N of any ``--limit`` mix the types).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rag.errors import InvalidInputError
from rag.eval import datasets as ds
from rag.eval.items import EvalItem, read_items
from rag.retrieval.documents import Document

if TYPE_CHECKING:
    from guards import KnowledgeGraph

SHUFFLE_SEED = 0
YES_NO_SUFFIX = " Answer yes, no or maybe."


@dataclass(frozen=True, slots=True)
class PreparedDataset:
    """Items to ask and the documents their index holds (none: no index is needed)."""

    name: str
    items: list[EvalItem]
    documents: list[Document] = field(default_factory=list)
    load_graph: Callable[[], KnowledgeGraph] | None = None
    """Builds the knowledge graph the answers should be checked against (MetaQA's movies)."""


def prepare_musique(data_dir: Path) -> PreparedDataset:
    """MuSiQue-Ans: 2-4 hop questions over 1,890 Wikipedia paragraphs; gold = the supporting
    paragraphs (matched by title and text, since titles repeat)."""
    corpus = ds.read_json(data_dir / ds.MULTIHOP / "musique_train_corpus.json")
    docs = [
        Document(f"{p['title']} [{i}]", p["text"], {"title": p["title"]})
        for i, p in enumerate(corpus)
    ]
    doc_id = {(p["title"], p["text"]): d.doc_id for p, d in zip(corpus, docs, strict=True)}
    items = [
        EvalItem(
            id=q["id"],
            question=q["question"],
            answers=(q["answer"], *q.get("answer_aliases", [])),
            gold_passage_ids=tuple(
                doc_id[(p["title"], p["paragraph_text"])]
                for p in q["paragraphs"]
                if p["is_supporting"] and (p["title"], p["paragraph_text"]) in doc_id
            ),
        )
        for q in ds.read_json(data_dir / ds.MULTIHOP / "musique_train.json")
    ]
    return PreparedDataset("musique", items, docs)


def prepare_hotpotqa(data_dir: Path) -> PreparedDataset:
    """HotpotQA: 2-hop questions over their Wikipedia paragraphs (one document per title)."""
    data = ds.load_hotpotqa(data_dir)
    titles = {d.doc_id for d in data.documents}
    items = [
        EvalItem(
            id=e.id,
            question=e.question,
            answers=e.answers,
            gold_passage_ids=tuple(sorted(e.gold_titles & titles)),
        )
        for e in data.examples
    ]
    return PreparedDataset("hotpotqa", items, data.documents)


def prepare_pubmedqa(data_dir: Path) -> PreparedDataset:
    """PubMedQA PQA-L: yes / no / maybe questions; the index holds every question's abstract,
    so each must be found among all of them."""
    data = ds.load_pubmedqa(data_dir)
    items = [
        EvalItem(
            id=e.id,
            question=e.question + YES_NO_SUFFIX,
            answers=e.answers,
            answer_type="yes_no",
            gold_passage_ids=tuple(sorted(e.gold_titles)),
        )
        for e in data.examples
    ]
    return PreparedDataset("pubmedqa", items, data.documents)


def prepare_metaqa(data_dir: Path) -> PreparedDataset:
    """MetaQA 1-hop questions the graph supports, over the graph rendered as one passage per
    movie plus the OMDb plots; gold = the passages of the movies the answer's triples are about.
    The knowledge-graph guard checks answers against the same graph."""
    from guards import KnowledgeGraph
    from rag.eval.movies import MOVIE_FUNCTIONAL_RELATIONS, MOVIE_RELATION_PHRASES

    kb_path = ds.metaqa_kb_path(data_dir)
    movie_docs = ds.render_movie_passages(ds.read_metaqa_triples(data_dir))
    movies = {d.doc_id for d in movie_docs}
    questions = [q for q in ds.load_metaqa_questions(data_dir) if q.kb_supported]
    random.Random(SHUFFLE_SEED).shuffle(questions)
    items = [
        EvalItem(
            id=q.id,
            question=q.question.replace("[", "").replace("]", ""),
            answers=q.answers,
            gold_passage_ids=tuple(
                dict.fromkeys(s for s, _, _ in q.implied_triples if s in movies)
            ),
        )
        for q in questions
    ]

    def load_graph() -> KnowledgeGraph:
        return KnowledgeGraph.from_file(
            kb_path,
            functional_relations=MOVIE_FUNCTIONAL_RELATIONS,
            relation_phrases=MOVIE_RELATION_PHRASES,
        )

    docs = movie_docs + ds.load_metaqa_plots(data_dir)
    return PreparedDataset("metaqa", items, docs, load_graph)


def prepare_halueval(data_dir: Path) -> PreparedDataset:
    """HaluEval QA: each question twice, with its right answer (label 1) and its hallucinated
    one (label 0), and the knowledge passage as context. Nothing is generated or retrieved."""
    items = []
    for k, row in enumerate(ds.load_halueval(data_dir)):
        for suffix, answer, label in (
            ("right", row.right_answer, 1),
            ("hallucinated", row.hallucinated_answer, 0),
        ):
            items.append(
                EvalItem(
                    id=f"{k}-{suffix}",
                    question=row.question,
                    answers=(row.right_answer,),
                    label=label,
                    answer=answer,
                    passages=(row.knowledge,),
                )
            )
    return PreparedDataset("halueval", items)


def prepare_halueval_ask(data_dir: Path) -> PreparedDataset:
    """HaluEval QA's questions asked of the pipeline (not its two given answers): the index
    holds every question's knowledge paragraph (HotpotQA's supporting sentences), so each must
    be found among all of them; gold = the right answer. Yes/no questions are judged by the
    verdict the answer opens with. More multi-hop questions with real answers than the two
    HippoRAG subsets hold (50 + 100), for the judgement's training and validation."""
    docs, items = [], []
    for k, row in enumerate(ds.load_halueval(data_dir)):
        doc = Document(f"halueval-{k}", row.knowledge)  # no title: BM25 would read the question
        docs.append(doc)
        yes_no = row.right_answer.strip().casefold() in ("yes", "no")
        items.append(
            EvalItem(
                id=f"ask-{k}",
                question=row.question,
                answers=(row.right_answer.strip().casefold() if yes_no else row.right_answer,),
                answer_type="yes_no" if yes_no else "free",
                gold_passage_ids=(doc.doc_id,),
            )
        )
    return PreparedDataset("halueval_ask", items, docs)


def prepare_rgb(data_dir: Path) -> PreparedDataset:
    """RGB counterfactual robustness: the index holds every query's true passages, the same
    passages edited to state a false answer, and noise; gold = the true ones; the false answer
    is a known wrong answer. (CC BY-NC-SA 4.0: read at run time, for evaluation only.)"""
    docs: list[Document] = []
    items = []
    for row in ds.load_rgb(data_dir):
        true_ids = []
        for kind, texts in (
            ("true", row.positive),
            ("counterfactual", row.positive_wrong),
            ("noise", row.negative),
        ):
            for j, text in enumerate(texts):
                doc = Document(f"rgb-{row.id}-{kind}-{j}", text, {"title": row.query, "kind": kind})
                docs.append(doc)
                if kind == "true":
                    true_ids.append(doc.doc_id)
        items.append(
            EvalItem(
                id=row.id,
                question=row.query,
                answers=row.answers,
                wrong_answers=(row.fake_answer,),
                gold_passage_ids=tuple(true_ids),
            )
        )
    return PreparedDataset("rgb", items, docs)


def prepare_rgb_noise(data_dir: Path) -> PreparedDataset:
    """RGB's queries over an index of their noise passages only: no passage holds the answer,
    so the right outcome is to decline or withhold (what share does is the figure to read; an
    answer naming the true answer came from the model's own memory)."""
    docs = [
        Document(f"rgb-{row.id}-noise-{j}", text, {"title": row.query, "kind": "noise"})
        for row in ds.load_rgb(data_dir)
        for j, text in enumerate(row.negative)
    ]
    items = [
        EvalItem(id=row.id, question=row.query, answers=row.answers)
        for row in ds.load_rgb(data_dir)
    ]
    return PreparedDataset("rgb_noise", items, docs)


def prepare_squad2(data_dir: Path) -> PreparedDataset:
    """SQuAD 2.0 (part of its dev set): questions over an index of every paragraph, about half
    of them unanswerable from their paragraph (written to look answerable), where the right
    outcome is to decline. Shuffled with a fixed seed, so the first N of any ``--limit`` mix
    the articles and both kinds; gold = the question's own paragraph."""
    docs: list[Document] = []
    items: list[EvalItem] = []
    for article in ds.load_squad2(data_dir):
        for j, paragraph in enumerate(article["paragraphs"]):
            doc = Document(f"{article['title']}-{j}", paragraph["context"])
            docs.append(doc)
            for qa in paragraph["qas"]:
                answers = tuple(dict.fromkeys(a["text"] for a in qa.get("answers", [])))
                impossible = bool(qa.get("is_impossible")) or not answers
                items.append(
                    EvalItem(
                        id=qa["id"],
                        question=qa["question"].strip(),
                        answers=() if impossible else answers,
                        answerable=not impossible,
                        gold_passage_ids=(doc.doc_id,),
                    )
                )
    random.Random(SHUFFLE_SEED).shuffle(items)
    return PreparedDataset("squad2", items, docs)


BUILTIN: dict[str, Callable[[Path], PreparedDataset]] = {
    "musique": prepare_musique,
    "hotpotqa": prepare_hotpotqa,
    "pubmedqa": prepare_pubmedqa,
    "metaqa": prepare_metaqa,
    "halueval": prepare_halueval,
    "halueval_ask": prepare_halueval_ask,
    "rgb": prepare_rgb,
    "rgb_noise": prepare_rgb_noise,
    "squad2": prepare_squad2,
}


def prepare(name: str, data_dir: Path) -> PreparedDataset:
    """The built-in set ``name`` read from ``data_dir``."""
    if name not in BUILTIN:
        raise InvalidInputError(
            f"unknown built-in dataset {name!r}: choose one of {', '.join(BUILTIN)}, "
            "or give the path of a JSONL file"
        )
    return BUILTIN[name](data_dir)


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
