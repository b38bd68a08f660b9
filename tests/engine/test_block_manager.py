"""Block manager and scheduler bookkeeping, without a model."""

from __future__ import annotations

import pytest

from engine import SamplingParams
from engine.block_manager import BlockManager
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus


def seq(tokens: list[int], request_id: str = "r") -> Sequence:
    return Sequence(request_id, 0, list(tokens), len(tokens), SamplingParams())


def test_allocate_and_free_return_every_block() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(list(range(10)))
    assert bm.can_allocate(s)
    bm.allocate(s)
    assert len(s.block_table) == 3 and bm.num_free_blocks == 5
    bm.free(s)
    assert bm.num_free_blocks == 8 and s.block_table == []


def test_prefix_cache_hits_only_computed_full_blocks() -> None:
    bm = BlockManager(num_blocks=16, block_size=4)
    first = seq(list(range(10)))
    bm.allocate(first)
    second = seq([*range(10), 99])
    bm.allocate(second)
    assert second.num_cached_tokens == 0, "blocks are not shared before their KV is computed"
    first.num_computed_tokens = 10
    bm.register_computed_blocks(first)
    third = seq([*range(10), 42])
    bm.allocate(third)
    assert third.num_cached_tokens == 8 and third.block_table[:2] == first.block_table[:2]
    assert bm.blocks[first.block_table[0]].ref_count == 2
    # Freed blocks keep their hash and are found again.
    bm.free(first)
    bm.free(third)
    fourth = seq([*range(8), 7, 7])
    bm.allocate(fourth)
    assert fourth.num_cached_tokens == 8
    assert bm.prefix_cache_hit_rate > 0


def test_a_prompt_ending_on_a_block_boundary_still_computes_its_last_token() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq(list(range(8)))
    bm.allocate(a)
    a.num_computed_tokens = 8
    bm.register_computed_blocks(a)
    b = seq(list(range(8)))
    bm.allocate(b)
    assert b.num_cached_tokens == 4 and b.num_uncomputed_tokens == 4


def test_fork_shares_blocks_and_copies_on_write() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    parent = seq(list(range(6)))
    bm.allocate(parent)
    parent.num_computed_tokens = 6
    child = seq(list(range(6)))
    bm.fork(parent, child)
    assert [bm.blocks[b].ref_count for b in parent.block_table] == [2, 2]
    child.token_ids.append(5)  # writes position 6: inside the shared second block
    assert bm.can_append(child)
    bm.append_slot(child)
    assert child.block_table[0] == parent.block_table[0]
    assert child.block_table[1] != parent.block_table[1]
    assert bm.pending_copies == [(parent.block_table[1], child.block_table[1])]
    assert [bm.blocks[b].ref_count for b in parent.block_table] == [2, 1]


def test_scheduler_chunks_long_prefills_and_keeps_decodes_running() -> None:
    bm = BlockManager(num_blocks=64, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=8)
    short, long = seq(list(range(3)), "a"), seq(list(range(20)), "b")
    sched.add(short)
    sched.add(long)
    first = sched.schedule()
    assert [(s.request_id, n) for s, n in first.items] == [("a", 3), ("b", 5)]
    for s, n in first.items:
        s.num_computed_tokens += n
    short.token_ids.append(1)  # a sampled token: now decoding
    second = sched.schedule()
    assert [(s.request_id, n) for s, n in second.items] == [("a", 1), ("b", 7)]


def test_scheduler_preempts_the_newest_sequence_when_blocks_run_out() -> None:
    bm = BlockManager(num_blocks=3, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64)
    a, b = seq(list(range(4)), "a"), seq(list(range(4)), "b")
    a.token_ids[0] = b.token_ids[0] = 0
    b.token_ids[1] = 9  # no shared prefix
    sched.add(a)
    sched.add(b)
    for s, n in sched.schedule().items:
        s.num_computed_tokens += n
        s.token_ids.append(1)
    # Each now needs a second block; only one is free: b is preempted for a.
    batch = sched.schedule()
    assert [s.request_id for s, _ in batch.items] == ["a"]
    assert batch.preempted == [b] and b.status is SequenceStatus.WAITING
    assert b.block_table == [] and b.num_computed_tokens == 0
    assert sched.waiting[0] is b and sched.num_preemptions == 1


def test_reserving_max_tokens_admits_only_what_can_run_to_completion() -> None:
    bm = BlockManager(num_blocks=6, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64, reserve_max_tokens=True)
    params = SamplingParams(max_tokens=8)  # 4 prompt + 8 output tokens: 3 blocks each
    a = Sequence("a", 0, [1, 2, 3, 4], 4, params)
    b = Sequence("b", 0, [5, 6, 7, 8], 4, params)
    c = Sequence("c", 0, [9, 10, 11, 12], 4, SamplingParams(max_tokens=8, n=2))
    for s in (a, b, c):
        sched.add(s)
    first = sched.schedule()
    # a and b fit to completion (6 blocks); c waits although its prompt block is free.
    assert [s.request_id for s, _ in first.items] == ["a", "b"] and list(sched.waiting) == [c]
    sched.finish(a)
    sched.finish(b)
    # c alone: 1 prompt block + 2 samples x 2 growth blocks = 5 <= 6.
    assert [s.request_id for s, _ in sched.schedule().items] == ["c"]

    # Nothing running: a request is admitted even when it cannot reach max_tokens.
    big = BlockManager(num_blocks=2, block_size=4)
    alone = Scheduler(big, max_num_seqs=4, max_num_batched_tokens=64, reserve_max_tokens=True)
    long = Sequence("long", 0, [1, 2, 3, 4], 4, SamplingParams(max_tokens=100))
    alone.add(long)
    assert [s.request_id for s, _ in alone.schedule().items] == ["long"]


def test_invalid_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(num_blocks=0, block_size=4)
    with pytest.raises(ValueError, match="max_num_seqs"):
        Scheduler(BlockManager(4, 4), max_num_seqs=0, max_num_batched_tokens=8)


def test_decodes_are_scheduled_before_a_long_prefill_that_would_take_the_budget() -> None:
    bm = BlockManager(num_blocks=64, block_size=4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=8)
    long, forked = seq(list(range(40)), "long"), seq(list(range(3)), "forked")
    bm.allocate(long)
    long.num_computed_tokens = 8  # mid-prefill, ahead of the other in the running list
    sched.add_running(long)
    bm.allocate(forked)
    forked.num_computed_tokens = 3
    forked.token_ids.append(1)  # decoding, appended behind (as forked samples are)
    sched.add_running(forked)
    batch = sched.schedule()
    assert [(s.request_id, n) for s, n in batch.items] == [("forked", 1), ("long", 7)]


def test_the_last_holder_of_a_shared_block_writes_in_place_and_all_blocks_return() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    parent = seq(list(range(6)))
    bm.allocate(parent)
    children = [seq(list(range(6))) for _ in range(2)]
    for child in children:
        bm.fork(parent, child)
    for s in [parent, *children]:
        s.token_ids.append(9)
    bm.append_slot(children[0])
    bm.append_slot(children[1])
    last_block = parent.block_table[1]
    assert bm.blocks[last_block].ref_count == 1
    bm.append_slot(parent)  # the sole remaining holder: no copy
    assert parent.block_table[1] == last_block and len(bm.pending_copies) == 2
    for s in [parent, *children]:
        bm.free(s)
    assert bm.num_free_blocks == 8
