"""Continuous batching: which sequences run in the next step, and how many tokens each.

Every step fills a token budget. Running sequences go first: every decoding one takes one token,
then those still prefilling take the next chunk of their prompt, in arrival order (so a long
prompt never holds running decodes back). Waiting sequences are then admitted in arrival
order while the budget, the sequence limit and the free KV blocks allow. With
``reserve_max_tokens`` a request is admitted only when the free blocks can also hold every running
sequence, and the new one, to its ``max_tokens``: on a CPU, where prefill is compute-bound,
recomputing a preempted prompt costs more than the concurrency given up. When a decode has no room
for its next token anyway (no reservation, or copy-on-write of a shared block), the most recently
admitted running sequence is preempted: its blocks are freed and it waits at the front of the queue
to be recomputed.

With a draft proposer (speculative decoding) a decode also computes the proposer's guesses at its
next tokens, when the budget and the free blocks allow them without preempting anyone, and while
no more than ``max_speculative_seqs`` sequences decode: a large batch already keeps the machine
busy, and every guess rejected there is work taken from another sequence. Prompt lookup's guesses
are known at once; a draft model's (``num_model_draft_tokens``) only once the engine has run it,
so the scheduler makes room for them and the engine fills them in before the step runs. With
both, prompt lookup goes first and the draft model drafts when it finds nothing.

A sequence with a ``shadow`` (context-aware decoding: the same request without its passages) moves
with it: admitted, preempted and finished together, and scheduled so that the shadow's last token
is computed in the same step as the sequence's, whose logits are then contrasted with it. The
shadow's prompt (short: the question alone) is computed whole in the sequence's last prefill step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledBatch:
    """One step's work: each sequence with the number of its tokens to compute."""

    items: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


