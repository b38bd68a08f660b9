"""Loaders of the labelled data sets the evaluations use, from a data folder laid out as:

    hipporag_multihop_subsets/{musique,hotpotqa}_train{,_corpus}.json  multi-hop QA, passages
    pubmedqa/ori_pqal.json                                             yes/no/maybe QA, abstracts
    halueval/qa_one-turn_data.jsonl                                    right, hallucinated answers
    metaqa_wikimovies/kb/kb_reconstructed.txt, qa/metaqa_1hop_test.jsonl  movie graph, questions
    metaqa_wikimovies/corpus/omdb_plots.jsonl                          movie plots
    rgb_en_fact/en_fact.jsonl                                          true, counterfactual, noise
    squad2/dev-v2.0.json                                               SQuAD 2.0, half unanswerable

A missing file is a ``DatasetNotFoundError`` that names it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from guards.answers import verdict
from rag.retrieval.documents import Document

MULTIHOP = Path("hipporag_multihop_subsets")
METAQA = Path("metaqa_wikimovies")
RGB = Path("rgb_en_fact")
MOVIE_LABELS = {
    "directed_by": "Directed by",
    "written_by": "Written by",
    "starred_actors": "Starring",
    "release_year": "Released in",
    "in_language": "Language",
    "has_genre": "Genre",
    "has_tags": "Tags",
    "has_imdb_rating": "IMDb rating",
    "has_imdb_votes": "IMDb votes",
}
"""How each MetaQA relation reads in a movie's passage, in the order the passage lists them."""


class DatasetNotFoundError(FileNotFoundError):
    """A data set file is not where the data folder layout says it should be."""


@dataclass(frozen=True, slots=True)
class QAExample:
    """A question, its accepted answers, and the titles of the passages that support it."""

    id: str
    question: str
    answers: tuple[str, ...]
    gold_titles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class QADataset:
    """Questions with a corpus to retrieve their passages from."""

    name: str
    documents: list[Document]
    examples: list[QAExample]
    answer_kind: Literal["free", "yes_no"] = "free"
    """``yes_no``: the answer is right when its verdict (yes / no / maybe) is the gold one."""


@dataclass(frozen=True, slots=True)
class HaluEvalItem:
    knowledge: str
    question: str
    right_answer: str
    hallucinated_answer: str


@dataclass(frozen=True, slots=True)
class RGBItem:
    """An RGB news query: its answers, a counterfactual answer and three kinds of passages."""

    id: str
    query: str
    answers: tuple[str, ...]
    fake_answer: str
    positive: tuple[str, ...]
    """Passages that state the true answer."""
    positive_wrong: tuple[str, ...]
    """The same passages edited to state ``fake_answer``."""
    negative: tuple[str, ...]
    """Related passages that hold neither (noise)."""


