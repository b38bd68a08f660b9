"""Turns a scheduled batch into tensors, runs the model on the paged KV cache, returns logits."""

from __future__ import annotations

import torch

from engine.layers.attention import AttentionMetadata
from engine.models.llama import LlamaForCausalLM
from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence


class ModelRunner:
    """Owns the model and the KV cache tensors."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size: int,
        device: str,
        dtype: torch.dtype,
    ):
        self.model = model
        self.block_size = block_size
        self.device = torch.device(device)
        shape = (num_blocks, block_size, model.num_kv_heads, model.head_dim)
        self.kv_caches = [
            (
                torch.zeros(shape, dtype=dtype, device=self.device),
                torch.zeros(shape, dtype=dtype, device=self.device),
            )
            for _ in range(model.num_layers)
        ]

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
        sample a next token) with their logits, one row each."""
        input_ids, positions, meta, last_rows, sampling = self._prepare(batch)
        hidden = self.model(input_ids, positions, self.kv_caches, meta)
        if not sampling:
            return [], torch.empty(0)
        return sampling, self.model.logits(hidden[last_rows])

    def _prepare(
        self, batch: ScheduledBatch
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor, list[Sequence]]:
        bs = self.block_size
        token_ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        context_lens: list[int] = []
        block_tables: list[list[int]] = []
        last_rows: list[int] = []
        sampling: list[Sequence] = []
        for seq, num_tokens in batch.items:
            start = seq.num_computed_tokens
            end = start + num_tokens
            token_ids += seq.token_ids[start:end]
            positions += range(start, end)
            query_lens.append(num_tokens)
            context_lens.append(end)
            block_tables.append(seq.block_table)
            if end == len(seq):
                sampling.append(seq)
                last_rows.append(len(token_ids) - 1)
        dev = self.device
        pos = torch.tensor(positions, dtype=torch.long)
        num_seqs = len(batch.items)
        max_q = max(query_lens)
        width = max(len(t) for t in block_tables)
        tables = torch.zeros(num_seqs, width, dtype=torch.long)
        for i, t in enumerate(block_tables):
            tables[i, : len(t)] = torch.tensor(t)
        q_lens = torch.tensor(query_lens)
        ctx_lens = torch.tensor(context_lens)
        starts = torch.cumsum(q_lens, 0) - q_lens
        token_batch = torch.repeat_interleave(torch.arange(num_seqs), q_lens)
        token_offset = torch.arange(len(token_ids)) - starts[token_batch]
        slot_mapping = tables[token_batch, pos // bs] * bs + pos % bs
        offsets = torch.arange(max_q)
        query_index = torch.where(
            offsets[None, :] < q_lens[:, None], starts[:, None] + offsets[None, :], 0
        )
        key_pos = torch.arange(width * bs)
        query_pos = (ctx_lens - q_lens)[:, None] + offsets[
            None, :
        ]  # absolute position of each query
        mask = key_pos[None, None, :] <= query_pos[:, :, None]
        mask &= key_pos[None, None, :] < ctx_lens[:, None, None]
        mask[:, :, 0] = True  # padded query rows must see something (their output is discarded)
        meta = AttentionMetadata(
            slot_mapping=slot_mapping.to(dev),
            query_index=query_index.to(dev),
            block_tables=tables.to(dev),
            attn_mask=mask[:, None].to(dev),
            token_batch=token_batch.to(dev),
            token_offset=token_offset.to(dev),
        )
        input_ids = torch.tensor(token_ids, dtype=torch.long, device=dev)
        return input_ids, pos.to(dev), meta, torch.tensor(last_rows, device=dev), sampling
