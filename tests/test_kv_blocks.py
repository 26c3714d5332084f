"""The K/V books (`kv_blocks`) and what a forward reads of the pool (`paged_kv`), alone: no model."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.kv_blocks import NULL_BLOCK, BlockPool, BranchBlocks, CacheSpan, PoolExhausted
from pipeline.engine.paged_kv import (
    CHUNK_KEYS,
    DenseKeys,
    KeyChunks,
    KVPoolShape,
    PagedKVPool,
    chunks_for,
    eager_view,
    plan_chunks,
    token_slots,
)
from pipeline.engine.step_records import KeyReads


def test_the_pool_hands_out_every_block_but_the_null_one_once() -> None:
    pool = BlockPool(num_blocks=5, block_size=4)
    taken = pool.take(4)
    assert sorted(taken) == [1, 2, 3, 4] and pool.free == 0 and pool.in_use == 4
    with pytest.raises(PoolExhausted, match="1 K/V blocks wanted, 0 free"):
        pool.take(1)
    pool.give_back(taken[:2])
    assert pool.free == 2
    with pytest.raises(ValueError, match="given back twice"):
        pool.give_back(taken[:1])


def test_a_branch_grows_a_block_at_a_time_and_takes_nothing_when_short() -> None:
    pool = BlockPool(num_blocks=4, block_size=4)
    branch = BranchBlocks()
    branch.grow(pool, 4)
    assert branch.held == 1
    branch.grow(pool, 5)
    assert branch.held == 2
    with pytest.raises(PoolExhausted):
        branch.grow(pool, 20)  # three more wanted, one free
    assert branch.held == 2 and pool.free == 1
    branch.release(pool)
    assert pool.free == 3 and branch.table == [] and branch.length == 0


def test_hidden_history_gives_back_every_whole_block() -> None:
    pool = BlockPool(num_blocks=10, block_size=4)
    branch = BranchBlocks()
    branch.grow(pool, 18)  # five blocks
    branch.length = 17
    branch.hide_history(pool)
    assert branch.visible_from == 17
    assert branch.table[:4] == [NULL_BLOCK] * 4 and branch.table[4] != NULL_BLOCK  # the first entry goes too
    assert branch.held == 1 and pool.free == 8


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["grow", "write", "hide", "release"]), st.integers(1, 30)))
)
def test_no_block_is_lost_or_held_twice(operations) -> None:  # type: ignore[no-untyped-def]
    pool = BlockPool(num_blocks=24, block_size=3)
    branches = [BranchBlocks() for _ in range(6)]
    for index, operation, tokens in operations:
        branch = branches[index]
        if operation == "grow":
            try:
                branch.grow(pool, branch.length + tokens)
            except PoolExhausted:
                pass
        elif operation == "write":
            branch.length = min(branch.length + tokens, len(branch.table) * pool.block_size)
        elif operation == "hide":
            branch.hide_history(pool)
        else:
            branch.release(pool)
        held = [block for branch in branches for block in branch.table if block != NULL_BLOCK]
        assert len(held) == len(set(held)) == pool.in_use
    for branch in branches:
        branch.release(pool)
    assert pool.free == pool.total


def test_token_slots_follow_each_table_and_land_past_it_in_the_null_block() -> None:
    tables = torch.tensor([[3, 1], [2, 0]])
    positions = torch.tensor([[0, 3, 4, 7, 8], [1, 2, 5, 9, 100]])
    assert token_slots(tables, positions, block_size=4).tolist() == [[12, 15, 4, 7, 0], [9, 10, 1, 1, 0]]


def one_value_pool(block_size: int, num_blocks: int) -> PagedKVPool:
    """A pool of one layer and one head of one value: the views' arithmetic, without attention."""
    return PagedKVPool(KVPoolShape(1, 1, 1, block_size), num_blocks, torch.device("cpu"), torch.float32)


