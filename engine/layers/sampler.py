"""Batched sampling: penalties, temperature, top-k, top-p, min-p, seeded draws, logprobs.

All rows are processed together as tensors; only requests that need per-row work (a seed, a
no-repeat n-gram size) add a small loop of bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.sampling_params import SamplingParams


@dataclass(slots=True)
class SampleRow:
    """One row of logits to sample from, with what its penalties need."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    rng: torch.Generator | None = None


@dataclass(slots=True)
class SampleResult:
    token_ids: list[int]
    logprobs: list[float]
    """Chosen tokens' log-probabilities under the raw (unpenalised, unwarped) distribution."""
    top_logprobs: list[dict[int, float] | None]


def _padded(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r)
    return out.to(device)


def _token_counts(rows: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """(rows, vocab) occurrence counts; -1 padding lands in a dropped extra column."""
    ids = _padded(rows, device)
    counts = torch.zeros(len(rows), vocab + 1, device=device)
    counts.scatter_add_(
        1, ids.clamp(min=-1) % (vocab + 1), torch.ones_like(ids, dtype=counts.dtype)
    )
    return counts[:, :vocab]


def apply_penalties(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    vocab = logits.shape[1]
    rep = torch.tensor([r.params.repetition_penalty for r in rows], device=logits.device)
    if bool((rep != 1.0).any()):
        seen = (
            _token_counts(
                [r.prompt_token_ids + r.output_token_ids for r in rows], vocab, logits.device
            )
            > 0
        )
        penalised = torch.where(logits < 0, logits * rep[:, None], logits / rep[:, None])
        logits = torch.where(seen, penalised, logits)
    presence = torch.tensor([r.params.presence_penalty for r in rows], device=logits.device)
    frequency = torch.tensor([r.params.frequency_penalty for r in rows], device=logits.device)
    if bool((presence != 0).any() or (frequency != 0).any()):
        counts = _token_counts([r.output_token_ids for r in rows], vocab, logits.device)
        logits = logits - frequency[:, None] * counts - presence[:, None] * (counts > 0).float()
    for i, r in enumerate(rows):
        size = r.params.no_repeat_ngram_size
        if size:
            logits[i, banned_ngram_tokens(r.prompt_token_ids + r.output_token_ids, size)] = -float(
                "inf"
            )
    return logits


def banned_ngram_tokens(tokens: list[int], size: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``tokens``."""
    if len(tokens) < size:
        return []
    prefix = tuple(tokens[len(tokens) - size + 1 :])
    return [
        tokens[i + size - 1]
        for i in range(len(tokens) - size + 1)
        if tuple(tokens[i : i + size - 1]) == prefix
    ]


def apply_warpers(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p for sampled rows (greedy rows are left alone)."""
    device = logits.device
    temperature = torch.tensor([r.params.temperature or 1.0 for r in rows], device=device)
    logits = logits / temperature[:, None]
    vocab = logits.shape[1]
    top_k = torch.tensor([r.params.top_k or vocab for r in rows], device=device).clamp(max=vocab)
    if bool((top_k < vocab).any()):
        kth = logits.sort(dim=-1, descending=True).values.gather(1, (top_k - 1)[:, None])
        logits = logits.masked_fill(logits < kth, -float("inf"))
    top_p = torch.tensor([r.params.top_p for r in rows], device=device)
    if bool((top_p < 1.0).any()):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens before it already reach top_p (the first always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p[:, None]
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, -float("inf"))
    min_p = torch.tensor([r.params.min_p for r in rows], device=device)
    if bool((min_p > 0).any()):
        probs = logits.softmax(dim=-1)
        threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
        logits = logits.masked_fill(probs < threshold, -float("inf"))
    return logits


def sample(
    logits: torch.Tensor, rows: list[SampleRow], scores: torch.Tensor | None = None
) -> SampleResult:
    """Choose one token per row of ``logits`` (rows, vocab), float32. With ``scores`` (the same
    shape: a contrastive rule's, ``engine.layers.contrast``) tokens are chosen from those, and
    the log-probabilities reported are still the model's own, from ``logits``."""
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    processed = apply_penalties((logits if scores is None else scores).clone(), rows)
    greedy = torch.tensor([r.params.is_greedy for r in rows], device=logits.device)
    chosen = processed.argmax(dim=-1)
    if not bool(greedy.all()):
        probs = apply_warpers(processed, rows).softmax(dim=-1)
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p, one noise row per request.
        noise = torch.empty_like(probs).exponential_()
        for i, r in enumerate(rows):
            if r.rng is not None and not r.params.is_greedy:
                noise[i] = torch.empty(probs.shape[1], device=probs.device).exponential_(
                    generator=r.rng
                )
        drawn = (probs / noise).argmax(dim=-1)
        chosen = torch.where(greedy, chosen, drawn)
    chosen_logprobs = raw_logprobs.gather(1, chosen[:, None])[:, 0]
    tops: list[dict[int, float] | None] = [None] * len(rows)
    wanted = max((r.params.logprobs or 0) for r in rows)
    if wanted:
        values, indices = raw_logprobs.topk(wanted, dim=-1)
        for i, r in enumerate(rows):
            if r.params.logprobs:
                k = r.params.logprobs
                tops[i] = dict(zip(indices[i, :k].tolist(), values[i, :k].tolist(), strict=True))
    return SampleResult(chosen.tolist(), chosen_logprobs.tolist(), tops)


def draft_distribution(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """The distribution a draft model's tokens are drawn from: its logits through the rows'
    penalties and warpers (temperature, top-k, top-p, min-p), softmaxed; greedy rows put all
    the mass on the argmax."""
    processed = apply_penalties(logits.float().clone(), rows)
    probs = apply_warpers(processed, rows).softmax(dim=-1)
    greedy = torch.tensor([r.params.is_greedy for r in rows], device=logits.device)
    if bool(greedy.any()):
        point = torch.zeros_like(probs).scatter_(1, processed.argmax(dim=-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], point, probs)
    return probs


def draw(probs: torch.Tensor, rng: torch.Generator | None) -> int:
    """One token from the distribution ``probs`` (vocab,)."""
    return int(torch.multinomial(probs, 1, generator=rng))


def verify_draft(
    logits: torch.Tensor,
    rows: list[SampleRow],
    draft: list[int],
    draft_probs: torch.Tensor | None = None,
) -> SampleResult:
    """Accept a prefix of one sequence's ``draft`` tokens and choose one token after it.

    ``logits`` (len(draft) + 1, vocab) are the model's predictions after the last real token and
    after each draft token; ``rows[j]`` is the sequence as it would be with ``draft[:j]``
    accepted (its penalties see them). Greedy: the drafts are accepted while each is the argmax,
    then the argmax follows, exactly the tokens decoding one at a time would choose.

    Sampling is speculative sampling's rejection rule, which leaves the distribution of the
    output that of the target ``p`` whatever the drafts' distribution ``q`` (``draft_probs``,
    one row per draft token, from a draft model): draft token ``d`` is accepted with probability
    ``min(1, p(d) / q(d))``; the first rejected one is replaced by a draw from ``max(0, p - q)``
    renormalised; if every draft is accepted the next token is drawn from ``p``. Without
    ``draft_probs`` the drafts were proposed with certainty (prompt lookup: ``q`` a point mass),
    so ``d`` is kept with probability ``p(d)`` and replaced by a draw from ``p`` without ``d``.
    Returns the accepted drafts and the token after them, with their raw log-probabilities."""
    if len(rows) != len(draft) + 1 or logits.shape[0] != len(rows):
        raise ValueError("verify_draft needs one row of logits per draft token, plus one")
    if draft_probs is not None and draft_probs.shape[0] != len(draft):
        raise ValueError("verify_draft needs one row of draft probabilities per draft token")
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    processed = apply_penalties(logits.clone(), rows)
    params, rng = rows[0].params, rows[0].rng
    tokens: list[int] = []
    if params.is_greedy:
        targets = processed.argmax(dim=-1).tolist()
        while len(tokens) < len(draft) and draft[len(tokens)] == targets[len(tokens)]:
            tokens.append(draft[len(tokens)])
        tokens.append(targets[len(tokens)])
    else:
        probs = apply_warpers(processed, rows).softmax(dim=-1)
        if draft_probs is None:  # a point mass on each draft token
            index = torch.tensor(draft, device=probs.device)[:, None]
            draft_probs = torch.zeros_like(probs[:-1]).scatter_(1, index, 1.0)
        draft_probs = draft_probs.to(probs.device, probs.dtype)
        uniform = torch.rand(len(draft), generator=rng, device=probs.device).tolist()
        for j, token in enumerate(draft):
            p, q = float(probs[j, token]), float(draft_probs[j, token])
            if q > 0 and uniform[j] * q < p:  # u < min(1, p / q)
                tokens.append(token)
                continue
            residual = (probs[j] - draft_probs[j]).clamp_(min=0.0)
            tokens.append(draw(residual if float(residual.sum()) > 0 else probs[j], rng))
            break
        else:
            tokens.append(draw(probs[-1], rng))
    positions = torch.arange(len(tokens), device=logits.device)
    chosen = torch.tensor(tokens, device=logits.device)
    chosen_logprobs = raw_logprobs[positions, chosen].tolist()
    tops: list[dict[int, float] | None] = [None] * len(tokens)
    if params.logprobs:
        values, indices = raw_logprobs[: len(tokens)].topk(params.logprobs, dim=-1)
        tops = [
            dict(zip(i.tolist(), v.tolist(), strict=True))
            for i, v in zip(indices, values, strict=True)
        ]
    return SampleResult(tokens, chosen_logprobs, tops)
