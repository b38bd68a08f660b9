"""Generator over ``transformers.generate``: the baseline our engine is measured against.

It batches prompts (left-padded, KV cache on), samples ``n`` completions per prompt, applies the
same sampling parameters as the engine through logits processors we own (so that per-token
log-probabilities are taken from the raw distribution, before any warping), and returns the
engine's output dataclasses.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import astuple
from typing import TYPE_CHECKING, Any

import torch

from engine.client import EngineClient
from engine.config import EngineConfig
from engine.model_loader import ModelSource, load_model_and_tokenizer, resolve_model
from engine.outputs import CompletionOutput, FinishReason, RequestOutput, RequestTiming
from engine.prompts import Prompt, PromptFacade, PromptTokenizer, eos_token_ids
from engine.sampling_params import SamplingParams
from engine.threaded_client import ThreadedClient

if TYPE_CHECKING:
    from transformers import LogitsProcessorList

logger = logging.getLogger(__name__)


class _StepRecorder:
    """First logits processor: keeps raw log-probabilities and the wall time of every step.

    At step t it sees the raw logits for token t; token t itself is only known at step t + 1
    (the last column of ``input_ids``), so the previous step's distribution is kept until then.
    """

    def __init__(self, num_top_logprobs: int) -> None:
        self.num_top_logprobs = num_top_logprobs
        self.step_times: list[float] = []
        self.chosen_logprobs: list[torch.Tensor] = []
        self.top_logprobs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._pending: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.step_times.append(time.perf_counter())
        self.collect(input_ids[:, -1])
        logprobs = torch.log_softmax(scores.float(), dim=-1)
        self._pending = logprobs
        if self.num_top_logprobs:
            values, indices = logprobs.topk(self.num_top_logprobs, dim=-1)
            self.top_logprobs.append((values.cpu(), indices.cpu()))
        return scores

    def collect(self, chosen: torch.Tensor) -> None:
        """Record the chosen token's log-probability under the pending distribution."""
        if self._pending is not None:
            self.chosen_logprobs.append(self._pending.gather(1, chosen[:, None])[:, 0].cpu())
            self._pending = None


class _PresenceFrequencyPenalty:
    """OpenAI-style additive penalties on tokens already generated (not on the prompt)."""

    def __init__(self, prompt_len: int, presence: float, frequency: float) -> None:
        self.prompt_len = prompt_len
        self.presence = presence
        self.frequency = frequency

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_len :]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores).scatter_add_(
            1, generated, torch.ones_like(generated, dtype=scores.dtype)
        )
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


