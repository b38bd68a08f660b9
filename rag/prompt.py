"""The grounded prompt: numbered passages, the question, and the rule to answer only from them."""

from __future__ import annotations

from rag.types import Passage

SYSTEM_PROMPT = (
    "You answer questions using only the numbered passages below. "
    "Cite the passages you used with their numbers in brackets, like [1]. "
    "If the passages do not contain the answer, reply exactly: I don't know."
)

NO_ANSWER = "I don't know."


def format_passages(passages: list[Passage]) -> str:
    """Passages numbered from 1, in the order given."""
    return "\n\n".join(f"[{i}] {' '.join(p.text.split())}" for i, p in enumerate(passages, start=1))


def build_messages(question: str, passages: list[Passage]) -> list[dict[str, str]]:
    """Chat messages asking for an answer grounded in ``passages``."""
    user = f"Passages:\n{format_passages(passages)}\n\nQuestion: {question.strip()}\nAnswer:"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
