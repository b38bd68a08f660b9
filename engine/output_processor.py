"""From a step's logits to tokens and completions: sampling (and forking a request's n samples),
verifying speculative drafts, beam-search steps, appending each token, deciding when a sequence
stops, and the completions a request's output carries."""

from __future__ import annotations

import time

import torch

from engine.beam_search import Hypothesis
from engine.layers.contrast import contrast
from engine.layers.sampler import SampleRow, sample, verify_draft
from engine.outputs import CompletionOutput, FinishReason
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Request, Sequence
from engine.stopping import StopChecker


class OutputProcessor:
    """Appends the step's new tokens to their sequences; counts generated and draft tokens."""

    def __init__(
        self,
        requests: dict[str, Request],
        scheduler: Scheduler,
        stopping: StopChecker,
        device: str,
        contrast: tuple[float, float] = (0.5, 0.1),
    ) -> None:
        """``contrast``: (weight, cutoff) of two-distribution decoding (``engine.layers.contrast``),
        against an amateur model's logits or a sequence's against its shadow's."""
        self.requests = requests
        self.contrast = contrast
        """The engine's live requests (shared, not copied)."""
        self.scheduler = scheduler
        self.block_manager = scheduler.block_manager
        self.stopping = stopping
        self.device = device
        self.num_generated = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    def process(
        self, sampling: list[Sequence], logits: torch.Tensor, weak: torch.Tensor | None = None
    ) -> list[str]:
        """Choose the next tokens of the sequences ``sampling`` (rows of ``logits`` in order:
        one each, plus one per draft token); returns the ids of the requests that changed.
        ``weak``: an amateur model's logits for the same rows (contrastive decoding); a sequence
        with a shadow is contrasted with its shadow's row instead, which takes its token."""
        rows: list[SampleRow] = []
        targets: list[Sequence] = []
        logit_rows: list[int] = []
        touched: dict[str, None] = {}
        row = 0
        beams: dict[str, list[tuple[Sequence, int]]] = {}
        scores = self._scores(sampling, logits, weak)
        for seq in sampling:
            if seq.is_shadow:
                row += 1
                continue
            if seq.params.use_beam_search:
                beams.setdefault(seq.request_id, []).append((seq, row))
                touched[seq.request_id] = None
                row += 1
                continue
            if seq.draft_token_ids:
                num_rows = 1 + len(seq.draft_token_ids)
                self._accept_draft(seq, logits[row : row + num_rows])
                touched[seq.request_id] = None
                row += num_rows
                continue
            request = self.requests[seq.request_id]
            group = [seq]
            if seq.num_output_tokens == 0 and len(request.seqs) < request.params.n:
                group += self._fork(request, seq)  # the n samples share the prompt's blocks
            for member in group:
                rows.append(
                    SampleRow(
                        member.params,
                        request.prompt_token_ids,
                        member.output_token_ids,
                        member.rng,
                    )
                )
                targets.append(member)
                logit_rows.append(row)
            row += 1
        for request_id, members in beams.items():
            self._beam_step(self.requests[request_id], members, logits)
        if targets:
            index = torch.tensor(logit_rows, device=logits.device)
            result = sample(logits[index], rows, None if scores is None else scores[index])
            for seq, token, logprob, top in zip(
                targets, result.token_ids, result.logprobs, result.top_logprobs, strict=True
            ):
                self._append(seq, token, logprob, top)
                touched[seq.request_id] = None
        return list(touched)

    def _scores(
        self, sampling: list[Sequence], logits: torch.Tensor, weak: torch.Tensor | None
    ) -> torch.Tensor | None:
        """What tokens are chosen from when it is not the logits themselves: the contrast with
        the amateur's logits, or each shadowed sequence's row contrasted with its shadow's (its
        shadow's row is the next one: the scheduler adds the shadow right after it)."""
        weight, cutoff = self.contrast
        if weak is not None:
            return contrast(logits, weak, weight, cutoff)
        pairs = [i for i, seq in enumerate(sampling) if seq.shadow is not None]
        if not pairs:
            return None
        scores = logits.clone()
        for i in pairs:
            # Rows equal sequences here: shadowed sequences never draft.
            if i + 1 >= len(sampling) or sampling[i + 1] is not sampling[i].shadow:
                raise RuntimeError("a shadowed sequence was computed without its shadow")
            scores[i] = contrast(logits[i : i + 1], logits[i + 1 : i + 2], weight, cutoff)[0]
        return scores

    def _append(
        self, seq: Sequence, token: int, logprob: float, top: dict[int, float] | None
    ) -> bool:
        """Add one generated token; True when it ended the sequence (whose blocks are freed)."""
        now = time.perf_counter()
        seq.token_ids.append(token)
        if seq.shadow is not None:
            seq.shadow.token_ids.append(token)
        seq.logprobs.append(logprob)
        if top is not None:
            seq.top_logprobs.append(top)
        seq.token_times.append(now)
        self.num_generated += 1
        timing = self.requests[seq.request_id].timing
        timing.first_token_time = timing.first_token_time or now
        if self.stopping.check(seq):
            self.scheduler.finish(seq)
            return True
        return False

    def _accept_draft(self, seq: Sequence, logits: torch.Tensor) -> None:
        """Verify ``seq``'s draft tokens against the model's ``logits`` for them, keep the
        accepted ones (their keys and values are already in the cache) and the token after them,
        and give back the slots of the rejected ones."""
        draft, seq.draft_token_ids = seq.draft_token_ids, []
        draft_probs, seq.draft_probs = seq.draft_probs, None
        prompt_ids = self.requests[seq.request_id].prompt_token_ids
        output_ids = seq.output_token_ids
        rows = [
            SampleRow(seq.params, prompt_ids, output_ids + draft[:j], seq.rng)
            for j in range(len(draft) + 1)
        ]
        result = verify_draft(logits, rows, draft, draft_probs)
        num_accepted = len(result.token_ids) - 1
        self.num_draft_tokens += len(draft)
        self.num_accepted_tokens += num_accepted
        seq.num_computed_tokens += num_accepted
        # A draft model's cache keeps only what was accepted of what it computed.
        seq.num_draft_computed_tokens = min(seq.num_draft_computed_tokens, seq.num_computed_tokens)
        for token, logprob, top in zip(
            result.token_ids, result.logprobs, result.top_logprobs, strict=True
        ):
            if self._append(seq, token, logprob, top):
                return
        self.block_manager.register_computed_blocks(seq)
        self.block_manager.trim(seq)

    def _fork(self, request: Request, parent: Sequence) -> list[Sequence]:
        """The request's other n - 1 samples, forked from its first at its first token."""
        children = [
            self._child(parent, index) for index in range(len(request.seqs), request.params.n)
        ]
        request.seqs.extend(children)
        return children

    def _child(self, parent: Sequence, index: int) -> Sequence:
        """A running copy of ``parent`` that shares its blocks (copy on write)."""
        child = Sequence(
            parent.request_id,
            index,
            list(parent.token_ids),
            parent.num_prompt_tokens,
            parent.params,
        )
        child.logprobs = list(parent.logprobs)
        child.top_logprobs = list(parent.top_logprobs)
        child.token_times = list(parent.token_times)
        child.rng = self.seeded_rng(parent.params, index)
        self.block_manager.fork(parent, child)
        shadow = parent.shadow
        if shadow is not None:
            child.shadow = Sequence(
                shadow.request_id,
                index,
                list(shadow.token_ids),
                shadow.num_prompt_tokens,
                shadow.params,
                is_shadow=True,
            )
            self.block_manager.fork(shadow, child.shadow)
        self.scheduler.add_running(child)
        return child

    def seeded_rng(self, params: SamplingParams, index: int) -> torch.Generator | None:
        """The seeded random number generator of a request's ``index``-th sample (None: the
        global one)."""
        if params.seed is None or params.is_greedy:
            return None
        return torch.Generator(device=self.device).manual_seed(params.seed + index)

    def _beam_step(
        self, request: Request, members: list[tuple[Sequence, int]], logits: torch.Tensor
    ) -> None:
        """One beam-search step of ``request``: every running beam has its row of ``logits``.
        The next beams continue their parents' sequences (a parent chosen twice is forked, its
        blocks shared copy-on-write) and parents chosen by none are freed."""
        beam = request.beam
        assert beam is not None
        row_of = {seq.seq_id: row for seq, row in members}
        seqs = request.seqs  # the order beam.scores follows
        if any(seq.seq_id not in row_of for seq in seqs):
            raise RuntimeError(f"request {request.request_id}: a beam missed a step")
        rows = torch.tensor([row_of[seq.seq_id] for seq in seqs], device=logits.device)
        nexts = beam.step(
            logits[rows], [s.output_token_ids for s in seqs], [s.logprobs for s in seqs]
        )
        if not nexts:
            for seq in seqs:
                seq.finish_reason = FinishReason.STOP
                self.scheduler.finish(seq)
            return
        claimed: set[int] = set()
        beams: list[Sequence] = []
        for cont in nexts:
            parent = seqs[cont.parent]
            if cont.parent in claimed:
                beams.append(self._child(parent, 0))  # indexes are set below
            else:
                claimed.add(cont.parent)
                beams.append(parent)
        now = time.perf_counter()
        for index, (seq, cont) in enumerate(zip(beams, nexts, strict=True)):
            seq.index = index
            seq.token_ids.append(cont.token)
            seq.logprobs.append(cont.logprob)
            seq.token_times.append(now)
        for i, seq in enumerate(seqs):
            if i not in claimed:
                seq.finish_reason = FinishReason.STOP
                self.scheduler.finish(seq)
        request.seqs = beams
        self.num_generated += len(beams)
        request.timing.first_token_time = request.timing.first_token_time or now

    def completions(self, request: Request) -> list[CompletionOutput]:
        """What ``request`` has produced so far: one completion per sequence, or, once its beam
        search is done, its ``n`` best finished beams."""
        if request.beam is not None and request.beam.done:
            return [
                self._beam_completion(index, hypothesis)
                for index, hypothesis in enumerate(request.beam.best(request.params.n))
            ]
        return [
            CompletionOutput(
                index=seq.index,
                text=self.stopping.visible_text(seq),
                token_ids=seq.output_token_ids,
                logprobs=list(seq.logprobs),
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
                top_logprobs=list(seq.top_logprobs) if seq.params.logprobs else None,
            )
            for seq in request.seqs
        ]

    def _beam_completion(self, index: int, hypothesis: Hypothesis) -> CompletionOutput:
        """A finished beam as a completion (without its end-of-sequence token)."""
        eos = hypothesis.ended_on_eos
        tokens = hypothesis.token_ids[: len(hypothesis.token_ids) - eos]
        return CompletionOutput(
            index=index,
            text=self.stopping.decode(tokens),
            token_ids=tokens,
            logprobs=hypothesis.logprobs[: len(tokens)],
            finish_reason=FinishReason.STOP if eos else FinishReason.LENGTH,
            stop_reason=hypothesis.token_ids[-1] if eos else None,
        )
