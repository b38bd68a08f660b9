"""Self-verification (P(True)): the generator judges its own answer on the shared prompt prefix.

After the answer, the conversation goes on with one more user turn asking whether the answer is
correct and supported by the passages; the probability the model gives "yes" against "no" as its
next token is the signal. The verification prompt starts with the answer's own prompt, so with
prefix caching only the answer and the question's few tokens are new: one short prefill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from engine import CompletionOutput, EngineClient, SamplingParams, generate_all
from rag.prompt import SYSTEM_PROMPT, build_messages
from rag.types import Passage

VERIFY_QUESTION = "Is your answer correct and supported by the passages? Reply yes or no."
NUM_TOP_TOKENS = 20
"""Alternatives read at the first position: "yes" and "no" are always among them in practice."""


def _word_token_ids(tokenizer: Any, words: Sequence[str]) -> frozenset[int]:
    """Ids of single tokens that spell one of ``words`` (any case, with or without a space)."""
    ids: set[int] = set()
    for word in words:
        for form in (word, word.capitalize(), word.upper()):
            for text in (form, " " + form):
                encoded = tokenizer.encode(text, add_special_tokens=False)
                if len(encoded) == 1:
                    ids.add(int(encoded[0]))
    return frozenset(ids)


def verification_messages(
    question: str, passages: list[Passage], answer: str, system_prompt: str = SYSTEM_PROMPT
) -> list[dict[str, str]]:
    """The answer's own conversation, then the verification question."""
    return [
        *build_messages(question, passages, system_prompt),
        {"role": "assistant", "content": answer},
        {"role": "user", "content": VERIFY_QUESTION},
    ]


class YesNoReader:
    """Asks an engine a prompt whose reply is yes or no, and reads P(yes) against P(no) from the
    first token's distribution (one prefill, one token)."""

    def __init__(self, engine: EngineClient):
        self.engine = engine
        tokenizer = engine.tokenizer
        if tokenizer is None:
            raise ValueError(f"{type(engine).__name__} exposes no tokenizer to read yes/no")
        self.yes_ids = _word_token_ids(tokenizer, ["yes"])
        self.no_ids = _word_token_ids(tokenizer, ["no"])
        if not self.yes_ids or not self.no_ids:
            raise ValueError("the tokenizer has no single token for 'yes' or 'no'")
        self.params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=NUM_TOP_TOKENS)

    async def p_yes(self, prompt: str, request_id: str | None = None) -> float | None:
        """P(yes) / (P(yes) + P(no)) at the first reply token; None when neither is in sight."""
        output = await generate_all(self.engine, prompt, self.params, request_id)
        return self.read(output.outputs[0])

    def read(self, completion: CompletionOutput) -> float | None:
        """P(yes) / (P(yes) + P(no)) of a one-token completion generated with ``params``."""
        top = (completion.top_logprobs or [{}])[0] or {}
        if completion.token_ids and completion.logprobs:  # the chosen token is always known
            top = {**top, completion.token_ids[0]: completion.logprobs[0]}
        p_yes = sum(math.exp(lp) for tid, lp in top.items() if tid in self.yes_ids)
        p_no = sum(math.exp(lp) for tid, lp in top.items() if tid in self.no_ids)
        if p_yes + p_no <= 0.0:
            return None
        return p_yes / (p_yes + p_no)


class SelfVerifier:
    """P(yes) that an answer is correct, asked of the generator that wrote it."""

    def __init__(self, engine: EngineClient, system_prompt: str = SYSTEM_PROMPT):
        self.engine = engine
        self.system_prompt = system_prompt
        self.reader = YesNoReader(engine)

    def prompt(self, question: str, passages: list[Passage], answer: str) -> str:
        """The verification prompt (``verification_messages``) in the engine's chat format."""
        messages = verification_messages(question, passages, answer, self.system_prompt)
        return self.engine.apply_chat_template(messages)

    async def score(
        self, question: str, passages: list[Passage], answer: str, request_id: str | None = None
    ) -> float | None:
        """P(yes) / (P(yes) + P(no)) at the first answer token; None when neither is in sight."""
        return await self.reader.p_yes(self.prompt(question, passages, answer), request_id)
