"""Log-probabilities in OpenAI's two shapes (chat: per-token objects with byte values;
completions: parallel lists with text offsets), from the engine's per-token values."""

from __future__ import annotations

from typing import Any

from engine import CompletionOutput
from rag.server.openai.schemas import ChatLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob

_MIN_LOGPROB = -9999.0
"""Log-probabilities are clamped here: JSON has no -inf."""


class Tokens:
    """Token ids as text (cached per request)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = f"<{token_id}>"
            else:
                text = str(self.tokenizer.decode([token_id]))
                if not text:
                    text = str(self.tokenizer.convert_ids_to_tokens(token_id))
            self._cache[token_id] = text
        return text


def _logprob(value: float) -> float:
    value = float(value)
    return _MIN_LOGPROB if value != value else max(value, _MIN_LOGPROB)  # NaN, -inf


def _ranked(alternatives: dict[int, float], k: int) -> list[tuple[int, float]]:
    return sorted(alternatives.items(), key=lambda kv: kv[1], reverse=True)[:k]


def token_logprobs(
    tokens: Tokens,
    out: CompletionOutput,
    start: int,
    end: int,
    offset: int,
    top_k: int,
    *,
    chat: bool,
) -> ChatLogprobs | CompletionLogprobs:
    """Log-probabilities of tokens ``start:end`` of ``out`` with ``top_k`` alternatives each
    (``offset``: characters of the completion before them, for ``text_offset``)."""
    ids = out.token_ids[start:end]
    chosen = out.logprobs[start:end]
    tops = (out.top_logprobs or [])[start:end]
    strings = [tokens.text(t) for t in ids]
    if chat:
        content = []
        for i, (token, lp) in enumerate(zip(strings, chosen, strict=False)):
            alternatives = [
                TopLogprob(
                    token=(s := tokens.text(a)),
                    logprob=_logprob(v),
                    bytes=list(s.encode("utf-8")),
                )
                for a, v in (_ranked(tops[i], top_k) if i < len(tops) else [])
            ]
            content.append(
                TokenLogprob(
                    token=token,
                    logprob=_logprob(lp),
                    bytes=list(token.encode("utf-8")),
                    top_logprobs=alternatives,
                )
            )
        return ChatLogprobs(content=content)
    offsets = []
    for token in strings:
        offsets.append(offset)
        offset += len(token)
    top: list[dict[str, float]] = []
    for i, (token_id, lp) in enumerate(zip(ids, chosen, strict=False)):
        ranked = dict(_ranked(tops[i], top_k)) if i < len(tops) else {}
        ranked.setdefault(token_id, lp)  # the chosen token is always listed
        top.append({tokens.text(a): _logprob(v) for a, v in ranked.items()})
    return CompletionLogprobs(
        tokens=strings,
        token_logprobs=[_logprob(lp) for lp in chosen],
        top_logprobs=top,
        text_offset=offsets,
    )
