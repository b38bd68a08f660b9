"""Contrastive decoding's amateur: a weaker model of the same tokenizer, run on every token the
target computes, whose logits the target's are contrasted with (``engine.layers.contrast``).

Like a draft model, it keeps its own KV cache paged by the target's block tables (allocation,
prefix caching, copy-on-write and preemption serve both) and computes the same spans in every
step, so its cache always holds what the target's does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.draft_model import fit_vocab
from engine.model_runner import ModelRunner
from engine.scheduler import ScheduledBatch

if TYPE_CHECKING:
    from engine.models.llama import LlamaForCausalLM


class AmateurModel:
    """The amateur's runner: same blocks, same spans, its logits for the target's rows."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        device: str,
        dtype: torch.dtype,
        vocab_size: int,
    ) -> None:
        self.runner = ModelRunner(model, num_blocks, block_size, device, dtype)
        self.vocab_size = vocab_size

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        self.runner.copy_blocks(copies)

    def logits(self, batch: ScheduledBatch) -> torch.Tensor:
        """Compute the batch's spans (before the step counts them computed); the logits of the
        rows the target samples from, in the same order."""
        _, logits = self.runner.run(batch)
        return fit_vocab(logits.float(), self.vocab_size)
