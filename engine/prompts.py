"""Prompt handling shared by every generator: chat templates, tokenising, fitting the context."""

from __future__ import annotations

from typing import Any

from engine.errors import PromptTooLongError
from engine.sampling_params import SamplingParams

Prompt = str | list[int]


class PromptTokenizer:
    """Wraps a Hugging Face tokenizer with the model's context window."""

    def __init__(self, tokenizer: Any, max_model_len: int):
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """Render chat messages into the model's prompt format, ready for the assistant turn."""
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return str(text)

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a prompt (no BOS is added when the text already starts with it)."""
        bos = self.tokenizer.bos_token
        add_special = not (bos and prompt.startswith(bos))
        ids: list[int] = self.tokenizer(prompt, add_special_tokens=add_special)["input_ids"]
        return ids

    def count_tokens(self, prompt: str) -> int:
        """Length of a prompt in the model's tokens."""
        return len(self.encode(prompt))

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def prompt_ids(self, prompt: Prompt, params: SamplingParams) -> list[int]:
        """Token ids that fit the context with room for ``max_tokens`` (or a clear error)."""
        ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("prompt is empty")
        room = self.max_model_len - params.max_tokens
        if params.truncate_prompt_tokens is not None:
            ids = ids[-min(params.truncate_prompt_tokens, max(room, 1)) :]
        if len(ids) > room:
            raise PromptTooLongError(
                f"prompt has {len(ids)} tokens; with max_tokens={params.max_tokens} at most "
                f"{max(room, 0)} fit the {self.max_model_len}-token context "
                "(set truncate_prompt_tokens to keep the end of the prompt)"
            )
        return ids


class PromptFacade:
    """The tokenizer members every generator and client exposes (``tokenizer``,
    ``max_model_len``, ``count_tokens``, ``apply_chat_template``), read from ``self.prompts``."""

    prompts: PromptTokenizer

    @property
    def tokenizer(self) -> Any:
        return self.prompts.tokenizer

    @property
    def max_model_len(self) -> int:
        """Context window in tokens (prompt plus completion)."""
        return self.prompts.max_model_len

    def count_tokens(self, prompt: str) -> int:
        return self.prompts.count_tokens(prompt)

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        return self.prompts.apply_chat_template(messages)


def eos_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids from the model's generation config, else the tokenizer's."""
    eos = getattr(generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    return list(eos) if isinstance(eos, list) else [int(eos)]
