"""The shapes one request's answer takes, whole or streamed, for either model: every response
and chunk carries the request's id, creation time and model, as a chat completion or as a
completion. Raw generation and grounded answers both build theirs here."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel
from sse_starlette import ServerSentEvent

from rag.server.openai.schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatLogprobs,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionLogprobs,
    CompletionResponse,
    Delta,
    Grounding,
    Usage,
)
from rag.server.openai.sse import chunk_event

Logprobs = ChatLogprobs | CompletionLogprobs


@dataclass(slots=True)
class Reply:
    """One request's answer: ``chat`` (chat completions) or not (completions)."""

    chat: bool
    model: str
    include_usage: bool
    """Whether a stream ends with a chunk of usage (``stream_options.include_usage``)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The request id (so the response id names the answer for feedback), else a fresh one."""
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def choice(
        self, index: int, text: str, finish_reason: str, logprobs: Logprobs | None = None
    ) -> ChatChoice | CompletionChoice:
        """One choice of a whole response."""
        if self.chat:
            assert logprobs is None or isinstance(logprobs, ChatLogprobs)
            message = ChatMessageOut(content=text)
            return ChatChoice(
                index=index, message=message, logprobs=logprobs, finish_reason=finish_reason
            )
        assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
        return CompletionChoice(
            index=index, text=text, logprobs=logprobs, finish_reason=finish_reason
        )

    def response(
        self,
        choices: Sequence[ChatChoice | CompletionChoice],
        usage: Usage,
        ragguard: Grounding | None = None,
    ) -> BaseModel:
        """The whole response (``ragguard``: the grounded model's extra field)."""
        if self.chat:
            return ChatCompletionResponse(
                id=self.response_id,
                created=self.created,
                model=self.model,
                choices=[c for c in choices if isinstance(c, ChatChoice)],
                usage=usage,
                ragguard=ragguard,
            )
        return CompletionResponse(
            id=self.response_id,
            created=self.created,
            model=self.model,
            choices=[c for c in choices if isinstance(c, CompletionChoice)],
            usage=usage,
            ragguard=ragguard,
        )

    def chunk(
        self,
        index: int,
        text: str | None,
        *,
        role: bool = False,
        logprobs: Logprobs | None = None,
        finish_reason: str | None = None,
        ragguard: Grounding | None = None,
    ) -> ServerSentEvent:
        """One streamed chunk of choice ``index`` (``role``: the chat's opening chunk)."""
        if self.chat:
            assert logprobs is None or isinstance(logprobs, ChatLogprobs)
            delta = Delta(role="assistant" if role else None, content=text)
            choice = ChatChunkChoice(
                index=index, delta=delta, logprobs=logprobs, finish_reason=finish_reason
            )
            return chunk_event(
                ChatCompletionChunk(
                    id=self.response_id,
                    created=self.created,
                    model=self.model,
                    choices=[choice],
                    ragguard=ragguard,
                )
            )
        assert logprobs is None or isinstance(logprobs, CompletionLogprobs)
        text_choice = CompletionChoice(
            index=index, text=text or "", logprobs=logprobs, finish_reason=finish_reason
        )
        return chunk_event(
            CompletionChunk(
                id=self.response_id,
                created=self.created,
                model=self.model,
                choices=[text_choice],
                ragguard=ragguard,
            )
        )

    def usage_chunk(self, usage: Usage) -> ServerSentEvent:
        """A stream's last chunk when usage was asked for: no choices, the usage."""
        chunk: ChatCompletionChunk | CompletionChunk
        if self.chat:
            chunk = ChatCompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        else:
            chunk = CompletionChunk(
                id=self.response_id, created=self.created, model=self.model, choices=[], usage=usage
            )
        return chunk_event(chunk)
