"""Generation settings: the prompt and the answer's sampling."""

from __future__ import annotations

from pydantic import Field

from rag.prompt import PassageOrder
from rag.settings.base import Group


class GenerationSettings(Group):
    """How an answer is asked for: the prompt and the answer's sampling."""

    passage_order: PassageOrder = Field(
        "reuse",
        description="order of the passages in the prompt: reuse (a recent prompt's order for "
        "the passages this one shares with it, then the rest best first: the prefix cache then "
        "serves the shared passages' KV), canonical (by document and position) or rank (best "
        "first)",
    )
    system_prompt: str = Field(
        "",
        max_length=4000,
        description="the rule the generator answers by, sent before the passages; empty = "
        "the model's default (rag.prompt.MODEL_SYSTEM_PROMPTS, else rag.prompt.SYSTEM_PROMPT)",
    )
    max_tokens: int = Field(160, ge=1, le=4096, description="answer length limit in tokens")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 = greedy")