def test_a_prefill_view_reads_only_the_visible_entries_and_counts_positions_from_the_restart() -> None:
    pool = one_value_pool(block_size=2, num_blocks=8)
    # A branch of 6 entries in blocks 5, 2, 7, 4 whose history before position 5 is hidden (block 1 of it given back).
    # (A span still naming block 5 for position 0: the view must not read it all the same.)
    span = CacheSpan(blocks=(5, NULL_BLOCK, 7, 4), length=6, visible_from=5)
    view = eager_view(pool, [span], new_tokens=2, device=torch.device("cpu"))
    assert view.positions.tolist() == [[1, 2]]  # the second and third entries since the restart, as the original counts
    assert view.write_slots.tolist() == [[4 * 2, 4 * 2 + 1]]
    # the window from the start of position 5's block (4) to the new entries (6, 7); position 4 is masked
    assert isinstance(view.keys, DenseKeys)
    assert view.keys.slots.tolist() == [[7 * 2, 7 * 2 + 1, 4 * 2, 4 * 2 + 1]]
    assert view.keys.mask[0, 0].tolist() == [[False, True, True, False], [False, True, True, True]]
    assert view.reads == KeyReads(read=4, visible=3)


def test_a_decode_view_reads_each_rows_own_window_in_chunks() -> None:
    pool = one_value_pool(block_size=16, num_blocks=40)
    long = CacheSpan(tuple(range(1, 31)), length=470, visible_from=0)  # 471 visible with its new entry
    short = CacheSpan((31, 32), length=20, visible_from=0)
    restarted = CacheSpan((NULL_BLOCK, NULL_BLOCK, 33, 34, 35), length=70, visible_from=40)  # 31 since position 40
    view = eager_view(pool, [long, short, restarted], new_tokens=1, device=torch.device("cpu"))
    chunks = view.keys
    assert isinstance(chunks, KeyChunks)
    assert torch.bincount(chunks.rows, minlength=3).tolist() == [chunks_for(471), 1, 1] == [8, 1, 1]
    assert view.reads == KeyReads(read=10 * CHUNK_KEYS, visible=471 + 21 + 31)
    # each row sees exactly its window, from its visible start through its new entry
    _, starts = plan_chunks([(0, 471), (0, 21), (40, 71)])
    for row, window in enumerate([range(471), range(21), range(40, 71)]):
        mine = chunks.rows == row
        seen = {
            start + offset
            for start, mask in zip(torch.tensor(starts)[mine].tolist(), chunks.visible[mine], strict=True)
            for offset in torch.nonzero(mask).flatten().tolist()
        }
        assert seen == set(window)
    assert view.positions.tolist() == [[470], [20], [30]]  # the restarted row counts from its restart
    assert chunks.slots[chunks.rows == 2][0, 0].item() == 33 * 16 + 8  # position 40: block 2 (33), offset 8


def test_no_row_reads_more_than_twice_its_window_or_one_chunk() -> None:
    for first, end in [(0, 1), (0, 64), (0, 65), (3, 200), (37, 1037), (0, 60_001)]:
        rows, starts = plan_chunks([(first, end)])
        assert len(rows) * CHUNK_KEYS <= max(2 * (end - first), CHUNK_KEYS)
        assert starts[0] == first and starts[-1] < end <= starts[-1] + CHUNK_KEYS


def test_a_view_writes_each_new_entry_in_its_slot_and_returns_what_each_row_reads() -> None:
    shape = KVPoolShape(layers=1, kv_heads=1, head_dim=2, block_size=2)
    pool = PagedKVPool(shape, num_blocks=6, device=torch.device("cpu"), dtype=torch.float32)
    spans = [CacheSpan((3, 1), 2, 0), CacheSpan((2,), 0, 0)]
    view = eager_view(pool, spans, new_tokens=2, device=torch.device("cpu"))
    new = torch.tensor([[[[1.0, 1.0], [3.0, 3.0]]], [[[2.0, 2.0], [4.0, 4.0]]]])  # [rows, heads, new, dim]
    keys, values = view.update(new, new, layer_idx=0)
    assert pool.keys[0][1 * 2 + 0].tolist() == [[1.0, 1.0]]  # row 0's third entry: block 1, offset 0
    assert pool.keys[0][2 * 2 + 0].tolist() == [[2.0, 2.0]]  # row 1's first entry: block 2, offset 0
    assert keys.shape == (2, 1, 4, 2)  # the 4 keys of the longer row's window
    assert keys[0, 0, 2].tolist() == [1.0, 1.0] and keys[1, 0, 0].tolist() == [2.0, 2.0]
