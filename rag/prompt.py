"""The grounded prompt: the rule to answer only from the passages, the numbered passages, then
the question.

The question comes last and the passages go in a canonical order (by document, then position in
it) rather than by rank: two questions that retrieve the same passages then share their prompt
up to the question, and the engine's prefix cache serves that shared part's KV instead of
computing it again.
"""

from __future__ import annotations

import re
from typing import Literal

from rag.types import Passage

SYSTEM_PROMPT = (
    "You answer questions using only the numbered passages below. "
    "Cite the passages you used with their numbers in brackets, like [1]. "
    "If the passages do not contain the answer, reply exactly: I don't know."
)

NO_ANSWER = "I don't know."

PassageOrder = Literal["canonical", "rank"]
"""How the prompt orders its passages: by document and position ("canonical", which the prefix
cache can share across questions) or best first ("rank")."""


def _natural(text: str) -> list[str | int]:
    """Sort key that puts ``doc#2`` before ``doc#10``."""
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", text))]


def canonical_order(passages: list[Passage]) -> list[Passage]:
    """``passages`` by document, then by chunk within it: the same set gives the same order
    whatever their scores."""
    return sorted(passages, key=lambda p: (_natural(p.doc_id), _natural(p.chunk_id)))


def prompt_order(passages: list[Passage], order: PassageOrder) -> list[Passage]:
    """The passages in the order the prompt shows (and numbers) them."""
    return canonical_order(passages) if order == "canonical" else list(passages)


def format_passages(passages: list[Passage]) -> str:
    """Passages numbered from 1, in the order given."""
    return "\n\n".join(f"[{i}] {' '.join(p.text.split())}" for i, p in enumerate(passages, start=1))


def build_messages(question: str, passages: list[Passage]) -> list[dict[str, str]]:
    """Chat messages asking for an answer grounded in ``passages``, in the order given."""
    user = f"Passages:\n{format_passages(passages)}\n\nQuestion: {question.strip()}\nAnswer:"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
