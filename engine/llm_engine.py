"""``LLMEngine``: the synchronous core. ``step()`` is schedule -> run -> sample -> postprocess."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence as Seq

import torch

from engine.amateur import AmateurModel
from engine.beam_search import BeamSearch
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.cuda_usage import cuda_monitor
from engine.draft_model import ModelDrafter, check_same_tokenizer
from engine.loaded_model import load_model
from engine.model_runner import ModelRunner
from engine.output_processor import OutputProcessor
from engine.outputs import FinishReason, RequestOutput, RequestTiming
from engine.prompts import Prompt, PromptFacade, PromptTokenizer, eos_token_ids
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledBatch, Scheduler
from engine.sequence import Request, Sequence
from engine.speculative import PromptLookup
from engine.stats import EngineStats
from engine.stopping import StopChecker

OutputSink = Callable[[RequestOutput], None]
logger = logging.getLogger(__name__)


class LLMEngine(PromptFacade):
    """Continuous batching over a paged KV cache for Llama-family models."""

    def __init__(self, config: EngineConfig | None = None):
        self.config = config = config or EngineConfig()
        self.device = config.resolved_device()
        if config.cuda_graphs and not self.device.startswith("cuda"):
            raise ValueError(f"cuda_graphs needs a CUDA device; the engine runs on {self.device}")
        loaded = load_model(config.model, config, self.device)
        self.source, model = loaded.source, loaded.model
        self.quantization = loaded.quantization  # config.quantization with auto resolved
        hf_config, tokenizer = loaded.hf_config, loaded.tokenizer
        self.eos_token_ids = eos_token_ids(loaded.generation_config, tokenizer)
        self.model = model
        dtype = getattr(torch, config.resolved_dtype())
        self.prompts = PromptTokenizer(
            tokenizer, config.max_model_len or int(hf_config.max_position_embeddings)
        )
        self.stopping = StopChecker(self.eos_token_ids, self.max_model_len, self.prompts.decode)
        draft = None
        if config.speculative in ("draft", "draft+prompt_lookup"):
            draft = load_model(config.draft_model, config.draft_config(), self.device)
            check_same_tokenizer(tokenizer, draft.tokenizer, draft.source.name)
        amateur = None
        if config.decoding == "contrastive":
            amateur = load_model(config.amateur_model, config, self.device)
            check_same_tokenizer(tokenizer, amateur.tokenizer, amateur.source.name)
        per_block = ModelRunner.kv_bytes_per_block(model, config.block_size, dtype)
        for second in (draft, amateur):  # a second model's cache is paged by the same blocks
            if second is not None:
                per_block += ModelRunner.kv_bytes_per_block(second.model, config.block_size, dtype)
        # With CUDA graphs one block of the budget is the graphs' scratch block.
        num_blocks = max(1, config.kv_cache_memory_bytes // per_block - int(config.cuda_graphs))
        self.block_manager = BlockManager(
            num_blocks, config.block_size, config.enable_prefix_caching
        )
        proposer = (
            PromptLookup(
                config.num_speculative_tokens,
                config.prompt_lookup_max,
                config.prompt_lookup_min,
            )
            if config.speculative in ("prompt_lookup", "draft+prompt_lookup")
            else None
        )
        self.scheduler = Scheduler(
            self.block_manager,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            reserve_max_tokens=config.reserve_max_tokens,
            max_model_len=self.max_model_len,
            propose=proposer.propose if proposer else None,
            num_model_draft_tokens=config.num_draft_tokens if draft is not None else 0,
            max_speculative_seqs=config.speculative_max_seqs,
        )
        max_blocks_per_seq = -(-self.max_model_len // config.block_size)
        self.runner = ModelRunner(
            model,
            num_blocks,
            config.block_size,
            self.device,
            dtype,
            decode_graphs=(config.max_num_seqs, max_blocks_per_seq) if config.cuda_graphs else None,
        )
        self.drafter = (
            ModelDrafter(
                draft.model,
                num_blocks,
                config.block_size,
                self.device,
                dtype,
                int(hf_config.vocab_size),
            )
            if draft is not None
            else None
        )
        self.amateur = (
            AmateurModel(
                amateur.model,
                num_blocks,
                config.block_size,
                self.device,
                dtype,
                int(hf_config.vocab_size),
            )
            if amateur is not None
            else None
        )
        self._requests: dict[str, Request] = {}
        self._sinks: dict[str, OutputSink] = {}
        self._collected: dict[str, RequestOutput] = {}
        self._lock = threading.RLock()
        self.outputs = OutputProcessor(
            self._requests,
            self.scheduler,
            self.stopping,
            self.device,
            (config.contrast_weight, config.contrast_cutoff),
        )
        self._num_prompt_tokens = 0
        self._num_steps = 0
        self._step_time_s = 0.0
        self._cuda = cuda_monitor(self.device)
        self._started = time.perf_counter()

    # ------------------------------------------------------------- interface
    @property
    def model_name(self) -> str:
        return self.source.name

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished

    def add_request(
        self,
        prompt: Prompt,
        params: SamplingParams,
        request_id: str | None = None,
        sink: OutputSink | None = None,
    ) -> str:
        """Queue a request; it joins the running batch at the next step with room for it.

        ``sink`` receives every output of the request, whichever thread steps the engine; the
        last one has ``finished=True`` (also when the request is aborted)."""
        ids = self.prompts.prompt_ids(prompt, params)
        shadow_ids: list[int] | None = None
        if params.context_free_prompt is not None:
            if self.config.decoding != "context_aware":
                raise ValueError(
                    "a context_free_prompt needs an engine with decoding='context_aware'"
                )
            shadow_ids = self.prompts.prompt_ids(params.context_free_prompt, params)
        needed = self.block_manager.blocks_needed(len(ids) + params.max_tokens)
        if shadow_ids is not None:
            needed += self.block_manager.blocks_needed(len(shadow_ids) + params.max_tokens)
        if needed > self.block_manager.num_blocks:
            raise ValueError(
                f"a sequence of {len(ids)} prompt + {params.max_tokens} new tokens needs {needed} "
                f"KV blocks; the pool has {self.block_manager.num_blocks}: raise "
                "kv_cache_memory_bytes or lower max_tokens"
            )
        if params.use_beam_search and not self.config.reserve_max_tokens:
            raise ValueError(
                "beam search needs reserve_max_tokens: a preempted beam would leave its request's "
                "beams out of step"
            )
        request_id = request_id or uuid.uuid4().hex
        with self._lock:
            if request_id in self._requests:
                raise ValueError(f"request id {request_id!r} is already in use")
            request = Request(
                request_id,
                prompt if isinstance(prompt, str) else None,
                ids,
                params,
                RequestTiming(arrival_time=time.perf_counter()),
            )
            if params.use_beam_search:
                request.beam = BeamSearch(
                    params.beam_width,
                    params.length_penalty,
                    self.eos_token_ids,
                    len(ids),
                    min(len(ids) + params.max_tokens, self.max_model_len),
                )
            seq = Sequence(request_id, 0, list(ids), len(ids), params)
            seq.rng = self.outputs.seeded_rng(params, 0)
            if shadow_ids is not None:
                seq.shadow = Sequence(
                    request_id, 0, shadow_ids, len(shadow_ids), params, is_shadow=True
                )
            request.seqs.append(seq)
            self._requests[request_id] = request
            self._num_prompt_tokens += len(ids)
            if sink is not None:
                self._sinks[request_id] = sink
            self.scheduler.add(seq)
        return request_id

    def abort(self, request_id: str) -> None:
        """Stop a request and free its blocks; its sink gets a final output. Unknown ids are
        ignored."""
        with self._lock:
            request = self._requests.get(request_id)
            if request is None:
                return
            for seq in request.seqs:
                if not seq.is_finished:
                    seq.finish_reason = FinishReason.ABORT
                    self.scheduler.finish(seq)
            request.aborted = True
            self._deliver(self._output(request))

    def generate(
        self, prompts: Seq[Prompt], params: SamplingParams | Seq[SamplingParams]
    ) -> list[RequestOutput]:
        """Run the prompts to completion; outputs in the order of the prompts."""
        params_list = (
            [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        )
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        ids: list[str] = []
        try:
            for prompt, sp in zip(prompts, params_list, strict=True):
                ids.append(self.add_request(prompt, sp, sink=self._collect))
            return self._run_until_finished(ids)
        except BaseException:
            for request_id in ids:
                self.abort(request_id)
                self._collected.pop(request_id, None)
            raise

    def _run_until_finished(self, request_ids: list[str]) -> list[RequestOutput]:
        """Step until these requests finish. Several threads may call this at once (and an
        AsyncEngine may be stepping too): whoever steps delivers every output to its request's
        sink, so concurrent callers share batches and each gets its own results."""
        pending = set(request_ids)
        while pending - self._collected.keys():
            with self._lock:
                if pending - self._collected.keys():
                    self.step()
        return [self._collected.pop(i) for i in request_ids]

    def stats(self) -> EngineStats:
        bm, outputs = self.block_manager, self.outputs
        elapsed = time.perf_counter() - self._started
        graphs = self.runner.decode_graphs
        cuda = self._cuda.read() if self._cuda is not None else None
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            num_kv_blocks=bm.num_blocks,
            num_kv_blocks_used=bm.num_used_blocks,
            prefix_cache_hit_rate=bm.prefix_cache_hit_rate,
            num_preemptions=self.scheduler.num_preemptions,
            num_generated_tokens=outputs.num_generated,
            generated_tokens_per_s=outputs.num_generated / elapsed if elapsed > 0 else 0.0,
            num_prompt_tokens=self._num_prompt_tokens,
            num_prefix_queries=bm.num_prefix_queries,
            num_prefix_hits=bm.num_prefix_hits,
            num_cuda_graphs=len(graphs.shapes) if graphs else 0,
            num_cuda_graph_steps=graphs.num_replays if graphs else 0,
            cuda_graph_capture_s=graphs.capture_time_s if graphs else 0.0,
            num_draft_tokens=outputs.num_draft_tokens,
            num_accepted_tokens=outputs.num_accepted_tokens,
            num_steps_without_speculation=self.scheduler.num_steps_without_speculation,
            num_steps=self._num_steps,
            step_time_s=self._step_time_s,
            cuda_memory_allocated_bytes=cuda.memory_allocated_bytes if cuda else None,
            cuda_memory_reserved_bytes=cuda.memory_reserved_bytes if cuda else None,
            gpu_utilization=cuda.utilization if cuda else None,
        )

    # ------------------------------------------------------------------ step
    def step(self) -> list[RequestOutput]:
        """One engine iteration; returns the requests that got new tokens (finished or not)."""
        with self._lock:
            started = time.perf_counter()
            batch = self.scheduler.schedule()
            if not batch:
                return []  # an idle step: not counted, so the mean step time is the batches'
            now = time.perf_counter()
            for seq, _ in batch.items:
                timing = self._requests[seq.request_id].timing
                timing.first_scheduled_time = timing.first_scheduled_time or now
            self.runner.copy_blocks(self.block_manager.pending_copies)
            if self.drafter is not None:
                self._draft(batch)
            if self.amateur is not None:
                self.amateur.copy_blocks(self.block_manager.pending_copies)
            self.block_manager.pending_copies.clear()
            sampling, logits = self.runner.run(batch)
            weak = self.amateur.logits(batch) if self.amateur is not None and sampling else None
            for seq, num_tokens in batch.items:
                # Draft tokens count as computed only once accepted.
                seq.num_computed_tokens += num_tokens - len(seq.draft_token_ids)
                self.block_manager.register_computed_blocks(seq)
            touched = self.outputs.process(sampling, logits, weak)
            outputs = [self._output(self._requests[r]) for r in touched if r in self._requests]
            # Counted before the outputs go out: whoever has a step's output sees it counted.
            self._num_steps += 1
            self._step_time_s += time.perf_counter() - started
            for out in outputs:
                self._deliver(out)
            return outputs

    def _draft(self, batch: ScheduledBatch) -> None:
        """The draft model's share of a step: the same copies and prompt chunks into its cache,
        then its guesses for the sequences the scheduler made room for."""
        assert self.drafter is not None
        self.drafter.copy_blocks(self.block_manager.pending_copies)
        self.drafter.mirror(batch)
        drafting = [seq for seq, _ in batch.items if seq.num_model_draft_tokens]
        if drafting:
            self.drafter.propose(drafting)

    def _collect(self, output: RequestOutput) -> None:
        """Sink of ``generate``: keep finished outputs for the caller that waits on them."""
        if output.finished:
            self._collected[output.request_id] = output

    def _deliver(self, output: RequestOutput) -> None:
        sink = self._sinks.get(output.request_id)
        if output.finished:
            self._sinks.pop(output.request_id, None)
        if sink is not None:
            try:
                sink(output)
            except Exception:  # a caller that went away must not stop the engine
                logger.warning("dropping output of request %s", output.request_id, exc_info=True)

    def _output(self, request: Request) -> RequestOutput:
        completions = self.outputs.completions(request)
        finished = request.finished
        timing = request.timing
        timing.token_times = list(request.seqs[0].token_times)
        if finished:
            timing.finished_time = time.perf_counter()
            del self._requests[request.request_id]
        return RequestOutput(
            request.request_id,
            request.prompt,
            request.prompt_token_ids,
            completions,
            finished,
            timing,
            request.seqs[0].num_prompt_cached_tokens or 0,
        )
