"""Paged KV cache bookkeeping: fixed-size blocks, reference counts, a free list, prefix caching.

A block holds ``block_size`` consecutive token positions of one or more sequences. Sequences that
share a prefix share its blocks (reference counted): the n samples of one request after ``fork``,
and, with prefix caching, any request whose prompt starts with the same full blocks as one seen
before. A full block is registered under a hash of its tokens and of every token before it only
once its keys and values have been computed; a freed block keeps its hash until it is reused, so a
repeated system prompt or the same retrieved passages are prefilled once.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import deque
from dataclasses import dataclass

from engine.sequence import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: bytes | None = None
    token_ids: tuple[int, ...] | None = None


class BlockManager:
    """Owns the KV blocks. The scheduler asks ``can_*`` first, then does it."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.hash_to_block: dict[bytes, int] = {}
        self.pending_copies: list[tuple[int, int]] = []
        """(source, destination) block copies the model runner must make before the next step."""
        self.num_prefix_queries = 0
        self.num_prefix_hits = 0

    # ------------------------------------------------------------------ state
    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Share of full prompt blocks found in the prefix cache."""
        return self.num_prefix_hits / self.num_prefix_queries if self.num_prefix_queries else 0.0

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @staticmethod
    def chain_hash(previous: bytes | None, token_ids: tuple[int, ...]) -> bytes:
        """A digest of the block's tokens and of every block before it (blake2b: a crafted
        prompt cannot collide with another request's prefix to read its KV)."""
        digest = hashlib.blake2b(previous or b"", digest_size=16)
        digest.update(array("q", token_ids).tobytes())
        return digest.digest()

    # -------------------------------------------------------------- allocate
    def can_allocate(self, seq: Sequence) -> bool:
        """Enough free blocks for every token of ``seq`` (not counting prefix-cache hits)."""
        return self.blocks_needed(len(seq)) <= self.num_free_blocks

    def allocate(self, seq: Sequence) -> None:
        """Give ``seq`` blocks for all its tokens, reusing cached prefix blocks."""
        assert not seq.block_table, "sequence already holds blocks"
        # The last token is always computed, so that there are logits to sample from.
        num_matchable = (len(seq) - 1) // self.block_size if self.enable_prefix_caching else 0
        previous: bytes | None = None
        matching = True
        num_hits = 0
        for i in range(self.blocks_needed(len(seq))):
            block_id = None
            if matching and i < num_matchable:
                tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
                previous = self.chain_hash(previous, tokens)
                self.num_prefix_queries += 1
                block_id = self._lookup(previous, tokens)
                if block_id is None:
                    matching = False
                else:
                    num_hits += 1
                    self.num_prefix_hits += 1
            if block_id is None:
                block_id = self._take_free_block()
            self.blocks[block_id].ref_count += 1
            seq.block_table.append(block_id)
        seq.num_cached_tokens = num_hits * self.block_size
        seq.num_computed_tokens = seq.num_cached_tokens
        # A draft model's cache is paged by the same blocks and fills prompt blocks alongside
        # the target's (``engine.draft_model``): a cached prefix is cached for it too.
        seq.num_draft_computed_tokens = seq.num_cached_tokens
        if seq.num_prompt_cached_tokens is None:
            seq.num_prompt_cached_tokens = min(seq.num_cached_tokens, seq.num_prompt_tokens)

    def _lookup(self, block_hash: bytes, tokens: tuple[int, ...]) -> int | None:
        block_id = self.hash_to_block.get(block_hash)
        if block_id is None or self.blocks[block_id].token_ids != tokens:
            return None
        if self.blocks[block_id].ref_count == 0:
            self.free_block_ids.remove(block_id)  # resurrect a freed but still cached block
        return block_id

    def _take_free_block(self) -> int:
        if not self.free_block_ids:
            raise RuntimeError("no free KV blocks (the scheduler should have checked)")
        block_id = self.free_block_ids.popleft()
        block = self.blocks[block_id]
        if block.hash is not None and self.hash_to_block.get(block.hash) == block_id:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids = None, None
        return block_id

    # ---------------------------------------------------------------- append
    def can_append(self, seq: Sequence, num_slots: int = 1) -> bool:
        """Is there room for the slot of ``seq``'s newest token, and for the ``num_slots - 1``
        positions after it (draft tokens)?"""
        return len(self._blocks_to_write(seq, num_slots)) <= self.num_free_blocks

    def can_append_all(self, appends: list[tuple[Sequence, int]]) -> bool:
        """``can_append`` for several sequences at once (a sequence and its shadow)."""
        needed = sum(len(self._blocks_to_write(seq, n)) for seq, n in appends)
        return needed <= self.num_free_blocks

    def _blocks_to_write(self, seq: Sequence, num_slots: int) -> list[int]:
        """Indexes into the block table that need a new block (past its end) or a private copy
        (shared) before positions ``len(seq) - 1 ..`` + ``num_slots`` can be written."""
        first = (len(seq) - 1) // self.block_size
        last = (len(seq) - 2 + num_slots) // self.block_size
        table = seq.block_table
        return [
            index
            for index in range(first, last + 1)
            if index >= len(table) or self.blocks[table[index]].ref_count > 1
        ]

    def append_slot(self, seq: Sequence, num_slots: int = 1) -> None:
        """Make the newest token's slot (and ``num_slots - 1`` more) writable: new blocks, or
        private copies of shared ones."""
        for index in self._blocks_to_write(seq, num_slots):
            block_id = self._take_free_block()
            self.blocks[block_id].ref_count = 1
            if index >= len(seq.block_table):
                seq.block_table.append(block_id)
                continue
            shared = self.blocks[seq.block_table[index]]
            shared.ref_count -= 1
            seq.block_table[index] = block_id
            self.pending_copies.append((shared.block_id, block_id))

    def trim(self, seq: Sequence) -> None:
        """Free the blocks past ``seq``'s last token (slots of rejected draft tokens)."""
        keep = self.blocks_needed(len(seq))
        while len(seq.block_table) > keep:
            block = self.blocks[seq.block_table.pop()]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids.append(block.block_id)

    # ------------------------------------------------------------ fork, free
    def fork(self, parent: Sequence, child: Sequence) -> None:
        """``child`` shares every block of ``parent`` (copy on write later)."""
        child.block_table = list(parent.block_table)
        for block_id in child.block_table:
            self.blocks[block_id].ref_count += 1
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        child.num_draft_computed_tokens = parent.num_draft_computed_tokens
        child.num_prompt_cached_tokens = parent.num_prompt_cached_tokens

    def free(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks; unshared ones return to the free list (keeping their hash)."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, "block freed twice"
            if block.ref_count == 0:
                self.free_block_ids.append(block_id)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_cached_tokens = 0
        seq.num_draft_computed_tokens = 0

    def register_computed_blocks(self, seq: Sequence) -> None:
        """Publish ``seq``'s full, computed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        previous: bytes | None = None
        for i in range(seq.num_computed_tokens // self.block_size):
            block = self.blocks[seq.block_table[i]]
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            if block.hash is None:
                block.hash = self.chain_hash(previous, tokens)
                block.token_ids = tokens
                self.hash_to_block.setdefault(block.hash, block.block_id)
            previous = block.hash
