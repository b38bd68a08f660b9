"""Turns a scheduled batch into tensors, runs the model on the paged KV cache, returns logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.cuda_graphs import DecodeGraphs
from engine.layers.attention import AttentionMetadata, CausalChunk, PagedGroup
from engine.models.llama import LlamaForCausalLM
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence

DECODE_GROUP_MIN_SIZE = 16
"""Decodes are split into groups of similar context length only while each keeps this many:
a group costs a few small kernel calls per layer, padding costs copies and attention work."""
DECODE_GROUPS_MAX = 4


@dataclass(frozen=True, slots=True)
class TokenSpan:
    """Consecutive tokens of one sequence to compute into the cache in a step."""

    token_ids: list[int]
    start: int
    """Position of the first; the cache holds every position before it."""
    block_table: list[int]
    num_logit_rows: int = 0
    """How many of the span's last positions return logits (0: none)."""
    decode: bool = False
    """A short query after a cached context (a decode, perhaps with draft tokens): decodes are
    batched in groups of similar context length."""


class ModelRunner:
    """Owns the model and the KV cache tensors."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        device: str,
        dtype: torch.dtype,
        decode_graphs: tuple[int, int] | None = None,
    ) -> None:
        """``num_blocks`` KV blocks for the block manager. ``decode_graphs`` = (max_num_seqs,
        max_blocks_per_seq) replays decode steps up to that size as CUDA graphs; the cache then
        holds one more block, the graphs' scratch block for padding rows."""
        self.model = model
        self.block_size = block_size
        self.device = torch.device(device)
        num_cache_blocks = num_blocks + (decode_graphs is not None)
        shape = (num_cache_blocks, block_size, model.num_kv_heads, model.head_dim)
        self.kv_caches = [
            (
                torch.zeros(shape, dtype=dtype, device=self.device),
                torch.zeros(shape, dtype=dtype, device=self.device),
            )
            for _ in range(model.num_layers)
        ]
        self._gather_buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self.decode_graphs: DecodeGraphs | None = None
        if decode_graphs is not None:
            max_num_seqs, max_blocks_per_seq = decode_graphs
            self.decode_graphs = DecodeGraphs(
                model, self.kv_caches, num_blocks, max_num_seqs, max_blocks_per_seq
            )

    def gather_buffers(self, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Key and value buffers with room for ``num_blocks`` gathered blocks, grown (by half as
        much again) when a step needs more, then kept for every later layer and step."""
        buffers = self._gather_buffers
        current = 0 if buffers is None else buffers[0].shape[0]
        if buffers is None or current < num_blocks:
            k_cache = self.kv_caches[0][0]
            shape = (max(num_blocks, 3 * current // 2), *k_cache.shape[1:])
            buffers = (
                torch.empty(shape, dtype=k_cache.dtype, device=self.device),
                torch.empty(shape, dtype=k_cache.dtype, device=self.device),
            )
            self._gather_buffers = buffers
        return buffers

    def _group(
        self,
        members: list[int],
        query_lens: list[int],
        context_lens: list[int],
        block_tables: list[list[int]],
        starts: torch.Tensor,
    ) -> PagedGroup:
        """Padded attention inputs for the sequences ``members`` (indexes into the batch)."""
        bs = self.block_size
        q_lens = torch.tensor([query_lens[m] for m in members])
        ctx_lens = torch.tensor([context_lens[m] for m in members])
        first = starts[members]
        tables = _pad_tables([block_tables[m] for m in members])
        offsets = torch.arange(int(q_lens.max()))
        is_real = offsets[None, :] < q_lens[:, None]
        # Padded query rows repeat the sequence's first row; their outputs are never read.
        query_index = first[:, None] + torch.where(is_real, offsets[None, :], 0)
        key_pos = torch.arange(tables.shape[1] * bs)
        query_pos = (ctx_lens - q_lens)[:, None] + offsets[None, :]  # absolute positions
        mask = (key_pos[None, None, :] <= query_pos[:, :, None]) & (
            key_pos[None, None, :] < ctx_lens[:, None, None]
        )
        row_batch = torch.repeat_interleave(torch.arange(len(members)), q_lens)
        row_offset = torch.cat([torch.arange(int(n)) for n in q_lens])
        dev = self.device
        return PagedGroup(
            query_index=query_index.to(dev),
            block_tables=tables.to(dev),
            attn_mask=mask[:, None].to(dev),
            rows=(first[row_batch] + row_offset).to(dev),
            row_batch=row_batch.to(dev),
            row_offset=row_offset.to(dev),
        )

    @staticmethod
    def kv_bytes_per_block(model: LlamaForCausalLM, block_size: int, dtype: torch.dtype) -> int:
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * model.num_layers * block_size * model.num_kv_heads * model.head_dim * element

    def copy_blocks(self, copies: list[tuple[int, int]]) -> None:
        """Copy-on-write: duplicate the KV of whole blocks (source -> destination)."""
        if not copies:
            return
        src = torch.tensor([s for s, _ in copies], device=self.device)
        dst = torch.tensor([d for _, d in copies], device=self.device)
        for k_cache, v_cache in self.kv_caches:
            k_cache[dst] = k_cache[src]
            v_cache[dst] = v_cache[src]

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> tuple[list[Sequence], torch.Tensor]:
        """Compute the scheduled tokens; return the sequences that reached their end (and so
        sample a next token) with their logits: one row each, and one more per draft token."""
        graphs = self.decode_graphs
        if graphs is not None and _is_decode_only(batch):
            seqs = [seq for seq, _ in batch.items]
            shape = graphs.bucket_for(len(seqs), max(len(s.block_table) for s in seqs))
            if shape is not None:
                logits = graphs.run(
                    shape,
                    [s.token_ids[-1] for s in seqs],
                    [len(s) - 1 for s in seqs],
                    [s.block_table for s in seqs],
                )
                return seqs, logits
        spans: list[TokenSpan] = []
        sampling: list[Sequence] = []
        for seq, num_tokens in batch.items:
            start = seq.num_computed_tokens
            end = start + num_tokens
            draft = seq.draft_token_ids
            tokens = (seq.token_ids + draft)[start:end] if draft else seq.token_ids[start:end]
            # The last real token, and any drafts after it, give logits.
            ends = end >= len(seq)
            spans.append(
                TokenSpan(
                    tokens,
                    start,
                    seq.block_table,
                    1 + len(draft) if ends else 0,
                    decode=num_tokens == 1 or bool(draft),
                )
            )
            if ends:
                sampling.append(seq)
        logits = self.forward(spans)
        return sampling, logits

    @torch.inference_mode()
    def forward(self, spans: list[TokenSpan]) -> torch.Tensor:
        """Compute every span's tokens into the cache; the logits of each span's last
        ``num_logit_rows`` positions, in span order (an empty tensor when none asks)."""
        input_ids, positions, meta, last_rows = self._prepare(spans)
        hidden = self.model(input_ids, positions, self.kv_caches, meta)
        if last_rows.numel() == 0:
            return torch.empty(0)
        return self.model.logits(hidden[last_rows])

    def _prepare(
        self, spans: list[TokenSpan]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        bs = self.block_size
        token_ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        context_lens: list[int] = []
        block_tables: list[list[int]] = []
        last_rows: list[int] = []
        for span in spans:
            end = span.start + len(span.token_ids)
            token_ids += span.token_ids
            positions += range(span.start, end)
            query_lens.append(len(span.token_ids))
            context_lens.append(end)
            block_tables.append(span.block_table)
            last_rows += range(len(token_ids) - span.num_logit_rows, len(token_ids))
        dev = self.device
        pos = torch.tensor(positions, dtype=torch.long)
        q_lens = torch.tensor(query_lens)
        starts = torch.cumsum(q_lens, 0) - q_lens
        token_seq = torch.repeat_interleave(torch.arange(len(query_lens)), q_lens)
        tables = _pad_tables(block_tables)
        slot_mapping = tables[token_seq, pos // bs] * bs + pos % bs
        groups: list[CausalChunk | PagedGroup] = []
        decodes: list[int] = []
        for i, (n, first) in enumerate(zip(query_lens, starts.tolist(), strict=True)):
            if spans[i].decode:  # a decode, with or without drafts
                decodes.append(i)
            elif context_lens[i] == n:  # a prompt's first chunk: nothing cached to read back
                groups.append(CausalChunk(start=first, length=n))
            else:
                groups.append(self._group([i], query_lens, context_lens, block_tables, starts))
        groups += [
            self._group(members, query_lens, context_lens, block_tables, starts)
            for members in _by_context_length(decodes, context_lens)
        ]
        gathered = max(
            (g.block_tables.numel() for g in groups if isinstance(g, PagedGroup)), default=0
        )
        meta = AttentionMetadata(
            slot_mapping=slot_mapping.to(dev),
            groups=groups,
            gather_buffers=self.gather_buffers(gathered) if gathered else None,
        )
        input_ids = torch.tensor(token_ids, dtype=torch.long, device=dev)
        return input_ids, pos.to(dev), meta, torch.tensor(last_rows, dtype=torch.long, device=dev)


def _is_decode_only(batch: ScheduledBatch) -> bool:
    """Every scheduled sequence computes exactly its last token (and so samples the next)."""
    return all(
        n == 1 and seq.num_computed_tokens + 1 == len(seq) and not seq.draft_token_ids
        for seq, n in batch.items
    )


def _pad_tables(block_tables: list[list[int]]) -> torch.Tensor:
    """Block tables as one (num_seqs, max_blocks) tensor, padded with block 0."""
    tables = torch.zeros(len(block_tables), max(len(t) for t in block_tables), dtype=torch.long)
    for i, table in enumerate(block_tables):
        tables[i, : len(table)] = torch.tensor(table)
    return tables


def _by_context_length(decodes: list[int], context_lens: list[int]) -> list[list[int]]:
    """Decodes in groups of equal count by ascending context length, so a few long contexts do
    not pad every short one to their length (at most ``DECODE_GROUPS_MAX`` groups, each of at
    least ``DECODE_GROUP_MIN_SIZE`` sequences; fewer decodes make one group)."""
    if not decodes:
        return []
    order = sorted(decodes, key=context_lens.__getitem__)
    count = max(1, min(DECODE_GROUPS_MAX, len(order) // DECODE_GROUP_MIN_SIZE))
    size = -(-len(order) // count)
    return [order[i : i + size] for i in range(0, len(order), size)]