class Scheduler:
    def __init__(
        self,
        block_manager: BlockManager,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        reserve_max_tokens: bool = False,
        max_model_len: int | None = None,
        propose: Callable[[list[int], int], list[int]] | None = None,
        num_model_draft_tokens: int = 0,
        max_speculative_seqs: int = 0,
    ):
        """``propose(token_ids, limit)`` returns up to ``limit`` draft tokens to follow
        ``token_ids``; ``num_model_draft_tokens`` is the draft model's k (0: no draft model);
        drafts are asked for while at most ``max_speculative_seqs`` decode."""
        if max_num_batched_tokens < 1 or max_num_seqs < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.reserve_max_tokens = reserve_max_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.propose = propose
        self.num_model_draft_tokens = num_model_draft_tokens
        self.max_speculative_seqs = max_speculative_seqs
        self.num_steps_without_speculation = 0
        """Steps whose decodes outnumbered ``max_speculative_seqs``, so drafted nothing."""

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A forked sequence joins its parent among the running ones."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Remove a sequence wherever it is and free its blocks (and its shadow's)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.free(seq)
        if seq.shadow is not None:
            seq.shadow.status = SequenceStatus.FINISHED
            self.block_manager.free(seq.shadow)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        scheduled: set[int] = set()
        # Decodes first (one token each), then prefill chunks: a long prompt never stalls them.
        decoding = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefilling = [s for s in self.running if s.num_uncomputed_tokens > 1]
        drafting = self.propose is not None or self.num_model_draft_tokens > 0
        speculate = drafting and len(decoding) <= self.max_speculative_seqs
        if drafting and decoding and not speculate:
            self.num_steps_without_speculation += 1
        for seq in decoding + prefilling:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_tokens = min(seq.num_uncomputed_tokens, budget)
            if seq.num_uncomputed_tokens == 1:
                if seq.shadow is not None and budget < 2:
                    break  # its shadow computes beside it
                if speculate and seq.shadow is None and self._draft(seq, budget):
                    num_tokens += len(seq.draft_token_ids) + seq.num_model_draft_tokens
                elif not self._make_room(seq, batch, scheduled):
                    continue  # it preempted itself
            budget -= self._add(batch, seq, num_tokens, budget)
            scheduled.add(seq.seq_id)
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self._can_allocate(seq):
                break
            if self.reserve_max_tokens and self.running and not self._fits_to_completion(seq):
                break  # wait for running sequences to finish rather than preempt them later
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            if seq.shadow is not None:
                self.block_manager.allocate(seq.shadow)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            budget -= self._add(batch, seq, min(seq.num_uncomputed_tokens, budget), budget)
        return batch

    def _add(self, batch: ScheduledBatch, seq: Sequence, num_tokens: int, budget: int) -> int:
        """Schedule ``num_tokens`` of ``seq`` and, when they reach its end, the rest of its
        shadow (stopping one token short of the end when the budget cannot hold the shadow too);
        returns the tokens used."""
        shadow = seq.shadow
        if shadow is None:
            batch.items.append((seq, num_tokens))
            return num_tokens
        shadow_tokens = 0
        if num_tokens >= seq.num_uncomputed_tokens:
            shadow_tokens = shadow.num_uncomputed_tokens
            if num_tokens + shadow_tokens > budget:
                num_tokens, shadow_tokens = min(seq.num_uncomputed_tokens - 1, budget), 0
        if num_tokens:
            batch.items.append((seq, num_tokens))
        if shadow_tokens:
            batch.items.append((shadow, shadow_tokens))
        return num_tokens + shadow_tokens

    def _can_allocate(self, seq: Sequence) -> bool:
        needed = self.block_manager.blocks_needed(len(seq))
        if seq.shadow is not None:
            needed += self.block_manager.blocks_needed(len(seq.shadow))
        return needed <= self.block_manager.num_free_blocks

    def _final_blocks(self, seq: Sequence) -> int:
        """Blocks ``seq`` holds once it reaches ``max_tokens`` (or the context window)."""
        final = seq.num_prompt_tokens + seq.params.max_tokens
        if self.max_model_len is not None:
            final = min(final, self.max_model_len)
        return self.block_manager.blocks_needed(max(final, len(seq)))

    def _fits_to_completion(self, seq: Sequence) -> bool:
        """Can the free blocks hold ``seq`` and every running sequence to completion? A request
        not yet sampled will fork into ``n`` samples that share its full prompt blocks."""
        samples = seq.params.num_sequences if seq.num_output_tokens == 0 else 1
        needed = 0
        for member in (seq, seq.shadow):
            if member is not None:
                final = self._final_blocks(member)
                shared = len(member) // self.block_manager.block_size
                needed += final + (samples - 1) * (final - shared)
        reserved = sum(
            max(0, self._final_blocks(member) - len(member.block_table))
            for s in self.running
            for member in (s, s.shadow)
            if member is not None
        )
        return needed + reserved <= self.block_manager.num_free_blocks

    def _draft(self, seq: Sequence, budget: int) -> bool:
        """Give a decoding ``seq`` draft tokens (prompt lookup's) or room for the draft model's,
        and their slots, when there is room for them without preempting anyone; False (and no
        drafts) otherwise. A sequence not yet sampled gets none: its first token forks the
        request's n samples."""
        if seq.num_output_tokens == 0 or seq.params.use_beam_search:
            return False
        limit = min(budget - 1, seq.params.max_tokens - seq.num_output_tokens - 1)
        if self.max_model_len is not None:
            limit = min(limit, self.max_model_len - len(seq) - 1)
        if limit < 1:
            return False
        draft = self.propose(seq.token_ids, limit) if self.propose is not None else []
        num_model = 0 if draft else min(self.num_model_draft_tokens, limit)
        num_slots = 1 + len(draft) + num_model
        if num_slots == 1 or not self.block_manager.can_append(seq, num_slots):
            return False
        self.block_manager.append_slot(seq, num_slots)
        seq.draft_token_ids = draft
        seq.num_model_draft_tokens = num_model
        return True

    def _make_room(self, seq: Sequence, batch: ScheduledBatch, scheduled: set[int]) -> bool:
        """Ensure ``seq``'s next slot, preempting the newest other sequences; False if ``seq``
        itself had to be preempted."""
        appends = [(seq, 1)] + ([(seq.shadow, 1)] if seq.shadow is not None else [])
        while not self.block_manager.can_append_all(appends):
            victim = next((s for s in reversed(self.running) if s.seq_id not in scheduled), None)
            if victim is None or victim is seq:
                self._preempt(seq, batch)
                return False
            self._preempt(victim, batch)
        for member, num_slots in appends:
            self.block_manager.append_slot(member, num_slots)
        return True

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self.running.remove(seq)
        seq.draft_token_ids = []
        seq.num_model_draft_tokens = 0
        self.block_manager.free(seq)
        if seq.shadow is not None:
            self.block_manager.free(seq.shadow)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        batch.preempted.append(seq)
        self.num_preemptions += 1