@dataclass(frozen=True, slots=True)
class MetaQAQuestion:
    id: str
    question: str
    topic_entity: str
    answers: tuple[str, ...]
    implied_triples: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)
    kb_supported: bool = True


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise DatasetNotFoundError(f"{path} not found (see rag.eval.datasets for the layout)")
    return json.loads(path.read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        raise DatasetNotFoundError(f"{path} not found (see rag.eval.datasets for the layout)")
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def load_squad2(data_dir: Path) -> list[dict[str, Any]]:
    """SQuAD 2.0's articles: {title, paragraphs: [{context, qas: [{id, question, answers,
    is_impossible}]}]}."""
    data = read_json(data_dir / "squad2" / "dev-v2.0.json")
    articles: list[dict[str, Any]] = data["data"]
    return articles


def load_musique(data_dir: Path, limit: int | None = None) -> QADataset:
    """MuSiQue-Ans questions (answer plus its aliases) over 1,890 passages; titles repeat, so
    document ids carry the passage's position."""
    corpus = read_json(data_dir / MULTIHOP / "musique_train_corpus.json")
    documents = [
        Document(f"{p['title']} [{i}]", p["text"], {"title": p["title"]})
        for i, p in enumerate(corpus)
    ]
    examples = [
        QAExample(
            q["id"],
            q["question"],
            (q["answer"], *q.get("answer_aliases", [])),
            frozenset(p["title"] for p in q["paragraphs"] if p["is_supporting"]),
        )
        for q in read_json(data_dir / MULTIHOP / "musique_train.json")[:limit]
    ]
    return QADataset("musique", documents, examples)


def load_hotpotqa(data_dir: Path, limit: int | None = None) -> QADataset:
    """HotpotQA questions over their Wikipedia paragraphs (sentences carry their own spacing)."""
    corpus = read_json(data_dir / MULTIHOP / "hotpotqa_train_corpus.json")
    documents = [
        Document(title, "".join(sents), {"title": title}) for title, sents in corpus.items()
    ]
    examples = [
        QAExample(
            q["_id"],
            q["question"],
            (q["answer"],),
            frozenset(title for title, _ in q["supporting_facts"]),
        )
        for q in read_json(data_dir / MULTIHOP / "hotpotqa_train.json")[:limit]
    ]
    return QADataset("hotpotqa", documents, examples)


def load_pubmedqa(data_dir: Path, limit: int | None = None) -> QADataset:
    """PubMedQA PQA-L: a yes / no / maybe question per abstract; the corpus is the abstracts
    of the loaded questions, so each must be found among the others."""
    items = list(read_json(data_dir / "pubmedqa" / "ori_pqal.json").items())[:limit]
    documents = [
        Document(pmid, " ".join(item["CONTEXTS"]), {"title": pmid}) for pmid, item in items
    ]
    examples = [
        QAExample(pmid, item["QUESTION"], (item["final_decision"],), frozenset({pmid}))
        for pmid, item in items
    ]
    return QADataset("pubmedqa", documents, examples, answer_kind="yes_no")


def load_halueval(data_dir: Path, limit: int | None = None) -> list[HaluEvalItem]:
    """HaluEval QA: for each question its knowledge, the right and a hallucinated answer."""
    rows = read_jsonl(data_dir / "halueval" / "qa_one-turn_data.jsonl")
    items = [
        HaluEvalItem(r["knowledge"], r["question"], r["right_answer"], r["hallucinated_answer"])
        for r in rows
    ]
    return items[:limit]


def metaqa_kb_path(data_dir: Path) -> Path:
    path = data_dir / METAQA / "kb" / "kb_reconstructed.txt"
    if not path.is_file():
        raise DatasetNotFoundError(f"{path} not found (see rag.eval.datasets for the layout)")
    return path


def load_metaqa_questions(data_dir: Path, limit: int | None = None) -> list[MetaQAQuestion]:
    """MetaQA 1-hop test questions with the triples their answers imply."""
    questions = [
        MetaQAQuestion(
            r["id"],
            r["question"],
            r["topic_entity"],
            tuple(r["answers"]),
            tuple(tuple(t) for t in r.get("implied_triples", [])),
            bool(r.get("kb_supported", True)),
        )
        for r in read_jsonl(data_dir / METAQA / "qa" / "metaqa_1hop_test.jsonl")
    ]
    return questions[:limit]


def load_metaqa_plots(data_dir: Path) -> list[Document]:
    """The OMDb plot summaries (lower-cased, without punctuation), one document each."""
    return [
        Document(r["doc_id"], r["text"], {"title": ", ".join(r.get("kb_movie_entities", []))})
        for r in read_jsonl(data_dir / METAQA / "corpus" / "omdb_plots.jsonl")
        if r["text"].strip()
    ]


def render_movie_passages(triples: Iterable[tuple[str, str, str]]) -> list[Document]:
    """Each movie's triples written out as one short text, e.g. "Kismet. Directed by William
    Dieterle. Starring Edward Arnold, ..."; the document id is the movie's name."""
    facts: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for subject, relation, obj in triples:
        if relation in MOVIE_LABELS:
            facts[subject][relation].add(obj)
    docs = []
    for movie in sorted(facts):
        parts = [
            f"{label}: {', '.join(sorted(facts[movie][relation]))}."
            for relation, label in MOVIE_LABELS.items()
            if facts[movie][relation]
        ]
        docs.append(Document(movie, f"{movie}. " + " ".join(parts), {"title": movie}))
    return docs


def read_metaqa_triples(data_dir: Path) -> Iterator[tuple[str, str, str]]:
    """The movie graph's ``subject|relation|object`` lines."""
    with metaqa_kb_path(data_dir).open(encoding="utf-8") as lines:
        for line in lines:
            parts = line.rstrip("\n").split("|")
            if len(parts) == 3 and all(parts):
                yield parts[0], parts[1], parts[2]


def _flat_strings(value: Any) -> list[str]:
    """RGB answers are a string, a list of them, or a list of lists of variants."""
    if isinstance(value, str):
        return [value]
    return [s for v in value for s in _flat_strings(v)]


def load_rgb(data_dir: Path, limit: int | None = None) -> list[RGBItem]:
    """RGB counterfactual robustness (English): a query, its answers (all variants), the
    counterfactual answer, true, edited and noise passages. Licence: CC BY-NC-SA 4.0."""
    items = [
        RGBItem(
            str(r["id"]),
            r["query"],
            tuple(dict.fromkeys(_flat_strings(r["answer"]))),
            r["fakeanswer"],
            tuple(r.get("positive", [])),
            tuple(r.get("positive_wrong", [])),
            tuple(r.get("negative", [])),
        )
        for r in read_jsonl(data_dir / RGB / "en_fact.jsonl")
    ]
    return items[:limit]


def verdict_of(answer: str) -> str | None:
    """The yes / no / maybe an answer opens with, if any ("The answer is: no." gives "no"; an
    answer that lists the options, "Yes, no or maybe.", gives none)."""
    return verdict(answer)
