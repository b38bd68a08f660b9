"""transformers' own ``generate``: the reference the engine's outputs are compared with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def hf_generate(model: PreTrainedModel, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """``model.generate`` on the unpadded prompt rows ``ids`` (an all-ones attention mask),
    without autograd: the sequences, prompts included."""
    with torch.inference_mode():
        # transformers declares generate on GenerationMixin, which PreTrainedModel does not
        # inherit (the *ForCausalLM classes mix it in): mypy sees nn.Module's __getattr__.
        out: torch.Tensor = model.generate(  # type: ignore[operator]
            ids, attention_mask=torch.ones_like(ids), **kwargs
        )
    return out