class HFGenerator(PromptFacade):
    """``generate(prompts, params) -> list[RequestOutput]`` over ``transformers.generate``."""

    def __init__(self, config: EngineConfig | None = None, *, source: ModelSource | None = None):
        self.config = config or EngineConfig()
        config = self.config
        # "auto" is "whatever suits this backend": for transformers, the model's own weights.
        if config.quantization not in (None, "auto") or config.speculative or config.decoding:
            raise ValueError(
                "quantization, speculative and two-distribution decoding are features of our "
                "engine; the transformers baseline runs the model's own weights one token at a "
                "time"
            )
        self.source = source or resolve_model(
            self.config.model, allow_hub=self.config.allow_hub, cache_dir=self.config.cache_dir
        )
        self.device = self.config.resolved_device()
        self.model, tokenizer = load_model_and_tokenizer(
            self.source,
            device=self.device,
            dtype=self.config.resolved_dtype(),
            cache_dir=self.config.cache_dir,
        )
        max_model_len = self.config.max_model_len or int(
            getattr(self.model.config, "max_position_embeddings", 2048)
        )
        self.eos_token_ids = eos_token_ids(self.model.generation_config, tokenizer)
        self.prompts = PromptTokenizer(tokenizer, max_model_len)
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self.source.name

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[RequestOutput]:
        """Generate completions for every prompt; outputs are in the order of the prompts."""
        arrival = time.perf_counter()
        params_list = (
            [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        )
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        if any(sp.use_beam_search for sp in params_list):
            raise ValueError("beam search is a feature of our engine, not of this baseline")
        requests = [
            (i, p if isinstance(p, str) else None, self.prompts.prompt_ids(p, sp), sp)
            for i, (p, sp) in enumerate(zip(prompts, params_list, strict=True))
        ]
        # transformers runs one configuration per call: group equal parameters, then batch.
        groups: dict[tuple[Any, ...], list[tuple[int, str | None, list[int], SamplingParams]]] = {}
        for request in requests:
            key = tuple(tuple(v) if isinstance(v, list) else v for v in astuple(request[3]))
            groups.setdefault(key, []).append(request)
        results: dict[int, RequestOutput] = {}
        with self._lock, torch.inference_mode():
            for group in groups.values():
                sp = group[0][3]
                batch_size = max(1, self.config.max_num_seqs // sp.n)
                for start in range(0, len(group), batch_size):
                    batch = group[start : start + batch_size]
                    outs = self._generate_batch([r[2] for r in batch], sp, arrival)
                    for (index, text, _, _), out in zip(batch, outs, strict=True):
                        out.prompt = text
                        results[index] = out
        return [results[i] for i in range(len(prompts))]

    def _logits_processors(
        self, params: SamplingParams, prompt_len: int, recorder: _StepRecorder
    ) -> LogitsProcessorList:
        from transformers import generation as g

        procs: list[Any] = [recorder]
        if params.repetition_penalty != 1.0:
            procs.append(g.RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
        if params.presence_penalty or params.frequency_penalty:
            procs.append(
                _PresenceFrequencyPenalty(
                    prompt_len, params.presence_penalty, params.frequency_penalty
                )
            )
        if params.no_repeat_ngram_size:
            procs.append(g.NoRepeatNGramLogitsProcessor(params.no_repeat_ngram_size))
        if not params.is_greedy:
            if params.temperature != 1.0:
                procs.append(g.TemperatureLogitsWarper(params.temperature))
            if params.top_k:
                procs.append(g.TopKLogitsWarper(params.top_k))
            if params.top_p < 1.0:
                procs.append(g.TopPLogitsWarper(params.top_p))
            if params.min_p > 0.0:
                procs.append(g.MinPLogitsWarper(params.min_p))
        return g.LogitsProcessorList(procs)

    @staticmethod
    def _stopping_criteria(params: SamplingParams, prompt_len: int) -> list[Any]:
        if params.stop_check is None:
            return []
        from transformers import StoppingCriteria, StoppingCriteriaList

        check = params.stop_check

        class _Check(StoppingCriteria):
            def __call__(
                self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any
            ) -> torch.Tensor:
                rows = [bool(check(row)) for row in input_ids[:, prompt_len:].tolist()]
                return torch.tensor(rows, dtype=torch.bool, device=input_ids.device)

        return StoppingCriteriaList([_Check()])

    def _generate_batch(
        self, prompt_ids: list[list[int]], params: SamplingParams, arrival: float
    ) -> list[RequestOutput]:
        from transformers import GenerationConfig

        started = time.perf_counter()
        prompt_len = max(len(ids) for ids in prompt_ids)
        pad_id = self.tokenizer.pad_token_id
        input_ids = torch.full((len(prompt_ids), prompt_len), pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, prompt_len - len(ids) :] = torch.tensor(ids)
            attention_mask[row, prompt_len - len(ids) :] = 1
        # Greedy decoding cannot return several sequences; the n copies would be identical anyway.
        num_return = 1 if params.is_greedy else params.n
        stop_ids = self.eos_token_ids + [
            t for t in params.stop_token_ids if t not in self.eos_token_ids
        ]
        # Neutral warper values so that the model's own generation defaults add nothing: our
        # processors above already apply the request's parameters.
        neutral = {} if params.is_greedy else {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
        gen_config = GenerationConfig(
            do_sample=not params.is_greedy,
            **neutral,
            max_new_tokens=params.max_tokens,
            min_new_tokens=params.max_tokens if params.ignore_eos else None,
            num_return_sequences=num_return,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
            use_cache=True,
            stop_strings=params.stop or None,
        )
        recorder = _StepRecorder(params.logprobs or 0)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        sequences = self.model.generate(  # type: ignore[operator]
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            generation_config=gen_config,
            logits_processor=self._logits_processors(params, prompt_len, recorder),
            stopping_criteria=self._stopping_criteria(params, prompt_len),
            tokenizer=self.tokenizer if params.stop else None,
        )
        finished_at = time.perf_counter()
        recorder.collect(sequences[:, -1])
        generated = sequences[:, prompt_len:].cpu()
        chosen = torch.stack(recorder.chosen_logprobs, dim=1) if recorder.chosen_logprobs else None
        outputs: list[RequestOutput] = []
        for row, ids in enumerate(prompt_ids):
            completions = []
            for k in range(params.n):
                seq_row = row * num_return + (k if num_return > 1 else 0)
                completions.append(
                    self._completion(k, generated[seq_row], chosen, seq_row, recorder, params)
                )
            num_steps = max((len(c.token_ids) for c in completions), default=0)
            timing = RequestTiming(
                arrival_time=arrival,
                first_scheduled_time=started,
                first_token_time=recorder.step_times[0] if recorder.step_times else None,
                finished_time=finished_at,
                token_times=recorder.step_times[: num_steps + 1],
            )
            outputs.append(
                RequestOutput(
                    request_id=uuid.uuid4().hex,
                    prompt=None,
                    prompt_token_ids=ids,
                    outputs=completions,
                    finished=True,
                    timing=timing,
                )
            )
        return outputs

    def _completion(
        self,
        index: int,
        generated: torch.Tensor,
        chosen: torch.Tensor | None,
        seq_row: int,
        recorder: _StepRecorder,
        params: SamplingParams,
    ) -> CompletionOutput:
        token_ids = generated.tolist()
        finish_reason, stop_reason = FinishReason.LENGTH, None
        for pos, token in enumerate(token_ids):
            if token in self.eos_token_ids or token in params.stop_token_ids:
                token_ids = token_ids[:pos]
                finish_reason, stop_reason = FinishReason.STOP, token
                break
        if params.stop_check is not None:
            # The stopping criterion ended this row at the first position the check fired.
            for pos in range(1, len(token_ids) + 1):
                if hit := params.stop_check(token_ids[:pos]):
                    token_ids = token_ids[:pos]
                    finish_reason, stop_reason = FinishReason.STOP, hit
                    break
        text = self.prompts.decode(token_ids)
        if params.stop:
            hits = [(text.find(s), s) for s in params.stop if s in text]
            if hits:
                cut, stop_string = min(hits)
                text = text[:cut]
                finish_reason, stop_reason = FinishReason.STOP, stop_string
        if finish_reason is FinishReason.LENGTH and len(token_ids) < params.max_tokens:
            finish_reason = FinishReason.STOP  # a stopping criterion ended it early
        num = len(token_ids)
        logprobs = chosen[seq_row, :num].tolist() if chosen is not None else []
        top: list[dict[int, float]] | None = None
        if params.logprobs:
            top = [
                dict(zip(idx[seq_row].tolist(), val[seq_row].tolist(), strict=True))
                for val, idx in recorder.top_logprobs[:num]
            ]
        return CompletionOutput(
            index=index,
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            top_logprobs=top,
        )


def build_client(config: EngineConfig, options: object | None = None) -> EngineClient:
    """The ``hf`` backend: ``transformers.generate`` one request at a time (it takes no options)."""
    return ThreadedClient(HFGenerator(config))
