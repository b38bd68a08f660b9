"""When a completion ends: end-of-sequence and stop tokens, stop strings, the request's own stop
check, and the length limits."""

from __future__ import annotations

from collections.abc import Callable

from engine.outputs import FinishReason
from engine.sequence import Sequence


class StopChecker:
    """Decides, after each appended token, whether a sequence has finished and why."""

    def __init__(
        self,
        eos_token_ids: list[int],
        max_model_len: int,
        decode: Callable[[list[int]], str],
    ) -> None:
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.decode = decode

    def check(self, seq: Sequence) -> bool:
        """Set ``finish_reason`` and ``stop_reason`` when the token just appended ends the
        sequence (a stop token is removed from it: it is not part of the completion)."""
        params, token = seq.params, seq.token_ids[-1]
        is_eos = token in self.eos_token_ids and not params.ignore_eos
        if is_eos or token in params.stop_token_ids:
            seq.token_ids.pop()
            seq.logprobs.pop()
            if seq.top_logprobs:
                seq.top_logprobs.pop()
            seq.finish_reason, seq.stop_reason = FinishReason.STOP, token
        elif (hit := self._stop_hit(seq)) is not None:
            seq.finish_reason, seq.stop_reason = FinishReason.STOP, hit
        elif seq.num_output_tokens >= params.max_tokens or len(seq) >= self.max_model_len:
            seq.finish_reason = FinishReason.LENGTH
        else:
            return False
        return True

    def visible_text(self, seq: Sequence) -> str:
        """The completion's text, cut before the stop string that ended it."""
        text = self.decode(seq.output_token_ids)
        if isinstance(seq.stop_reason, str) and seq.stop_reason in seq.params.stop:
            text = text[: text.find(seq.stop_reason)]
        return text

    def _stop_hit(self, seq: Sequence) -> str | None:
        """A stop string now in the text, or the reason the request's stop check gives."""
        params = seq.params
        if params.stop and (hit := self._find_stop_string(seq)) is not None:
            return hit
        if params.stop_check is not None:
            return params.stop_check(seq.output_token_ids) or None
        return None

    def _find_stop_string(self, seq: Sequence) -> str | None:
        text = self.decode(seq.output_token_ids)
        hits = [(text.find(s), s) for s in seq.params.stop if s in text]
        return min(hits)[1] if hits else None
