"""Draft-model speculative decoding: a small model of the same tokenizer guesses the next k
tokens, the target model checks them all in one step.

The draft model keeps its own KV cache, paged by the same block tables as the target's: a block
of a sequence holds the target's keys and values in the target's cache and the draft's in the
draft's, so allocation, prefix caching, copy-on-write and preemption serve both. The draft
computes every prompt chunk beside the target (``mirror``), so a cached prefix is cached for it
too; generated tokens it has not seen (steps it did not draft: under load, or when prompt lookup
proposed instead) it catches up on the next time it drafts. Its cache only shapes its guesses:
the target verifies every one (``engine.layers.sampler.verify_draft``), so what it holds never
changes the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.errors import ModelLoadError
from engine.layers.sampler import SampleRow, draft_distribution, draw
from engine.model_runner import ModelRunner, TokenSpan
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from engine.models.llama import LlamaForCausalLM


def check_same_tokenizer(
    target: PreTrainedTokenizerBase, draft: PreTrainedTokenizerBase, draft_name: str
) -> None:
    """Two-model decoding compares token ids: the second model's vocabulary must be the
    target's."""
    target_vocab, draft_vocab = target.get_vocab(), draft.get_vocab()
    if target_vocab != draft_vocab:
        only = len(target_vocab.keys() ^ draft_vocab.keys())
        moved = sum(1 for t, i in draft_vocab.items() if target_vocab.get(t, i) != i)
        raise ModelLoadError(
            f"the model {draft_name} does not share the target model's tokenizer "
            f"({len(draft_vocab)} tokens against {len(target_vocab)}; {only} in one only, "
            f"{moved} with another id): choose a draft model of the same family"
        )


class ModelDrafter:
    """Runs the draft model: prompt chunks beside the target, then k guesses per drafting
    sequence, batched across sequences."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        device: str,
        dtype: torch.dtype,
        vocab_size: int,
    ) -> None:
        """``num_blocks`` and ``block_size`` are the target's; ``vocab_size`` the width of the
        target's logits (the draft's are cut or padded to it)."""
        self.runner = ModelRunner(model, num_blocks, block_size, device, dtype)
        self.vocab_size = vocab_size
        self.num_forward_passes = 0
        self.num_mirrored_tokens = 0
        """Prompt tokens computed beside the target's chunks (not those found cached)."""

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        self.runner.copy_blocks(copies)

    def mirror(self, batch: ScheduledBatch) -> None:
        """Compute the batch's prompt chunks into the draft's cache (before the step runs, while
        ``num_computed_tokens`` still marks where each chunk starts)."""
        spans: list[TokenSpan] = []
        for seq, num_tokens in batch.items:
            start = seq.num_computed_tokens
            is_decode = start == len(seq) - 1 and seq.num_output_tokens > 0
            if is_decode or seq.num_draft_computed_tokens != start:
                continue
            chunk = seq.token_ids[start : start + num_tokens]
            spans.append(TokenSpan(chunk, start, seq.block_table))
            seq.num_draft_computed_tokens = start + num_tokens
            self.num_mirrored_tokens += num_tokens
        if spans:
            self.runner.forward(spans)
            self.num_forward_passes += 1

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence]) -> None:
        """Fill each sequence's ``draft_token_ids`` with its ``num_model_draft_tokens`` guesses
        (and ``draft_probs`` when it samples): k passes of the draft model, the first catching
        up on the tokens its cache lacks."""
        drafts: dict[int, list[int]] = {seq.seq_id: [] for seq in seqs}
        probs: dict[int, list[torch.Tensor]] = {seq.seq_id: [] for seq in seqs}
        for step in range(max(seq.num_model_draft_tokens for seq in seqs)):
            active = [seq for seq in seqs if seq.num_model_draft_tokens > step]
            spans = []
            for seq in active:
                if step == 0:
                    start = min(seq.num_draft_computed_tokens, len(seq) - 1)
                    tokens = seq.token_ids[start:]
                else:
                    start, tokens = len(seq) - 1 + step, drafts[seq.seq_id][-1:]
                spans.append(TokenSpan(tokens, start, seq.block_table, 1, decode=True))
            logits = fit_vocab(self.runner.forward(spans).float(), self.vocab_size)
            self.num_forward_passes += 1
            rows = [
                SampleRow(
                    seq.params,
                    seq.token_ids[: seq.num_prompt_tokens],
                    seq.output_token_ids + drafts[seq.seq_id],
                    seq.rng,
                )
                for seq in active
            ]
            distribution = draft_distribution(logits, rows)
            for i, seq in enumerate(active):
                greedy = seq.params.is_greedy
                token = int(distribution[i].argmax()) if greedy else draw(distribution[i], seq.rng)
                drafts[seq.seq_id].append(token)
                probs[seq.seq_id].append(distribution[i])
        for seq in seqs:
            seq.draft_token_ids = drafts[seq.seq_id]
            seq.draft_probs = None if seq.params.is_greedy else torch.stack(probs[seq.seq_id])
            # Its cache now holds the last real token and every guess but the last.
            seq.num_draft_computed_tokens = len(seq) + seq.num_model_draft_tokens - 1
            seq.num_model_draft_tokens = 0


def fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """A second model's logits as wide as the target's (the padding rows of embedding tables
    differ between sizes of one family): cut, or padded with -inf."""
    width = logits.shape[1]
    if width >= vocab_size:
        return logits[:, :vocab_size]
    pad = logits.new_full((logits.shape[0], vocab_size - width), -float("inf"))
    return torch.cat([logits, pad], dim=1)
