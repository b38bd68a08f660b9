"""Continuous batching: which sequences run in the next step, and how many tokens each.

Every step fills a token budget. Running sequences go first: every decoding one takes one token,
then those still prefilling take the next chunk of their prompt, in arrival order (so a long
prompt never holds running decodes back). Waiting sequences are then admitted in arrival
order while the budget, the sequence limit and the free KV blocks allow. When a decode has no room
for its next token, the most recently admitted running sequence is preempted: its blocks are
freed and it waits at the front of the queue to be recomputed.
"""

from __future__ import annotations

from collections import deque
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
        self, block_manager: BlockManager, *, max_num_seqs: int, max_num_batched_tokens: int
    ):
        if max_num_batched_tokens < 1 or max_num_seqs < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

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
        """Remove a sequence wherever it is and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.free(seq)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        scheduled: set[int] = set()
        # Decodes first (one token each), then prefill chunks: a long prompt never stalls them.
        decoding = [s for s in self.running if s.num_uncomputed_tokens == 1]
        prefilling = [s for s in self.running if s.num_uncomputed_tokens > 1]
        for seq in decoding + prefilling:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_tokens = min(seq.num_uncomputed_tokens, budget)
            if seq.num_uncomputed_tokens == 1 and not self._make_room(seq, batch, scheduled):
                continue  # it preempted itself
            batch.items.append((seq, num_tokens))
            scheduled.add(seq.seq_id)
            budget -= num_tokens
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.block_manager.can_allocate(seq):
                break
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            num_tokens = min(seq.num_uncomputed_tokens, budget)
            batch.items.append((seq, num_tokens))
            budget -= num_tokens
        return batch

    def _make_room(self, seq: Sequence, batch: ScheduledBatch, scheduled: set[int]) -> bool:
        """Ensure ``seq``'s next slot, preempting the newest other sequences; False if ``seq``
        itself had to be preempted."""
        while not self.block_manager.can_append(seq):
            victim = next((s for s in reversed(self.running) if s.seq_id not in scheduled), None)
            if victim is None or victim is seq:
                self._preempt(seq, batch)
                return False
            self._preempt(victim, batch)
        self.block_manager.append_slot(seq)
        return True

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        batch.preempted.append(seq)
        self.num_preemptions += 1
