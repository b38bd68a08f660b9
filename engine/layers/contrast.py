"""Two-distribution decoding rules: contrastive decoding (a strong model against a weak one) and
context-aware decoding (a prompt with its passages against the same prompt without them).

Both choose from ``(1 + weight) * strong - weight * weak`` over the log-probabilities, among the
tokens the strong distribution itself finds plausible: those with at least ``cutoff`` times the
probability of its most likely token (the adaptive plausibility constraint of contrastive
decoding, without which a token both models find unlikely can win on their difference). With
``weight`` 0 the rule is the strong distribution itself.
"""

from __future__ import annotations

import torch


def contrast(
    strong: torch.Tensor, weak: torch.Tensor, weight: float, cutoff: float
) -> torch.Tensor:
    """Scores (rows, vocab) to choose tokens from, as logits: ``strong`` and ``weak`` are each a
    row of logits per sequence; implausible tokens get ``-inf``."""
    if strong.shape != weak.shape:
        raise ValueError(f"strong {tuple(strong.shape)} and weak {tuple(weak.shape)} differ")
    strong_lp = torch.log_softmax(strong.float(), dim=-1)
    weak_lp = torch.log_softmax(weak.float(), dim=-1)
    scores = (1.0 + weight) * strong_lp - weight * weak_lp
    if cutoff > 0:
        threshold = strong_lp.max(dim=-1, keepdim=True).values + torch.log(
            torch.tensor(cutoff, device=strong.device)
        )
        scores = scores.masked_fill(strong_lp < threshold, -float("inf"))
    return scores
